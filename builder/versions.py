"""Dataset versions as code: each version is declared once, with its notes and config.

Bump rules (docs/ARCHITECTURE.md, "Version bump rules"): rows removed or changed (e.g. a consent
withdrawal) -> MAJOR; rows or columns added (a new noise condition) -> MINOR;
the same rows re-encoded -> PATCH. `tests/test_versions.py` fails when a
declared config changes without a new version and a note.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from redvox.noise import mixes_speech
from redvox.schemas import SAMPLE_RATE, ItemSelection, NoiseCondition
from redvox.schemas.errors import UserError
from redvox.schemas.vocab import Lang

# BuildConfig fields that are left out of config_hash when off (None).
OPTIONAL_STAGES = ("transcribe",)


class VadParams(BaseModel):
    """Silero VAD settings (the `get_speech_timestamps` defaults) and the validity rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    threshold: float = 0.5
    min_speech_duration_ms: int = 250
    min_silence_duration_ms: int = 100
    speech_pad_ms: int = 30
    min_speech_s: float = Field(
        default=0.5, description="less detected speech than this: quarantined"
    )
    min_speech_ratio: float = Field(
        default=0.15, description="speech / duration below this: quarantined"
    )


class RepresentativenessThresholds(BaseModel):
    """Gate of the public subset against the full set (paper: rho = 0.98, V <= .09)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_cramers_v: float = 0.10
    min_spearman_rho: float = 0.90
    max_spearman_p: float = 0.01


class TranscribeConfig(BaseModel):
    """The optional ASR stage: fills `transcript` where the collection provided none."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    backend: Literal["openai-whisper"] = "openai-whisper"
    model: str = Field(
        default="large-v3-turbo",
        min_length=1,
        description="a Whisper model name (whisper.available_models()) or a local checkpoint path",
    )
    sample_len: int | None = Field(
        default=None,
        ge=1,
        description="most tokens decoded per 30 s window (None: Whisper's default)",
    )


class BuildConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    # Written out by every version, never a default: a language the builder learns later
    # must not change what an earlier version reads, builds or hashes.
    languages: tuple[Lang, ...] = Field(
        min_length=1,
        description="the languages this version reads from the sources and writes, in order",
    )
    items: ItemSelection | None = Field(
        default=None,
        description=(
            "None: the input config's selection (the items belong to the collection); "
            "set it, with item_keys, to pin the items of a version in code"
        ),
    )
    sample_rate: int = SAMPLE_RATE
    clip_s: float = 6.0
    seed: int
    vad: VadParams = Field(default_factory=VadParams)
    conditions: tuple[NoiseCondition, ...]
    columns: tuple[str, ...] = Field(
        description="the Entry columns this version writes, pinned so a schema change needs a version"
    )
    representativeness: RepresentativenessThresholds = Field(
        default_factory=RepresentativenessThresholds
    )
    transcribe: TranscribeConfig | None = Field(
        default=None,
        description=(
            "None: `transcript` is the collection's or null; set: ASR fills the missing ones"
        ),
    )

    @model_validator(mode="after")
    def _applied(self) -> BuildConfig:
        """sample_rate and clip_s are what the builder writes, not wishes: refuse a
        config that asks for something else, rather than build something else."""
        if len(set(self.languages)) != len(self.languages):
            raise ValueError(f"languages {list(self.languages)}: each language once")
        if self.sample_rate != SAMPLE_RATE:
            raise ValueError(
                f"sample_rate {self.sample_rate}: this builder writes 16 kHz only "
                f"(sample_rate: {SAMPLE_RATE})"
            )
        for condition in self.conditions:
            if not mixes_speech(condition) and condition.duration_s != self.clip_s:
                raise ValueError(
                    f"condition {condition.name!r} ({condition.kind}) renders "
                    f"{condition.duration_s} s clips but clip_s is {self.clip_s}; set its "
                    f"duration_s to {self.clip_s} or change clip_s"
                )
        return self

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of this config: what `versions.lock.json` pins."""
        # An absent optional stage is left out, so adding a stage to the builder keeps
        # the hashes of the versions declared before it.
        dumped = self.model_dump(mode="json")
        for name in OPTIONAL_STAGES:
            if dumped.get(name) is None:
                dumped.pop(name, None)
        canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def condition(self, name: str) -> NoiseCondition:
        for cond in self.conditions:
            if cond.name == name:
                return cond
        raise KeyError(
            f"no condition {name!r} in this version; it has {', '.join(c.name for c in self.conditions)}"
        )


class DatasetVersion(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    release_notes: str = Field(min_length=1)
    config: BuildConfig

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @property
    def parts(self) -> tuple[int, int, int]:
        major, minor, patch = (int(p) for p in self.version.split("."))
        return major, minor, patch


# Written out rather than taken from `redvox.schemas.COLUMNS`: a column added to
# `Entry` must not silently change what an already released version declares.
_V1_COLUMNS = (
    "ID", "audio", "original_id", "user_id", "lang", "vulnerability_type", "attack_type",
    "audio_type", "modality", "user_text", "transcript", "gender", "mother_tongue",
    "ethnicity", "age_group", "entry_key", "source", "prompt_text", "native_speaker",
    "duration_s", "condition_params", "builder_version",
)  # fmt: skip

# The languages of the v1 releases, written out like the columns: a language added later
# is a new version's.
_V1_LANGUAGES = ("en", "de", "es", "fr", "it")

# The v1 public release: one shared 6 s clip per condition.
_V1_CONDITIONS = (
    NoiseCondition(
        name="silence", kind="silence", sampling="shared", description="digital silence"
    ),
    NoiseCondition(
        name="noise_a",
        kind="ambient",
        sampling="shared",
        params={"level_dbfs": [-35.0, -25.0]},
        description="ambient noise excerpt from the MUSAN noise bank at an absolute RMS level",
    ),
    NoiseCondition(
        name="noise_b",
        kind="babble",
        sampling="shared",
        params={"speakers": [3, 7], "level_dbfs": [-35.0, -25.0]},
        description="babble: 3-7 distinct MUSAN speech speakers, each level-normalised, summed",
    ),
)

_RELEASES: tuple[dict[str, Any], ...] = (
    {
        "version": "1.0.0",
        "release_notes": (
            "First public release, as in the paper: speech requests plus text requests "
            "paired with silence, ambient noise (noise_a) and babble (noise_b), one shared "
            "6 s clip per condition."
        ),
        "config": {
            "languages": _V1_LANGUAGES,
            "seed": 20260601,
            "conditions": _V1_CONDITIONS,
            "columns": _V1_COLUMNS,
        },
    },
    {
        "version": "1.1.0",
        "release_notes": (
            "Adds speech_noise_a: every speech recording mixed with a per-entry ambient "
            "noise excerpt at 10 dB SNR (audiomentations AddBackgroundNoise, seeded per "
            "entry). Existing rows are unchanged."
        ),
        "config": {
            "languages": _V1_LANGUAGES,
            "seed": 20260601,
            "columns": _V1_COLUMNS,
            "conditions": (
                *_V1_CONDITIONS,
                NoiseCondition(
                    name="speech_noise_a",
                    kind="speech_ambient",
                    sampling="per_entry",
                    params={"snr_db": [10.0, 10.0]},
                    description="the speech recording mixed with MUSAN ambient noise at 10 dB SNR",
                ),
            ),
        },
    },
)

VERSIONS: dict[str, DatasetVersion] = {
    r["version"]: DatasetVersion(
        version=r["version"], release_notes=r["release_notes"], config=BuildConfig(**r["config"])
    )
    for r in _RELEASES
}
LATEST: str = max(VERSIONS, key=lambda v: VERSIONS[v].parts)


def declared_languages() -> tuple[str, ...]:
    """Every language a declared version builds, in the order they were first declared:
    the languages the builder knows (a public report's `lang` is one of them, and the
    evaluator's table lists them, tests/test_eval_standalone.py)."""
    return tuple(dict.fromkeys(lang for v in VERSIONS.values() for lang in v.config.languages))


class UnknownVersionError(UserError, KeyError):
    """A version string this builder does not declare (a KeyError, for older callers)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def get_version(version: str | None = None) -> DatasetVersion:
    """The declared version (latest when None); an unknown string lists the known ones."""
    key = (version or LATEST).removeprefix("v")
    if key not in VERSIONS:
        raise UnknownVersionError(
            f"unknown dataset version {version!r}; declared: {', '.join(VERSIONS)}"
        )
    return VERSIONS[key]


Bump = Literal["major", "minor", "patch"]
_BUMP_ORDER: dict[str, int] = {"patch": 0, "minor": 1, "major": 2}
LOCK_FILE = Path(__file__).with_name("versions.lock.json")


def required_bump(previous: BuildConfig, current: BuildConfig) -> tuple[Bump, list[str]]:
    """The smallest bump that `current` needs after `previous`, and why.

    Rows removed or changed -> major; rows or columns added -> minor; else patch.
    """
    major: list[str] = []
    minor: list[str] = []
    for name in ("items", "sample_rate", "clip_s", "seed", "vad", "transcribe"):
        if getattr(previous, name) != getattr(current, name):
            major.append(f"{name} changed")
    _compare_sets("language", previous.languages, current.languages, major, minor)
    _compare_sets("column", previous.columns, current.columns, major, minor)
    before = {c.name: c for c in previous.conditions}
    after = {c.name: c for c in current.conditions}
    _compare_sets("condition", tuple(before), tuple(after), major, minor)
    major += [f"condition {n} changed" for n in before if n in after and before[n] != after[n]]
    if major:
        return "major", major
    if minor:
        return "minor", minor
    return "patch", []


def _compare_sets(
    what: str, before: tuple[str, ...], after: tuple[str, ...], major: list[str], minor: list[str]
) -> None:
    major += [f"{what} {x} removed" for x in before if x not in after]
    minor += [f"{what} {x} added" for x in after if x not in before]


def bump_between(previous: DatasetVersion, current: DatasetVersion) -> Bump:
    """Which part of the version string went up from `previous` to `current`."""
    old, new = previous.parts, current.parts
    if new[0] != old[0]:
        return "major"
    return "minor" if new[1] != old[1] else "patch"


def bump_is_enough(actual: Bump, required: Bump) -> bool:
    return _BUMP_ORDER[actual] >= _BUMP_ORDER[required]


def read_lock(path: Path = LOCK_FILE) -> dict[str, dict[str, str]]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def pin_new_versions(path: Path = LOCK_FILE) -> list[str]:
    """Add the config hash of every version not yet pinned; existing pins never change,
    since a released version's configuration is frozen."""
    lock = read_lock(path)
    added = [v for v in VERSIONS if v not in lock]
    for v in added:
        lock[v] = {"config_hash": VERSIONS[v].config.config_hash()}
    ordered = dict(sorted(lock.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))
    path.write_text(json.dumps(ordered, indent=2) + "\n", encoding="utf-8")
    return added


if __name__ == "__main__":
    # `python -m redvox.builder.versions`: pin a newly declared version.
    pinned = pin_new_versions()
    sys.stdout.write(f"pinned {', '.join(pinned)}\n" if pinned else "nothing new to pin\n")

"""Dataset versions as code: each version is declared once, with its notes and config.

Bump rules (DESIGN.md section 3): rows removed or changed (e.g. a consent
withdrawal) -> MAJOR; rows or columns added (a new noise condition) -> MINOR;
the same rows re-encoded -> PATCH. `tests/test_versions.py` fails when a
declared config changes without a new version and a note.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from redvox.schemas import LANGUAGES, SAMPLE_RATE, ItemSelection, NoiseCondition


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


class BuildConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    languages: tuple[str, ...] = LANGUAGES
    items: ItemSelection = Field(default_factory=ItemSelection)
    sample_rate: int = SAMPLE_RATE
    clip_s: float = 6.0
    seed: int
    vad: VadParams = Field(default_factory=VadParams)
    conditions: tuple[NoiseCondition, ...]
    representativeness: RepresentativenessThresholds = Field(
        default_factory=RepresentativenessThresholds
    )

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of this config: what `versions.lock.json` pins."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
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
        "config": {"seed": 20260601, "conditions": _V1_CONDITIONS},
    },
    {
        "version": "1.1.0",
        "release_notes": (
            "Adds speech_noise_a: every speech recording mixed with a per-entry ambient "
            "noise excerpt at 10 dB SNR (audiomentations AddBackgroundNoise, seeded per "
            "entry). Existing rows are unchanged."
        ),
        "config": {
            "seed": 20260601,
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


def get_version(version: str | None = None) -> DatasetVersion:
    """The declared version (latest when None); an unknown string lists the known ones."""
    key = (version or LATEST).removeprefix("v")
    if key not in VERSIONS:
        raise KeyError(f"unknown dataset version {version!r}; declared: {', '.join(VERSIONS)}")
    return VERSIONS[key]

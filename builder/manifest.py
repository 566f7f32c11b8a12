"""What a build records about itself: `manifest.json`, `quarantine.jsonl` and
`consent_audit.json` beside the shards.

None of them holds a timestamp or an absolute path, so two builds of the same
inputs give identical bytes; the public set's reports never hold a participant
key (the pseudonymous `user_id` stands in for it), a recording's file name or a path.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from redvox.schemas.errors import UserError
from redvox.schemas.layout import sha256_file
from redvox.sources.inputs import hashed_inputs
from redvox.sources.texts import input_names

from .versions import declared_languages
from .write import PendingFiles, atomic_write_bytes

MANIFEST = "manifest.json"
QUARANTINE = "quarantine.jsonl"
CONSENT_AUDIT = "consent_audit.json"

Stage = Literal["join", "decode", "vad", "ownership", "takes", "consent"]


@dataclass(frozen=True)
class QuarantineRecord:
    """One excluded recording or input row, and why.

    `reason` is the maintainer's explanation and may quote private cells (a key, a
    file name); the public report never reads it except through the fixed vocabulary
    of `public_reason`.
    """

    stage: Stage
    reason: str
    lang: str | None = None
    item_key: str | None = None
    participant_key: str | None = None  # private: reported in the full set only
    audio_file: str | None = None  # private too: file names may carry names
    file: str | None = None
    row: int | None = None
    field: str | None = None
    private: bool = False  # about a private registry: left out of the public report
    input: str | None = None  # the input config's name of the file: contributions, shades, ...
    public_reason: str | None = None  # set by steps whose reasons are fixed phrases

    def report(self, user_ids: Mapping[str, str]) -> dict:
        """The JSON line of the private (full set) report: everything known."""
        line = {
            "stage": self.stage,
            "reason": self.reason,
            "lang": self.lang,
            "item_key": self.item_key,
            "file": self.file,
            "row": self.row,
            "field": self.field,
            "participant_key": self.participant_key,
            "audio_file": self.audio_file,
            "user_id": user_ids.get(self.participant_key) if self.participant_key else None,
        }
        return {k: v for k, v in line.items() if v is not None}

    def public_report(self, shown: Mapping[str, str], item_keys: Collection[str]) -> dict:
        """The JSON line of the public report, built only from values that cannot carry
        private text: the stage, a phrase of the fixed vocabulary, a known language, a
        known item key, the input's config name, a row number, a known column name and
        the user id of a participant shown in the public set (`shown`: key -> user id)."""
        line = {
            "stage": self.stage,
            "reason": public_reason(self),
            "lang": self.lang if self.lang in declared_languages() else None,
            "item_key": self.item_key if self.item_key in item_keys else None,
            "input": self.input if self.input in hashed_inputs() else None,
            "row": self.row if isinstance(self.row, int) else None,
            "field": self.field if self.field in public_fields(self.input) else None,
            "user_id": shown.get(self.participant_key) if self.participant_key else None,
        }
        return {k: v for k, v in line.items() if v is not None}


def public_inputs() -> tuple[str, ...]:
    """The public datasets' input names (every registered text source's): their reader
    messages quote only public text and may be shown."""
    return input_names()


SHARED_AUDIO = "recording filed under more than one participant"
SUPERSEDED_TAKE = "superseded take"
# (stage or input, field or None, words of the private reason, public phrase): the
# first match wins; a reason that matches none gets its stage's fallback.
_PUBLIC_PHRASES: tuple[tuple[str, str | None, str, str], ...] = (
    ("contributions", "audio_file", "backslashes", "audio file path uses backslashes"),
    ("contributions", "audio_file", "absolute path", "audio file path is absolute"),
    (
        "contributions",
        "audio_file",
        "outside the audio folder",
        "audio file outside the audio folder",
    ),
    ("contributions", "audio_file", "another participant", SHARED_AUDIO),
    ("contributions", "audio_file", "not found", "audio file not found"),
    ("contributions", "item_id", "no item", "item not among the items of this build"),
    ("contributions", "participant_key", "participants registry", "participant not registered"),
    ("decode", None, "non-finite", "non-finite samples"),
    ("decode", None, "sample rate", "unsupported sample rate"),
    ("decode", None, "longer than", "recording too long"),
    ("decode", None, "larger than", "audio file too large"),
    ("decode", None, "clipped", "clipped audio"),
    ("decode", None, "digital silence", "digital silence"),
    ("decode", None, "not an audio file", "not an audio file"),
    ("decode", None, "truncated", "truncated or corrupt audio file"),
    ("decode", None, "corrupt", "truncated or corrupt audio file"),
    ("vad", None, "no speech", "no speech detected"),
    ("vad", None, "too little speech", "too little speech"),
    ("takes", None, SUPERSEDED_TAKE, SUPERSEDED_TAKE),
)
_FALLBACKS = {
    "contributions": "unreadable contribution row",
    "decode": "unusable audio",
    "vad": "not enough speech",
    "ownership": SHARED_AUDIO,
    "takes": SUPERSEDED_TAKE,
    "consent": "no consent for this set",
    "join": "input row not usable",
}
PUBLIC_REASONS = frozenset(p[3] for p in _PUBLIC_PHRASES) | frozenset(_FALLBACKS.values())


def public_fields(input_name: str | None) -> frozenset[str]:
    """Column names a public line may name for a problem in `input_name`."""
    from redvox.sources.contributions import OPTIONAL_COLUMNS, REQUIRED_COLUMNS

    if input_name == "contributions":
        return frozenset((*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS))
    return frozenset()


def public_reason(record: QuarantineRecord) -> str:
    """The reason as the public may read it. Only a public dataset's reader message (no
    participant in it) is passed on, paths removed; everything else is a fixed phrase."""
    if record.public_reason is not None:
        return record.public_reason
    if record.stage == "join" and record.input in public_inputs():
        return redact_paths(record.reason)
    topic = record.input if record.stage == "join" else record.stage
    for where, field, words, phrase in _PUBLIC_PHRASES:
        if where == topic and field in (None, record.field) and words in record.reason:
            return phrase
    return _FALLBACKS.get(topic or "", _FALLBACKS["join"])


# What the public reports say instead of any path.
PATH = "<path>"
_NAME_CHARS = r"[^\s'\"<>(),;:]"
# Absolute paths, and relative ones that end in a file name ("a/b.txt", not "SHADES/M-ALERT").
_PATH = re.compile(
    rf"(?<![\w.])(?:[A-Za-z]:[/\\]|~?[/\\]){_NAME_CHARS}+"
    rf"|{_NAME_CHARS}+[/\\]{_NAME_CHARS}*\.[A-Za-z0-9]{{1,5}}\b"
)


def redact_paths(text: str) -> str:
    """`text` with any path replaced."""
    return _PATH.sub(PATH, text)


def write_quarantine(
    path: Path,
    records: Iterable[QuarantineRecord],
    user_ids: Mapping[str, str],
    *,
    public: bool,
    withheld: Collection[str] = (),
    item_keys: Collection[str] = (),
    pending: PendingFiles | None = None,
) -> None:
    """The quarantine report. Public: no line about a private registry, the
    `withheld` participants (not in the public set) not identified at all."""
    if public:
        shown = {k: v for k, v in user_ids.items() if k not in withheld}
        lines = [r.public_report(shown, item_keys) for r in records if not r.private]
    else:
        lines = [r.report(user_ids) for r in records]
    lines.sort(key=lambda line: json.dumps(line, sort_keys=True))
    body = "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines)
    atomic_write_bytes(path, body.encode(), pending=pending)


def quarantine_summary(records: Iterable[QuarantineRecord]) -> Counter[str]:
    """Quarantined items per `stage: reason`, for the closing table."""
    return Counter(
        f"{r.stage}: {r.file} {r.field}" if r.field else f"{r.stage}: {_reason_class(r.reason)}"
        for r in records
    )


def _reason_class(reason: str) -> str:
    # Reasons start with a stable class ("no speech", "clipped") and may end with
    # measured details after a colon or parenthesis; group by the class.
    return re.split(r"[:(]", reason, maxsplit=1)[0].strip()


def count_rows(rows: Iterable[Mapping]) -> dict[str, dict[str, dict[str, int]]]:
    """Row counts per language x audio_type x vulnerability_type."""
    counts: Counter[tuple[str, str, str]] = Counter(
        (r["lang"], r["audio_type"], r["vulnerability_type"]) for r in rows
    )
    nested: dict[str, dict[str, dict[str, int]]] = {}
    for (lang, audio_type, vulnerability), n in sorted(counts.items()):
        nested.setdefault(lang, {}).setdefault(audio_type, {})[vulnerability] = n
    return nested


def write_json(path: Path, payload: dict, pending: PendingFiles | None = None) -> None:
    body = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, body.encode(), pending=pending)


class ManifestError(UserError, ValueError):
    """A `manifest.json` or `consent_audit.json` that is missing or does not read as the
    record the builder writes there."""


class _Strict(BaseModel):
    """Frozen, no unknown keys, no type coerced: a file either is the record or is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


class _Record(_Strict):
    """A JSON file the build writes beside its shards, read and written only here:
    sorted keys, two-space indents, a closing newline, absent optional fields left out."""

    FILE: ClassVar[str]

    @classmethod
    def load(cls, folder: Path) -> Self:
        """The record in the set folder; one line naming the file (and the field) when it
        is missing or not such a record."""
        path = Path(folder) / cls.FILE
        try:
            raw = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise ManifestError(
                f"{path}: no build {cls.FILE}; point at a set folder written by `redvox build`"
            ) from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ManifestError(
                f"{path}: not a readable build {cls.FILE} ({first}); build the set again"
            ) from None
        if not isinstance(raw, dict):
            raise ManifestError(f"{path}: not a build {cls.FILE} (not a JSON object); build again")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"]) or "(top level)"
            raise ManifestError(
                f"{path}: field {field!r}: {error['msg']} ({exc.error_count()} problem(s)); "
                f"not a {cls.FILE} this builder wrote, build the set again"
            ) from None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the file (absent optional fields left out)."""
        dumped = self.model_dump(by_alias=True)
        return {key: value for key, value in dumped.items() if value is not None}

    def write(self, folder: Path, pending: PendingFiles | None = None) -> None:
        write_json(Path(folder) / self.FILE, self.to_json(), pending)


class Tally(_Strict):
    """Kept, and excluded per consent state."""

    kept: int
    excluded: dict[str, int]


class ConsentAudit(_Record):
    """What `consent_audit.json` holds: only numbers, so it may be published with the set."""

    FILE: ClassVar[str] = CONSENT_AUDIT
    dataset_set: str = Field(alias="set")
    rule: str
    participants: Tally
    recordings: Tally


class BuildManifest(_Record):
    """What `manifest.json` holds, the one reader and writer of it. The fields that only
    some builds record (a `variants add` copy of a release folder knows no languages or
    items) are left out of the file when absent."""

    FILE: ClassVar[str] = MANIFEST
    version: str
    dataset_set: str = Field(alias="set")  # public / full; a release folder's own name
    config_hash: str
    seed: int
    conditions: list[dict[str, Any]]  # NoiseCondition.model_dump(mode="json") of each
    inputs: dict[str, str]  # input name -> sha256 (audio, noise banks included)
    rows: dict[str, int]  # language -> rows
    counts: dict[str, dict[str, dict[str, int]]]  # lang -> audio_type -> vulnerability -> n
    files: dict[str, str]  # path relative to the set folder -> sha256
    languages: list[str] | None = None
    shared_clips: dict[str, dict[str, Any]] | None = None  # name -> params, audio_sha256
    items: list[str] | None = None  # the build's item keys
    derived_from: dict[str, str | None] | None = None  # variants: version, manifest_sha256

    @property
    def base_version(self) -> str:
        """The declared version the rows were built by (without a `+condition` suffix)."""
        return self.version.split("+", 1)[0]


def recorded_files(folder: Path) -> dict[str, str]:
    """The `files` map (relative path -> sha256) of the set folder's manifest; empty
    when it is missing or unreadable, so that nothing is trusted without a record."""
    try:
        return dict(BuildManifest.load(folder).files)
    except ManifestError:
        return {}


def file_hashes(
    folder: Path, names: Iterable[str], pending: PendingFiles | None = None
) -> dict[str, str]:
    """sha256 of each written file, by its path relative to the set folder (its new
    content while it waits in `pending`)."""
    where = pending.current if pending else Path
    return {name: sha256_file(where(Path(folder) / name)) for name in sorted(names)}

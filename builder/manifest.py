"""What a build records about itself: `manifest.json`, `quarantine.jsonl` and
`consent_audit.json` beside the shards.

None of them holds a timestamp or an absolute path, so two builds of the same
inputs give identical bytes; the public set's reports never hold a participant
key (the pseudonymous `user_id` stands in for it), a recording's file name or a path.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .write import atomic_write_bytes

MANIFEST = "manifest.json"
QUARANTINE = "quarantine.jsonl"
CONSENT_AUDIT = "consent_audit.json"

Stage = Literal["join", "decode", "vad", "ownership", "consent"]


@dataclass(frozen=True)
class QuarantineRecord:
    """One excluded recording or input row, and why."""

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

    def report(
        self, user_ids: Mapping[str, str], *, public: bool, withheld: Collection[str] = ()
    ) -> dict:
        """The JSON line. Public: no participant key, file name or path in any field;
        keys become user ids, and the `withheld` participants (not in the public set)
        are not identified at all."""
        line = {
            "stage": self.stage,
            "reason": self.reason,
            "lang": self.lang,
            "item_key": self.item_key,
            "file": self.file,
            "row": self.row,
            "field": self.field,
        }
        if public:
            shown = {k: v for k, v in user_ids.items() if k not in withheld}
            names = {**shown, **{k: WITHHELD for k in withheld}}
            line["reason"] = redact_paths(self.reason, self.audio_file)
            line = {k: redact_keys(v, names) if isinstance(v, str) else v for k, v in line.items()}
            line["user_id"] = shown.get(self.participant_key) if self.participant_key else None
        else:
            line["user_id"] = user_ids.get(self.participant_key) if self.participant_key else None
            line["participant_key"] = self.participant_key
            line["audio_file"] = self.audio_file
        return {k: v for k, v in line.items() if v is not None}


# What the public reports say instead of a withheld participant, a recording's file
# name (names of people often end up in them) and any other path.
WITHHELD = "a participant"
AUDIO_FILE = "<audio file>"
PATH = "<path>"
_NAME_CHARS = r"[^\s'\"<>(),;:]"
# Absolute paths, and relative ones that end in a file name ("a/b.txt", not "SHADES/M-ALERT").
_PATH = re.compile(
    rf"(?<![\w.])(?:[A-Za-z]:[/\\]|~?[/\\]){_NAME_CHARS}+"
    rf"|{_NAME_CHARS}+[/\\]{_NAME_CHARS}*\.[A-Za-z0-9]{{1,5}}\b"
)
_AUDIO_NAME = re.compile(
    rf"{_NAME_CHARS}+\.(?:flac|wav|mp3|ogg|opus|m4a|aac|webm)\b", re.IGNORECASE
)


def redact_paths(text: str, audio_file: str | None = None) -> str:
    """`text` with `audio_file`, any other audio file name and any path replaced."""
    if audio_file:
        text = text.replace(audio_file, AUDIO_FILE)
    return _AUDIO_NAME.sub(AUDIO_FILE, _PATH.sub(PATH, text))


def redact_keys(text: str, names: Mapping[str, str]) -> str:
    """`text` with every known participant key replaced by its stand-in (`names[key]`),
    wherever it appears, even inside a word (`p11_take1`). One pass, longest key first,
    so a key that contains another is replaced whole and a stand-in is never rewritten."""
    if not names:
        return text
    keys = sorted(names, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, keys)))
    return pattern.sub(lambda m: names[m.group(0)], text)


def write_quarantine(
    path: Path,
    records: Iterable[QuarantineRecord],
    user_ids: Mapping[str, str],
    *,
    public: bool,
    withheld: Collection[str] = (),
) -> None:
    lines = [
        record.report(user_ids, public=public, withheld=withheld)
        for record in records
        if not (public and record.private)
    ]
    lines.sort(key=lambda line: json.dumps(line, sort_keys=True))
    body = "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines)
    atomic_write_bytes(path, body.encode())


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


def write_json(path: Path, payload: dict) -> None:
    body = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, body.encode())


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no build manifest; point at a folder written by `redvox build`"
        ) from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


def file_hashes(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """sha256 of each written file, by its path relative to the set folder."""
    return {name: sha256_file(Path(folder) / name) for name in sorted(names)}

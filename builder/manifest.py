"""What a build records about itself: `manifest.json`, `quarantine.jsonl` and
`consent_audit.json` beside the shards.

None of them holds a timestamp or an absolute path, so two builds of the same
inputs give identical bytes; the public set's reports never hold a participant
key (the pseudonymous `user_id` stands in for it).
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

Stage = Literal["join", "decode", "vad", "consent"]


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
        """The JSON line. Public: participant keys in the text become user ids, and the
        `withheld` participants (not in the public set) are not identified at all."""
        if public:
            user_ids = {k: v for k, v in user_ids.items() if k not in withheld}
            hidden = {k: "a participant" for k in withheld}
            reason = public_text(public_text(self.reason, hidden), user_ids)
        else:
            reason = self.reason
        line = {
            "stage": self.stage,
            "reason": reason,
            "lang": self.lang,
            "item_key": self.item_key,
            "user_id": user_ids.get(self.participant_key) if self.participant_key else None,
            "file": self.file,
            "row": self.row,
            "field": self.field,
        }
        if not public:
            line["participant_key"] = self.participant_key
            line["audio_file"] = self.audio_file
        return {k: v for k, v in line.items() if v is not None}


def public_text(text: str, user_ids: Mapping[str, str]) -> str:
    """`text` with every known participant key replaced by its user id."""
    if not user_ids:
        return text
    keys = sorted(user_ids, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, keys)) + r")(?![\w-])")
    return pattern.sub(lambda m: user_ids[m.group(1)], text)


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

"""Content-addressed build cache under `OUT/.cache/` (or `--cache DIR`).

Two kinds of entries:
- blobs: FLAC bytes by their sha256 (normalised recordings, rendered clips);
- facts: small JSON documents by (kind, key), e.g. `vad` by decoded-audio hash
  + VAD params, `clip` by condition params, `decoded` by source file hash.

Everything is written atomically, so an interrupted build leaves complete
entries only and the rerun picks up where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from .write import atomic_write_bytes


def digest_of(*parts: str | bytes) -> str:
    """sha256 of the parts, separated so that ('ab', 'c') and ('a', 'bc') differ."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\x1f")
    return digest.hexdigest()


class BuildCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.hits: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()
        self.computed: Counter[str] = Counter()  # facts stored: work actually done

    # --- blobs ---
    def _blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest[:2] / f"{digest}.flac"

    def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._blob_path(digest)
        if not path.is_file():
            atomic_write_bytes(path, data, durable=False)
        return digest

    def has_blob(self, digest: str) -> bool:
        return self._blob_path(digest).is_file()

    def blob(self, digest: str) -> bytes:
        path = self._blob_path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path}: cached audio missing; delete {self.root} and rebuild"
            ) from None

    # --- facts ---
    def _fact_path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / f"{key}.json"

    def get(self, kind: str, key: str) -> dict | None:
        """The fact, or None (counted as a miss) when absent or unreadable."""
        path = self._fact_path(kind, key)
        try:
            fact = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            self.misses[kind] += 1
            return None
        if "blob" in fact and not self.has_blob(fact["blob"]):
            self.misses[kind] += 1
            return None
        self.hits[kind] += 1
        return fact

    def put(self, kind: str, key: str, fact: dict) -> None:
        self.computed[kind] += 1
        body = json.dumps(fact, sort_keys=True).encode()
        atomic_write_bytes(self._fact_path(kind, key), body, durable=False)

"""Content-addressed build cache under `OUT/.cache/` (or `--cache DIR`).

Two kinds of entries:
- blobs: FLAC bytes by their sha256 (normalised recordings, rendered clips);
- facts: small JSON documents by (kind, key), e.g. `vad` by decoded-audio hash
  + VAD params, `clip` by condition params, `decoded` by source file hash. Each
  kind is a typed record (`Fact`: `DecodeFact`, `VadResult`, `ClipFact`, ...) that
  names its kind and converts itself to and from the stored JSON, so no caller
  handles the JSON or spells a kind.

Everything is written atomically, so an interrupted build leaves complete
entries only and the rerun picks up where it stopped. Everything is checked when
read (blobs against their sha256, facts against the checksum stored with them),
so a damaged entry is recomputed, never released.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, TypeVar

from redvox.schemas.errors import UserError
from redvox.schemas.layout import sha256_file

from .write import atomic_write_bytes


def digest_of(*parts: str | bytes) -> str:
    """sha256 of the parts, separated so that ('ab', 'c') and ('a', 'bc') differ."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\x1f")
    return digest.hexdigest()


class Fact(Protocol):
    """A record the cache stores as a fact of kind `KIND`. `from_dict` raises (KeyError,
    TypeError, ValueError) on a document of another shape, which `BuildCache.get` reads
    as a miss: a fact left by another version of the code is recomputed, not trusted."""

    KIND: ClassVar[str]

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self: ...


F = TypeVar("F", bound=Fact)


class CacheError(UserError, RuntimeError):
    """A cache entry vanished or changed while the build was using it."""


class BuildCache:
    """Every read is checked: a blob must hash to its name, a fact must carry the
    checksum written with it. Anything else (garbage, a swapped or edited entry, an
    old-format fact) is removed with a warning and read as a miss, so the build
    computes it again instead of releasing it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.hits: Counter[str] = Counter()
        self.computed: Counter[str] = Counter()  # facts stored: work actually done
        self.discarded: Counter[str] = Counter()  # damaged entries removed: blob or fact kind
        self._verified: set[str] = set()  # blob digests checked by this process

    # --- blobs ---
    def _blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest[:2] / f"{digest}.flac"

    def put_blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if not self.has_blob(digest):
            atomic_write_bytes(self._blob_path(digest), data, durable=False)
            self._verified.add(digest)
        return digest

    def has_blob(self, digest: str) -> bool:
        """Whether the blob is there and intact (hashed once per process: a damaged one
        is removed, so the caller recomputes it)."""
        if digest in self._verified and self._blob_path(digest).is_file():
            return True
        return self._read_blob(digest) is not None

    def blob(self, digest: str) -> bytes:
        """The blob's bytes, checked against their digest."""
        data = self._read_blob(digest)
        if data is None:
            raise CacheError(
                f"{self._blob_path(digest)}: cached audio missing or damaged during the build; "
                "run the build again (it recomputes it)"
            )
        return data

    def _read_blob(self, digest: str) -> bytes | None:
        path = self._blob_path(digest)
        blocks: list[bytes] = []
        try:
            actual = sha256_file(path, on_block=blocks.append)  # one read: hashed and kept
        except FileNotFoundError:
            return None
        data = b"".join(blocks)
        if actual != digest:
            self._discard(path, "blob", "its content does not hash to its name")
            self._verified.discard(digest)
            return None
        self._verified.add(digest)
        return data

    # --- facts ---
    def _fact_path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / f"{key}.json"

    def get(self, record: type[F], key: str) -> F | None:
        """The fact of `record`'s kind, or None (a miss) when absent, unreadable, without
        the checksum it was written with, of another shape than `record`, or pointing at a
        blob that is missing or damaged."""
        kind = record.KIND
        path = self._fact_path(kind, key)
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            self._discard(path, kind, "unreadable")
            return None
        if isinstance(stored, dict) and "sha256" not in stored:
            return None  # written before facts had a checksum: recomputed, no warning
        fact = stored.get("fact") if isinstance(stored, dict) else None
        if not isinstance(fact, dict) or stored.get("sha256") != _fact_sha256(kind, key, fact):
            self._discard(path, kind, "checksum mismatch: edited or damaged")
            return None
        try:
            parsed = record.from_dict(fact)
        except (KeyError, TypeError, ValueError):
            return None  # intact but of another shape: recomputed, and put() replaces it
        if "blob" in fact and not self.has_blob(fact["blob"]):
            return None
        self.hits[kind] += 1
        return parsed

    def put(self, key: str, record: Fact) -> None:
        kind, fact = record.KIND, record.to_dict()
        self.computed[kind] += 1
        body = json.dumps({"fact": fact, "sha256": _fact_sha256(kind, key, fact)}, sort_keys=True)
        atomic_write_bytes(self._fact_path(kind, key), body.encode(), durable=False)

    def _discard(self, path: Path, kind: str, reason: str) -> None:
        self.discarded[kind] += 1
        warnings.warn(
            f"{path}: damaged cache entry ({reason}); removed, it will be recomputed",
            CacheWarning,
            stacklevel=3,
        )
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # unreadable and unremovable: still a miss, and put() replaces it


class CacheWarning(UserWarning):
    """A damaged cache entry was removed and will be recomputed."""


def _fact_sha256(kind: str, key: str, fact: dict) -> str:
    """Checksum of a fact, bound to its kind and key: an edited fact, or one copied to
    another key, does not match."""
    return digest_of("fact-v1", kind, key, json.dumps(fact, sort_keys=True))

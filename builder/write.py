"""Parquet shards with the audio embedded, written atomically and deterministically.

The audio column is stored dictionary-encoded: rows of a shared-clip condition
all point at one dictionary entry, so a shard grows with its unique audio, not
with its rows, and the writer never holds more than one copy of a clip. The
reader sees a plain `struct<bytes, path>` column with the `huggingface`
features in the footer, which is what `datasets.load_dataset` expects.
"""

from __future__ import annotations

import datetime as dt
import enum
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from redvox.schemas import COLUMNS, Entry, release_features
from redvox.schemas.audio_cell import arrow_type, cell_array
from redvox.schemas.errors import USER_OS_ERRORS, UserError
from redvox.schemas.layout import sha256_file

FEATURES_KEY = "huggingface"
RECIPE_KEY = "redvox_recipe"
# Bumped when the writer's layout changes, so old shards are not mistaken for current ones.
FORMAT = 2
# Unique audio per row group: bounds the writer's memory whatever the corpus size.
MAX_GROUP_BYTES = 16 * 2**20


@dataclass(frozen=True)
class ShardRow:
    """A validated row whose audio bytes are still in the cache (`audio_digest`)."""

    entry: Entry
    audio_digest: str


class PendingFiles:
    """The files of one build, written under temporary names and renamed into place
    together by `commit()` once every one of them is complete: a build that fails on
    the way (a full disk, an unreadable input, Ctrl-C) leaves every file of the earlier
    build byte for byte as it was, and `discard()` removes what it had written.

    Files named in `last` (the manifests, which vouch for the others) are removed
    before the others are swapped in and renamed into place after them, so that a
    crash in the middle of the renames leaves no manifest describing a mix.
    A rebuild therefore needs room for a second copy of the files it changes."""

    def __init__(self, last: Iterable[str] = ()) -> None:
        self._pending: dict[Path, Path] = {}  # final path -> its complete temporary file
        self._removed: list[Path] = []
        self._last = frozenset(last)

    def temporary(self, path: Path) -> Path:
        """Where to write `path`; it is taken as complete once the writer returns."""
        path = Path(path)
        tmp = temporary_path(path)
        self._pending[path] = tmp
        return tmp

    def forget(self, path: Path) -> None:
        """`path` was not written after all (its writer failed)."""
        self._pending.pop(Path(path), None)

    def remove(self, path: Path) -> None:
        """Delete `path` at commit time (a shard the new build no longer has)."""
        self._removed.append(Path(path))

    def current(self, path: Path) -> Path:
        """The file that holds `path`'s new content: its temporary file while pending."""
        return self._pending.get(Path(path), Path(path))

    def commit(self) -> None:
        last = [p for p in self._pending if p.name in self._last]
        for path in last:
            path.unlink(missing_ok=True)
        for path, tmp in self._pending.items():
            if path not in last:
                _replace(tmp, path)
        for path in self._removed:
            path.unlink(missing_ok=True)
        for path in last:
            _replace(self._pending[path], path)
        self._pending.clear()
        self._removed.clear()

    def discard(self) -> None:
        for tmp in self._pending.values():
            tmp.unlink(missing_ok=True)
        self._pending.clear()
        self._removed.clear()


def _replace(tmp: Path, path: Path) -> None:
    """os.replace; an OS error a user causes names `path`, not the temporary file."""
    try:
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno in USER_OS_ERRORS:
            raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from exc
        raise


def atomic_write_bytes(
    path: Path, data: bytes, *, durable: bool = True, pending: PendingFiles | None = None
) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a part.

    `durable` also survives a power cut (fsync); cache entries skip it, since a
    lost one is recomputed. With `pending`, the complete temporary file waits for
    `pending.commit()`. A failed write (read-only folder, full disk) removes
    its temporary file and raises the OS error naming `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = pending.temporary(path) if pending else temporary_path(path)
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if pending is None:
            os.replace(tmp, path)
    except BaseException as exc:
        _discard(tmp, path, exc, pending)
        raise


def _discard(
    tmp: Path, path: Path, exc: BaseException, pending: PendingFiles | None = None
) -> None:
    """After a failed write: remove the temporary file (and its place in `pending`); an OS
    error a user causes (read-only folder, full disk) is raised again naming the file
    meant to be written, not the temporary one (the caller re-raises anything else)."""
    if pending is not None:
        pending.forget(path)
    tmp.unlink(missing_ok=True)
    if isinstance(exc, OSError) and exc.errno in USER_OS_ERRORS:
        raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from exc


def temporary_path(path: Path) -> Path:
    """Where `path` is written before it is renamed into place. The leading dot makes
    `datasets` ignore a leftover of a killed build; the pid keeps two writers apart."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_leftovers(folder: Path) -> None:
    """Delete temporary files a killed build left under `folder`. Only while holding the
    build lock of a folder above it: without it they may be another build's live files."""
    if not holds_build_lock(folder):
        raise RuntimeError(f"remove_leftovers({folder}) outside build_lock(): refusing")
    for leftover in Path(folder).rglob(".*.tmp"):
        leftover.unlink(missing_ok=True)


# --- one build per output folder --------------------------------------------------

LOCK_NAME = ".redvox-build.lock"


class OutputBusyError(UserError, RuntimeError):
    """Another build writes into the same output folder."""


# resolved output root -> [open lock file, depth]: re-entrant within one process, so that
# `release run` can hold the lock around the build_version that takes it again.
_held: dict[Path, list] = {}


@contextmanager
def build_lock(out: Path) -> Iterator[Path]:
    """Hold `OUT/.redvox-build.lock` (fcntl.flock) for the duration: a second build into
    the same OUT fails at once with the holder's pid, host and start time. The kernel
    releases the lock when its holder dies, so a lock file left by a killed build never
    blocks; the file itself stays (deleting it would let two builds lock two files)."""
    root = Path(out)
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    key = root.resolve()
    if key in _held:
        _held[key][1] += 1
        try:
            yield key / LOCK_NAME
        finally:
            _held[key][1] -= 1
        return
    path = key / LOCK_NAME
    handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(handle)
        handle.close()
        raise OutputBusyError(
            f"{root} is being built by {holder}; wait for it or use another --out"
        ) from None
    except BaseException:
        handle.close()
        raise
    try:
        handle.seek(0)
        handle.truncate()
        since = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        holder_record = {"pid": os.getpid(), "host": socket.gethostname(), "since": since}
        handle.write(json.dumps(holder_record) + "\n")
        handle.flush()
        _held[key] = [handle, 1]
        yield path
    finally:
        _held.pop(key, None)
        if created:
            _remove_if_unused(key, path)
        handle.close()  # releases the lock


def _remove_if_unused(root: Path, lock: Path) -> None:
    """A build refused before it wrote anything leaves no output folder it created (only
    its lock file in it): removed while still locked."""
    try:
        if [p.name for p in root.iterdir()] == [lock.name]:
            lock.unlink()
            root.rmdir()
    except OSError:
        pass  # someone else is using it now: leave it


def _holder(handle) -> str:
    """Who holds the lock, from what it wrote in the file (it may be writing it just now)."""
    try:
        handle.seek(0)
        record = json.loads(handle.read() or "{}")
        who = f"pid {int(record['pid'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
    if record.get("host") and record["host"] != socket.gethostname():
        who += f" on {record['host']}"
    return f"{who} since {record['since']}" if record.get("since") else who


def holds_build_lock(folder: Path) -> bool:
    """Whether this process holds the build lock of `folder` or of a folder above it."""
    path = Path(folder).resolve()
    return any(root == path or root in path.parents for root in _held)


def shard_recipe(rows: Iterable[ShardRow]) -> str:
    """sha256 of everything that decides the shard's bytes: equal recipes, equal files."""
    digest = hashlib.sha256(f"format={FORMAT};pyarrow={pa.__version__}\n".encode())
    for row in rows:
        fields = row.entry.model_dump(mode="json", exclude={"audio"})
        fields["audio_path"] = row.entry.audio.path
        digest.update(json.dumps(fields, sort_keys=True).encode())
        digest.update(f"\x1f{row.audio_digest}\n".encode())
    return digest.hexdigest()


def existing_recipe(path: Path) -> str | None:
    """The recipe stored in a complete shard's footer; None when absent or unreadable."""
    try:
        metadata = pq.read_metadata(path).metadata or {}
    except (OSError, pa.ArrowInvalid):
        return None
    value = metadata.get(RECIPE_KEY.encode())
    return value.decode() if value else None


class ShardUpdate(enum.Enum):
    """What `write_shard` did; true when it wrote the file."""

    KEPT = "kept"  # same recipe and the bytes the last manifest recorded: nothing written
    WRITTEN = "written"  # new, changed or unrecorded: written
    REPAIRED = "repaired"  # same recipe, but not the bytes the manifest recorded: rewritten

    def __bool__(self) -> bool:
        return self is not ShardUpdate.KEPT


def file_sha256(path: Path) -> str | None:
    """sha256 of the whole file; None when it cannot be read."""
    try:
        return sha256_file(path)
    except OSError:
        return None


def write_shard(
    path: Path,
    rows: Iterable[ShardRow],
    load_audio: Callable[[str], bytes],
    recorded_sha256: str | None = None,
    pending: PendingFiles | None = None,
) -> ShardUpdate:
    """Write the rows (already in ID order) to `path`.

    `rows` is gone over twice, for the recipe and then to write them, one row group at
    a time: a list, or a re-iterable that makes the rows anew each time, so that a
    shard's rows need not all be in memory at once (never a one-shot iterator).

    An existing shard is kept (KEPT, nothing written: a warm rebuild rewrites
    nothing) only when its footer holds the same recipe and the whole file has the
    sha256 the set's last manifest recorded for it (`recorded_sha256`); a shard of
    the same rows that differs from that hash, or whose footer no longer reads, is
    damaged and rewritten (REPAIRED); one without a recorded hash cannot be
    trusted and is rewritten too (WRITTEN).
    """
    if iter(rows) is rows:
        raise TypeError("write_shard goes over the rows twice: pass a list or a re-iterable")
    recipe = shard_recipe(rows)
    existing = existing_recipe(path)
    recorded = recorded_sha256 is not None
    if existing == recipe and recorded and file_sha256(path) == recorded_sha256:
        return ShardUpdate.KEPT
    # Damaged: the rows are the ones recorded, the bytes are not (or the footer is unreadable).
    damaged = recorded and (existing == recipe or (existing is None and path.is_file()))
    outcome = ShardUpdate.REPAIRED if damaged else ShardUpdate.WRITTEN
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = pending.temporary(path) if pending else temporary_path(path)
    schema = _writer_schema()
    features = release_features().arrow_schema.metadata[FEATURES_KEY.encode()].decode()
    stats_columns = [name for name in COLUMNS if name != "audio"]
    # FLAC is already compressed: zstd on it costs time and saves nothing.
    compression = {name: "zstd" for name in stats_columns} | {
        "audio.bytes": "none",
        "audio.path": "zstd",
    }
    try:
        with pq.ParquetWriter(
            tmp,
            schema,
            compression=compression,
            store_schema=False,  # the dictionary type is a storage detail readers must not see
            write_statistics=stats_columns,
        ) as writer:
            for group, blobs in _row_groups(rows, load_audio):
                writer.write_table(_group_table(group, blobs, schema))
            writer.add_key_value_metadata({FEATURES_KEY: features, RECIPE_KEY: recipe})
        with tmp.open("rb+") as handle:
            os.fsync(handle.fileno())
        if pending is None:
            os.replace(tmp, path)
    except BaseException as exc:
        _discard(tmp, path, exc, pending)
        raise
    return outcome


def _writer_schema() -> pa.Schema:
    base = release_features().arrow_schema
    fields = [pa.field("audio", arrow_type()) if f.name == "audio" else f for f in base]
    return pa.schema(fields)


# A row as its group holds it until written: its audio digest, then the value of each
# column in COLUMNS order, the audio cell as its path. An Entry weighs a few KB, these
# values a few hundred bytes: a group of a shared clip's rows (thousands of rows on one
# dictionary entry) stays small however many rows it has.
_Values = tuple


def _values(row: ShardRow) -> _Values:
    e = row.entry
    return (row.audio_digest, *(e.audio.path if c == "audio" else getattr(e, c) for c in COLUMNS))


_AT = {name: 1 + k for k, name in enumerate(COLUMNS)}  # where a column's value is


def _row_groups(
    rows: Iterable[ShardRow], load_audio: Callable[[str], bytes]
) -> Iterator[tuple[list[_Values], dict[str, bytes]]]:
    """Consecutive rows cut into groups of one audio_type and bounded unique audio."""
    group: list[_Values] = []
    blobs: dict[str, bytes] = {}
    size = 0
    for row in rows:
        new_type = group and row.entry.audio_type != group[-1][_AT["audio_type"]]
        full = row.audio_digest not in blobs and size >= MAX_GROUP_BYTES
        if new_type or full:
            yield group, blobs
            group, blobs, size = [], {}, 0
        if row.audio_digest not in blobs:
            blobs[row.audio_digest] = load_audio(row.audio_digest)
            size += len(blobs[row.audio_digest])
        group.append(_values(row))
    if group:
        yield group, blobs


def _group_table(group: list[_Values], blobs: dict[str, bytes], schema: pa.Schema) -> pa.Table:
    position = {digest: i for i, digest in enumerate(blobs)}
    indices = [position[values[0]] for values in group]
    columns = {}
    for field in schema:
        at = _AT[field.name]
        cells = [values[at] for values in group]
        if field.name == "audio":
            columns["audio"] = cell_array(indices, list(blobs.values()), cells)
        else:
            columns[field.name] = pa.array(cells, field.type)
    return pa.Table.from_pydict(columns, schema=schema)

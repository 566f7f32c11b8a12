"""Parquet shards with the audio embedded, written atomically and deterministically.

The audio column is stored dictionary-encoded: rows of a shared-clip condition
all point at one dictionary entry, so a shard grows with its unique audio, not
with its rows, and the writer never holds more than one copy of a clip. The
reader sees a plain `struct<bytes, path>` column with the `huggingface`
features in the footer, which is what `datasets.load_dataset` expects.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from redvox.schemas import COLUMNS, Entry, release_features

FEATURES_KEY = "huggingface"
RECIPE_KEY = "redvox_recipe"
# Bumped when the writer's layout changes, so old shards are not mistaken for current ones.
FORMAT = 2
# Unique audio per row group: bounds the writer's memory whatever the corpus size.
MAX_GROUP_BYTES = 16 * 2**20
SHARD_NAME = "test-00000-of-00001.parquet"


@dataclass(frozen=True)
class ShardRow:
    """A validated row whose audio bytes are still in the cache (`audio_digest`)."""

    entry: Entry
    audio_digest: str


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a part.

    `durable` also survives a power cut (fsync); cache entries skip it, since a
    lost one is recomputed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    with tmp.open("wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def temporary_path(path: Path) -> Path:
    """Where `path` is written before it is renamed into place. The leading dot makes
    `datasets` ignore a leftover of a killed build; the pid keeps two writers apart."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_leftovers(folder: Path) -> None:
    """Delete temporary files a killed build left under `folder`."""
    for leftover in Path(folder).rglob(".*.tmp"):
        leftover.unlink(missing_ok=True)


def shard_path(folder: Path, lang: str) -> Path:
    return Path(folder) / "data" / lang / SHARD_NAME


def shard_recipe(rows: Sequence[ShardRow]) -> str:
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


def write_shard(path: Path, rows: Sequence[ShardRow], load_audio: Callable[[str], bytes]) -> bool:
    """Write the rows (already in ID order) to `path`; False when an identical shard is
    already there (same recipe), so a warm rebuild rewrites nothing."""
    recipe = shard_recipe(rows)
    if existing_recipe(path) == recipe:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    schema = _writer_schema()
    features = release_features().arrow_schema.metadata[FEATURES_KEY.encode()].decode()
    stats_columns = [name for name in COLUMNS if name != "audio"]
    # FLAC is already compressed: zstd on it costs time and saves nothing.
    compression = {name: "zstd" for name in stats_columns} | {
        "audio.bytes": "none",
        "audio.path": "zstd",
    }
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
    os.replace(tmp, path)
    return True


def _writer_schema() -> pa.Schema:
    base = release_features().arrow_schema
    audio = pa.struct(
        [pa.field("bytes", pa.dictionary(pa.int32(), pa.binary())), pa.field("path", pa.string())]
    )
    fields = [pa.field("audio", audio) if f.name == "audio" else f for f in base]
    return pa.schema(fields)


def _row_groups(
    rows: Sequence[ShardRow], load_audio: Callable[[str], bytes]
) -> Iterator[tuple[list[ShardRow], dict[str, bytes]]]:
    """Consecutive rows cut into groups of one audio_type and bounded unique audio."""
    group: list[ShardRow] = []
    blobs: dict[str, bytes] = {}
    size = 0
    for row in rows:
        new_type = group and row.entry.audio_type != group[-1].entry.audio_type
        full = row.audio_digest not in blobs and size >= MAX_GROUP_BYTES
        if new_type or full:
            yield group, blobs
            group, blobs, size = [], {}, 0
        if row.audio_digest not in blobs:
            blobs[row.audio_digest] = load_audio(row.audio_digest)
            size += len(blobs[row.audio_digest])
        group.append(row)
    if group:
        yield group, blobs


def _group_table(group: list[ShardRow], blobs: dict[str, bytes], schema: pa.Schema) -> pa.Table:
    position = {digest: i for i, digest in enumerate(blobs)}
    indices = pa.array([position[row.audio_digest] for row in group], pa.int32())
    audio_bytes = pa.DictionaryArray.from_arrays(
        indices, pa.array(list(blobs.values()), pa.binary())
    )
    audio_path = pa.array([row.entry.audio.path for row in group], pa.string())
    columns = {}
    for field in schema:
        if field.name == "audio":
            columns["audio"] = pa.StructArray.from_arrays(
                [audio_bytes, audio_path], fields=list(field.type)
            )
        else:
            columns[field.name] = pa.array(
                [getattr(row.entry, field.name) for row in group], field.type
            )
    return pa.Table.from_pydict(columns, schema=schema)

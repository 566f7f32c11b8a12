"""Shards: loadable by `datasets` with the contract features, small when rows share a
clip, deterministic, and never half-written."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from redvox.builder import write
from redvox.builder.write import ShardRow, write_shard
from redvox.schemas import COLUMNS, AudioCell, Entry, release_features
from redvox.schemas.layout import shard_path


def flac(seconds: float, seed: int) -> bytes:
    noise = np.random.default_rng(seed).normal(0, 0.1, int(16000 * seconds)).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, noise, 16000, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


BLOBS = {f"speech{i}": flac(2.0, i) for i in range(4)} | {"shared": flac(6.0, 99)}


def entry(i: int, audio_type: str, digest: str) -> ShardRow:
    e = Entry(
        ID=i,
        audio=AudioCell(path=f"{digest}.flac"),
        original_id=str(i),
        user_id="0123456789abcdef" * 2,
        lang="en",
        vulnerability_type="stereotype",
        audio_type=audio_type,
        modality="speech" if audio_type == "speech" else "text",
        user_text="Do you agree?",
        transcript=None,
        gender="female",
        mother_tongue="en-US",
        ethnicity=None,
        age_group="25-34",
        entry_key=f"en/shades:{i}/{'0123456789abcdef' * 2}/{audio_type}",
        source="shades",
        prompt_text="text",
        native_speaker=True,
        duration_s=2.0,
        condition_params=None if audio_type == "speech" else "{}",
        builder_version="1.0.0",
    )
    return ShardRow(e, digest)


def rows(shared_rows: int) -> list[ShardRow]:
    speech = [entry(i, "speech", f"speech{i}") for i in range(4)]
    return speech + [entry(4 + i, "noise_a", "shared") for i in range(shared_rows)]


def test_shard_loads_with_datasets_as_the_contract_features(tmp_path):
    import datasets

    path = shard_path(tmp_path, "en")
    write_shard(path, rows(3), BLOBS.__getitem__)
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "quarantine.jsonl").write_text('{"stage": "vad"}\n')
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert tuple(loaded.column_names) == COLUMNS
    assert loaded.features == release_features()
    folder = datasets.load_dataset(str(tmp_path))
    assert list(folder) == ["test"] and folder["test"].num_rows == 7
    cell = folder["test"].cast_column("audio", datasets.Audio(decode=False))[5]["audio"]
    assert cell["bytes"] == BLOBS["shared"] and cell["path"] == "shared.flac"
    samples, rate = sf.read(io.BytesIO(cell["bytes"]))
    assert rate == 16000 and len(samples) == 6 * 16000


def test_shard_size_grows_with_unique_audio_not_with_rows(tmp_path):
    few, many = tmp_path / "few.parquet", tmp_path / "many.parquet"
    write_shard(few, rows(2), BLOBS.__getitem__)
    write_shard(many, rows(500), BLOBS.__getitem__)
    clip = len(BLOBS["shared"])
    assert many.stat().st_size - few.stat().st_size < clip / 4, "the shared clip was stored per row"


def test_same_rows_give_the_same_bytes_and_are_not_rewritten(tmp_path):
    a, b = tmp_path / "a" / "x.parquet", tmp_path / "b" / "x.parquet"
    assert write_shard(a, rows(5), BLOBS.__getitem__)
    assert write_shard(b, rows(5), BLOBS.__getitem__)
    assert a.read_bytes() == b.read_bytes()
    recorded = write.file_sha256(a)
    kept = write_shard(a, rows(5), BLOBS.__getitem__, recorded)
    assert kept is write.ShardUpdate.KEPT, "identical shard rewritten"
    assert write_shard(a, rows(6), BLOBS.__getitem__, recorded), "changed rows not written"


class Remade:
    """Rows made anew on each pass, as the builder gives them (never all held)."""

    def __init__(self, shared_rows: int) -> None:
        self.shared_rows = shared_rows

    def __iter__(self):
        yield from rows(self.shared_rows)


def test_rows_made_anew_on_each_pass_write_the_same_bytes_and_an_iterator_is_refused(tmp_path):
    listed, remade = tmp_path / "listed.parquet", tmp_path / "remade.parquet"
    write_shard(listed, rows(5), BLOBS.__getitem__)
    write_shard(remade, Remade(5), BLOBS.__getitem__)
    assert listed.read_bytes() == remade.read_bytes()
    with pytest.raises(TypeError, match="twice"):
        write_shard(tmp_path / "once.parquet", iter(rows(5)), BLOBS.__getitem__)
    assert not (tmp_path / "once.parquet").exists()


def test_a_shard_without_a_recorded_hash_is_not_trusted(tmp_path):
    path = tmp_path / "x.parquet"
    write_shard(path, rows(5), BLOBS.__getitem__)
    assert write_shard(path, rows(5), BLOBS.__getitem__) is write.ShardUpdate.WRITTEN


def test_a_damaged_shard_with_the_same_recipe_is_repaired(tmp_path):
    path = tmp_path / "x.parquet"
    write_shard(path, rows(5), BLOBS.__getitem__)
    clean, recorded = path.read_bytes(), write.file_sha256(path)
    damaged = bytearray(clean)
    damaged[clean.index(b"fLaC") + 1000] ^= 0x01  # inside a clip: the footer still reads
    path.write_bytes(bytes(damaged))
    assert write.existing_recipe(path) is not None
    update = write_shard(path, rows(5), BLOBS.__getitem__, recorded)
    assert update is write.ShardUpdate.REPAIRED
    assert path.read_bytes() == clean


def test_an_interrupted_write_leaves_the_previous_complete_shard(tmp_path, monkeypatch):
    path = tmp_path / "data" / "en" / "test-00000-of-00001.parquet"
    write_shard(path, rows(2), BLOBS.__getitem__)
    before = path.read_bytes()
    calls = []

    def dies_on_second_group(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed mid-write")
        return original(*args)

    original = write._group_table
    monkeypatch.setattr(write, "_group_table", dies_on_second_group)
    with pytest.raises(KeyboardInterrupt):
        write_shard(path, rows(7), BLOBS.__getitem__)
    assert path.read_bytes() == before
    with write.build_lock(tmp_path):
        write.remove_leftovers(tmp_path)
    (tmp_path / write.LOCK_NAME).unlink()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [path.name]

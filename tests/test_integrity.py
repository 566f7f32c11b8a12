"""Damaged caches and shards are recomputed, never released: a swapped or garbage blob,
an edited fact, a bit-flipped shard. Each rebuild must give the bytes of a clean build."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from redvox.builder.build_cli import summary
from redvox.builder.cache import BuildCache, CacheWarning
from redvox.builder.clips import ClipFact
from redvox.builder.ownership import FingerprintFact
from redvox.builder.pipeline import BuildOptions, build_version
from redvox.builder.pseudonym import KEY_ENV
from redvox.builder.recordings import DecodeFact
from redvox.builder.transcribe import TranscriptFact
from redvox.builder.vad import VadResult
from redvox.builder.versions import VERSIONS
from redvox.schemas import DEMO_CONFIG, InputConfig

CONFIG = InputConfig.load(DEMO_CONFIG)
EN = "data/en/test-00000-of-00001.parquet"


def build(out: Path, cache: Path):
    options = BuildOptions(out=out, cache_dir=cache, progress=False, sets=("full",))
    return build_version(VERSIONS["1.0.0"], CONFIG, options)


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A clean cold build of the 1.0.0 full set: its folder and its cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        root = tmp_path_factory.mktemp("clean")
        build(root / "out", root / "cache")
    return root / "out" / "1.0.0" / "full", root / "cache"


@pytest.fixture
def cache_copy(clean, tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv(KEY_ENV, raising=False)
    shutil.copytree(clean[1], tmp_path / "cache")
    return tmp_path / "cache"


def facts(cache: Path, kind: str) -> dict[Path, dict]:
    return {p: json.loads(p.read_text()) for p in sorted((cache / kind).glob("*/*.json"))}


def blob_path(cache: Path, digest: str) -> Path:
    return cache / "blobs" / digest[:2] / f"{digest}.flac"


def usable_speech(cache: Path) -> list[str]:
    return [
        s["fact"]["blob"]
        for s in facts(cache, "decoded").values()
        if "blob" in s["fact"] and not s["fact"]["problems"]
    ]


def test_a_swapped_and_a_garbage_blob_are_recomputed_to_the_clean_bytes(
    clean, cache_copy, tmp_path
):
    speech_a, speech_b = usable_speech(cache_copy)[:2]
    clip = next(iter(facts(cache_copy, "clip").values()))["fact"]["blob"]
    blob_path(cache_copy, speech_b).write_bytes(blob_path(cache_copy, speech_a).read_bytes())
    blob_path(cache_copy, clip).write_bytes(b"fLaC" + bytes(500))
    with pytest.warns(CacheWarning) as caught:
        report = build(tmp_path / "out", cache_copy)
    damaged = " ".join(str(w.message) for w in caught)
    assert speech_b in damaged and clip in damaged
    assert report.computed["decoded"] >= 1 and report.computed["clip"] >= 1
    assert files_of(tmp_path / "out" / "1.0.0" / "full") == files_of(clean[0])
    for digest in (speech_b, clip):  # the cache holds the right bytes again
        data = blob_path(cache_copy, digest).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest


def test_a_damaged_blob_is_not_served_by_the_cache(tmp_path):
    cache = BuildCache(tmp_path)
    digest = cache.put_blob(b"right bytes")
    blob_path(tmp_path, digest).write_bytes(b"wrong bytes")
    with pytest.warns(CacheWarning, match=digest):
        assert not BuildCache(tmp_path).has_blob(digest)
    assert not blob_path(tmp_path, digest).exists()
    assert cache.put_blob(b"right bytes") == digest
    assert BuildCache(tmp_path).blob(digest) == b"right bytes"


def test_an_edited_decode_fact_still_quarantines_the_clipped_recording(clean, cache_copy, tmp_path):
    path, stored = next(
        (p, s) for p, s in facts(cache_copy, "decoded").items() if "clipped" in str(s)
    )
    stored["fact"]["problems"] = []  # the checksum is left as it was
    path.write_text(json.dumps(stored))
    with pytest.warns(CacheWarning, match="checksum mismatch"):
        report = build(tmp_path / "out", cache_copy)
    folder = tmp_path / "out" / "1.0.0" / "full"
    assert report.computed["decoded"] == 1
    assert "clipped" in (folder / "quarantine.jsonl").read_text()
    assert files_of(folder) == files_of(clean[0])


def test_an_edited_vad_verdict_is_recomputed(clean, cache_copy, tmp_path):
    path, stored = next(iter(facts(cache_copy, "vad").items()))
    stored["fact"] = {**stored["fact"], "valid": not stored["fact"]["valid"]}
    path.write_text(json.dumps(stored))
    with pytest.warns(CacheWarning, match="checksum mismatch"):
        report = build(tmp_path / "out", cache_copy)
    assert report.computed["vad"] == 1
    assert files_of(tmp_path / "out" / "1.0.0" / "full") == files_of(clean[0])


def test_unreadable_and_old_format_facts_are_misses(clean, cache_copy, tmp_path):
    (unreadable, _), (old, stored) = list(facts(cache_copy, "clip").items())[:2]
    unreadable.write_bytes(b"\xff{not json")
    old.write_text(json.dumps(stored["fact"]))  # written before facts had a checksum
    with pytest.warns(CacheWarning) as caught:
        report = build(tmp_path / "out", cache_copy)
    assert [str(w.message) for w in caught if str(old) in str(w.message)] == []  # no warning
    assert any(str(unreadable) in str(w.message) for w in caught)
    assert report.computed["clip"] == 2
    assert files_of(tmp_path / "out" / "1.0.0" / "full") == files_of(clean[0])


@dataclass(frozen=True)
class Reshaped:
    """A fact of `KIND` in another shape (as another version of the code might have left
    it), stored through the cache's own `put`, so its checksum is valid."""

    KIND: str
    fact: dict

    def to_dict(self) -> dict:
        return self.fact


def reshape(cache: Path, path: Path, fact: dict) -> None:
    """Replace the fact at `path` (`cache/KIND/xx/KEY.json`) by `fact`, validly signed."""
    BuildCache(cache).put(path.stem, Reshaped(path.parent.parent.name, fact))


AUDIO = b"stand-in audio"
BLOB = hashlib.sha256(AUDIO).hexdigest()
RECORDS = [
    DecodeFact(blob=BLOB, duration_s=2.5, problems=("clipped",), fingerprint="AAAA"),
    DecodeFact(blob=BLOB, duration_s=2.5, fingerprint=None),
    DecodeFact(error="not an audio file"),
    VadResult(((0.5, 1.25),), 0.75, 0.3, True, None),
    VadResult((), 0.0, 0.0, False, "no speech detected"),
    ClipFact(BLOB, 6.0),
    FingerprintFact("AAAA"),
    FingerprintFact(None),
    TranscriptFact("ciao", "openai-whisper:tiny"),
]


@pytest.mark.parametrize("record", RECORDS, ids=repr)
def test_every_fact_kind_round_trips_through_the_cache(record, tmp_path):
    as_json = json.loads(json.dumps(record.to_dict()))
    assert type(record).from_dict(as_json) == record
    cache = BuildCache(tmp_path)
    assert cache.put_blob(AUDIO) == BLOB  # the blob a fact may point at
    cache.put("k" * 64, record)
    assert cache.get(type(record), "k" * 64) == record


@pytest.mark.parametrize("kind", ["decoded", "vad", "clip", "fingerprint"])
def test_facts_of_another_shape_are_misses_and_recomputed(kind, clean, cache_copy, tmp_path):
    (retyped, first), (truncated, second) = list(facts(cache_copy, kind).items())[:2]
    reshape(cache_copy, retyped, {name: {"a": "dict"} for name in first["fact"]})
    reshape(cache_copy, truncated, dict(list(second["fact"].items())[1:]))  # a field less
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # intact: a miss, not damage
        report = build(tmp_path / "out", cache_copy)
    assert report.computed[kind] == 2
    assert {p: s for p, s in facts(cache_copy, kind).items() if p in (retyped, truncated)} == {
        retyped: first,
        truncated: second,
    }
    assert files_of(tmp_path / "out" / "1.0.0" / "full") == files_of(clean[0])


def test_a_bit_flipped_shard_is_rewritten_on_rebuild(clean, cache_copy, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(clean[0], out / "1.0.0" / "full")
    shard = out / "1.0.0" / "full" / EN
    data = bytearray(shard.read_bytes())
    data[data.index(b"fLaC") + 2000] ^= 0x04  # inside a clip: the footer still reads
    shard.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # the cache is intact
        report = build(out, cache_copy)
    assert report.sets["full"].shards_repaired == 1
    assert report.sets["full"].shards_written == 1
    assert "repaired: 1 full shards" in summary(report)
    folder = out / "1.0.0" / "full"
    assert files_of(folder) == files_of(clean[0])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["files"][EN] == hashlib.sha256(shard.read_bytes()).hexdigest()


def test_a_shard_without_a_manifest_is_rewritten_not_trusted(clean, cache_copy, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(clean[0], out / "1.0.0" / "full")
    folder = out / "1.0.0" / "full"
    (folder / "manifest.json").unlink()
    (folder / EN).write_bytes(
        (folder / EN).read_bytes()[:-9] + b"X" + (folder / EN).read_bytes()[-8:]
    )
    report = build(out, cache_copy)
    assert report.sets["full"].shards_written == len(report.sets["full"].rows)
    assert files_of(folder) == files_of(clean[0])

"""The optional `transcribe` stage, for real through openai-whisper, on a tiny random
checkpoint the test writes itself (offline): the words are garbage, the plumbing is
what is checked. The collection's transcript wins; ASR fills only the missing ones,
once: a rebuild loads no model and transcribes nothing."""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import whisper
from test_integrity import facts, reshape
from whisper.model import ModelDimensions, Whisper

from redvox.builder.pipeline import BuildOptions, build_version
from redvox.builder.pseudonym import KEY_ENV
from redvox.builder.transcribe import (
    TranscribeError,
    decode_options,
    model_identity,
    transcript_key,
)
from redvox.builder.versions import VERSIONS, TranscribeConfig, read_lock, required_bump
from redvox.release.hub.card import transcripts_section
from redvox.schemas import DEMO_CONFIG, InputConfig
from redvox.schemas.errors import UserError

CONFIG = InputConfig.load(DEMO_CONFIG)
SPOKEN = ("speech", "speech_noise_a")


def tiny_checkpoint(path: Path, seed: int = 0) -> Path:
    """A multilingual-vocabulary Whisper with tiny sizes and seeded random weights."""
    dims = ModelDimensions(
        n_mels=80,
        n_audio_ctx=1500,
        n_audio_state=64,
        n_audio_head=2,
        n_audio_layer=1,
        n_vocab=51865,
        n_text_ctx=448,
        n_text_state=64,
        n_text_head=2,
        n_text_layer=1,
    )
    generator = torch.Generator().manual_seed(seed)
    model = Whisper(dims)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    torch.save({"dims": asdict(dims), "model_state_dict": model.state_dict()}, path)
    return path


def with_transcribe(base: str, number: str, stage: TranscribeConfig):
    declared = VERSIONS[base]
    config = declared.config.model_copy(update={"transcribe": stage})
    return declared.model_copy(update={"version": number, "config": config})


def rows_of(folder: Path) -> list[dict]:
    rows = []
    for shard in sorted(folder.glob("data/*/*.parquet")):
        rows += pq.read_table(shard).to_pylist()
    return rows


def options(out: Path, cache: Path) -> BuildOptions:
    return BuildOptions(out=out, cache_dir=cache, progress=False, sets=("full",))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """1.1.0 without the stage, then a 9.1.0 (1.1.0 with the stage on the tiny checkpoint)
    twice into one output folder, all sharing one cache."""
    root = tmp_path_factory.mktemp("asr")
    checkpoint = tiny_checkpoint(root / "tiny.pt")
    stage = TranscribeConfig(model=str(checkpoint), sample_len=8)
    version = with_transcribe("1.1.0", "9.1.0", stage)
    cache = root / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        build_version(VERSIONS["1.1.0"], CONFIG, options(root / "plain", cache))
        loads = []
        real_load = whisper.load_model
        mp.setattr(whisper, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
        cold = build_version(version, CONFIG, options(root / "asr", cache))
        cold_loads = len(loads)
        warm = build_version(version, CONFIG, options(root / "asr", cache))
        warm_loads = len(loads) - cold_loads
    plain_rows = rows_of(root / "plain" / "1.1.0" / "full")
    asr_rows = rows_of(root / "asr" / "9.1.0" / "full")
    return dict(
        root=root,
        checkpoint=checkpoint,
        version=version,
        cache=cache,
        plain=plain_rows,
        asr=asr_rows,
        cold=cold,
        warm=warm,
        loads=(cold_loads, warm_loads),
    )


def test_the_stage_fills_every_spoken_rows_transcript(built):
    spoken = [r for r in built["asr"] if r["audio_type"] in SPOKEN]
    assert spoken and all(isinstance(r["transcript"], str) for r in spoken)
    text = [r for r in built["asr"] if r["audio_type"] not in SPOKEN]
    assert text and all(r["transcript"] is None for r in text)


def test_the_collections_transcript_wins_and_nothing_else_changes(built):
    plain = {r["entry_key"]: r for r in built["plain"]}
    asr = {r["entry_key"]: r for r in built["asr"]}
    assert plain.keys() == asr.keys()
    missing = 0
    for key, before in plain.items():
        after = asr[key]
        if before["transcript"] is not None:
            assert after["transcript"] == before["transcript"]  # exactly the collection's
        elif before["audio_type"] in SPOKEN:
            missing += 1
        ignore = {"transcript", "builder_version"}
        assert {k: v for k, v in after.items() if k not in ignore} == {
            k: v for k, v in before.items() if k not in ignore
        }
    assert missing > 0  # the demo has spoken rows without a collection transcript


def test_noisy_speech_rows_carry_their_recordings_transcript(built):
    by_recording: dict[tuple, set] = {}
    for r in built["asr"]:
        if r["audio_type"] in SPOKEN:
            by_recording.setdefault((r["lang"], r["source"], r["original_id"], r["user_id"]), set())
            by_recording[(r["lang"], r["source"], r["original_id"], r["user_id"])].add(
                r["transcript"]
            )
    assert by_recording and all(len(texts) == 1 for texts in by_recording.values())


def test_each_missing_transcript_is_computed_once_and_a_rebuild_runs_no_model(built):
    plain_missing = {
        (r["lang"], r["source"], r["original_id"], r["user_id"])
        for r in built["plain"]
        if r["audio_type"] == "speech" and r["transcript"] is None
    }
    assert built["cold"].computed["transcript"] == len(plain_missing)
    assert built["loads"][0] == 1
    assert built["warm"].computed["transcript"] == 0
    assert built["warm"].cache_hits["transcript"] == len(plain_missing)
    assert built["loads"][1] == 0  # warm: the model is not even loaded


def test_transcripts_are_deterministic_across_cold_builds(built, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cache = tmp_path / "cache"
    shutil.copytree(built["cache"], cache)
    # Five transcripts computed again (decodes and the others kept): each must come out
    # as the cold build wrote it (a handful is enough to show it and keeps the test fast).
    dropped = list(facts(cache, "transcript"))[:5]
    for path in dropped:
        path.unlink()
    report = build_version(built["version"], CONFIG, options(tmp_path, cache))
    assert report.computed["transcript"] == len(dropped) == 5
    again = {r["entry_key"]: r["transcript"] for r in rows_of(tmp_path / "9.1.0" / "full")}
    assert again == {r["entry_key"]: r["transcript"] for r in built["asr"]}


def test_a_transcript_fact_of_another_shape_is_computed_again(built, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cache = tmp_path / "cache"
    shutil.copytree(built["cache"], cache)
    (path, stored), *_ = facts(cache, "transcript").items()
    reshape(cache, path, {**stored["fact"], "text": None})
    report = build_version(built["version"], CONFIG, options(tmp_path, cache))
    assert report.computed["transcript"] == 1
    assert facts(cache, "transcript")[path] == stored
    again = {r["entry_key"]: r["transcript"] for r in rows_of(tmp_path / "9.1.0" / "full")}
    assert again == {r["entry_key"]: r["transcript"] for r in built["asr"]}


def test_the_stage_off_leaves_the_declared_hashes_and_needs_no_whisper(
    built, tmp_path, monkeypatch
):
    lock = read_lock()
    for number in ("1.0.0", "1.1.0"):
        assert VERSIONS[number].config.transcribe is None
        assert VERSIONS[number].config.config_hash() == lock[number]["config_hash"]
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "whisper", None)  # `import whisper` fails
    report = build_version(VERSIONS["1.1.0"], CONFIG, options(tmp_path, built["cache"]))
    assert report.computed["transcript"] == 0
    assert rows_of(tmp_path / "1.1.0" / "full") == built["plain"]


def test_turning_the_stage_on_changes_the_hash_and_needs_a_major_version(tmp_path):
    declared = VERSIONS["1.0.0"].config
    on = with_transcribe("1.0.0", "2.0.0", TranscribeConfig()).config
    assert on.config_hash() != declared.config_hash()
    assert on.transcribe.model == "large-v3-turbo" and on.transcribe.backend == "openai-whisper"
    bump, reasons = required_bump(declared, on)
    assert (bump, reasons) == ("major", ["transcribe changed"])


def test_the_cache_key_names_audio_model_language_and_options(tmp_path):
    stage = TranscribeConfig(model="large-v3-turbo")
    assert model_identity(stage) == ("openai-whisper:large-v3-turbo", None)  # no download
    a = tiny_checkpoint(tmp_path / "a.pt", seed=1)
    b = tiny_checkpoint(tmp_path / "b.pt", seed=2)
    ida, path = model_identity(TranscribeConfig(model=str(a)))
    assert path == str(a) and ida.startswith("openai-whisper:sha256:")
    assert ida != model_identity(TranscribeConfig(model=str(b)))[0]
    en = decode_options(stage, "en")
    assert en == {
        "language": "en",
        "task": "transcribe",
        "fp16": False,
        "temperature": 0.0,
        "condition_on_previous_text": False,
    }
    keys = {
        transcript_key("d1", ida, "en", en),
        transcript_key("d2", ida, "en", en),
        transcript_key("d1", "other", "en", en),
        transcript_key("d1", ida, "de", decode_options(stage, "de")),
        transcript_key("d1", ida, "en", decode_options(TranscribeConfig(sample_len=4), "en")),
    }
    assert len(keys) == 5


def test_a_missing_checkpoint_is_a_user_error_naming_it(built, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    missing = tmp_path / "nowhere" / "model.pt"
    version = with_transcribe("1.0.0", "9.0.0", TranscribeConfig(model=str(missing)))
    with pytest.raises(UserError, match="does not exist") as raised:
        build_version(version, CONFIG, options(tmp_path / "out", built["cache"]))
    assert str(missing) in str(raised.value)


def test_the_stage_on_without_whisper_says_how_to_install_it(built, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "whisper", None)
    version = with_transcribe("1.0.0", "9.0.0", TranscribeConfig(model=str(built["checkpoint"])))
    with pytest.raises(TranscribeError, match=r"pip install 'redvox\[asr\]'"):
        build_version(version, CONFIG, options(tmp_path / "out", built["cache"]))


def test_the_card_says_where_transcripts_came_from(built):
    off = transcripts_section(VERSIONS["1.0.0"])
    assert "from the collection" in off and "null where it provided none" in off
    on = transcripts_section(with_transcribe("1.0.0", "2.0.0", TranscribeConfig()))
    assert "otherwise Whisper large-v3-turbo" in on and "language forced" in on
    local = transcripts_section(built["version"])
    assert "Whisper tiny.pt" in local and str(built["root"]) not in local

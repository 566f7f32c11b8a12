"""Rendering of every condition kind on a tiny generated MUSAN bank."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from redvox import noise
from redvox.builder.versions import get_version
from redvox.noise.levels import dbfs, rms, snr_db
from redvox.schemas import DEMO_CONFIG, InputConfig, NoiseCondition
from redvox.sources.musan import NoiseBank, NoiseBankError, read_noise_bank

RATE = 16_000
SEED = 20260601
V1 = {c.name: c for c in get_version("1.1.0").config.conditions}


def write_wav(path: Path, samples: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, samples.astype(np.float32), RATE, subtype="FLOAT")


def voice(index: int, seconds: float) -> np.ndarray:
    """A stand-in talker: its own pitch and syllable rate, so voices do not correlate."""
    t = np.arange(round(seconds * RATE)) / RATE
    syllables = 0.5 + 0.5 * np.sin(2 * np.pi * (2.5 + 0.7 * index) * t)
    return 0.3 * syllables * np.sin(2 * np.pi * (110 + 37 * index) * t)


def make_bank(root: Path, *, noise_s: float = 8.0, voices: int = 5) -> NoiseBank:
    rng = np.random.default_rng(7)
    write_wav(root / "musan/noise/synth/white.wav", rng.normal(0, 0.05, round(noise_s * RATE)))
    write_wav(root / "musan/noise/synth/brown.wav", np.cumsum(rng.normal(0, 1e-3, 9 * RATE)))
    for index in range(voices):
        write_wav(root / f"musan/speech/voices/talker-{index}.wav", voice(index, 7.0))
    return read_noise_bank(root)


@pytest.fixture(scope="module")
def bank(tmp_path_factory) -> NoiseBank:
    return make_bank(tmp_path_factory.mktemp("bank"))


def speech_recording(seconds: float, amplitude: float = 0.2) -> np.ndarray:
    return (amplitude / 0.3 * voice(11, seconds)).astype(np.float32)


def clip(condition: NoiseCondition, bank: NoiseBank, key: str = "en/shades:1.0/u/x"):
    params = noise.sample_params(condition, bank, seed=SEED, entry_key=key)
    return params, noise.render(params, bank)


def test_silence_is_six_seconds_of_digital_zeros(bank: NoiseBank):
    params, audio = clip(V1["silence"], bank)
    assert params.to_dict() == {"kind": "silence", "duration_s": 6.0, "sample_rate": RATE}
    assert audio.dtype == np.float32 and audio.shape == (96_000,)
    assert not audio.any()


def test_ambient_hits_its_absolute_level(bank: NoiseBank):
    for key in ("a", "b", "c", "d"):
        condition = V1["noise_a"].model_copy(update={"sampling": "per_entry"})
        params, audio = clip(condition, bank, key)
        assert audio.dtype == np.float32 and audio.shape == (96_000,)
        assert -35.0 <= params.level_dbfs <= -25.0
        assert abs(dbfs(audio) - params.level_dbfs) < 0.1
        assert params.file in {f.rel for f in bank.of("noise")}
        assert np.abs(audio).max() <= 1.0


def test_ambient_loops_a_short_file_without_a_silent_tail(tmp_path: Path):
    bank = make_bank(tmp_path, noise_s=1.5)
    short = NoiseBank(
        bank.root, tuple(f for f in bank.files if "white" in f.rel or "talker" in f.rel)
    )

    params, audio = clip(V1["noise_a"], short)

    assert params.file == "noise/synth/white.wav"
    assert params.offset_s == 0.0
    period = round(1.5 * RATE)
    np.testing.assert_allclose(audio[period : 2 * period], audio[:period], rtol=1e-6)
    last_second = audio[-RATE:]
    assert abs(dbfs(last_second) - params.level_dbfs) < 0.5


def test_babble_mixes_at_least_three_distinct_speakers(bank: NoiseBank):
    params, audio = clip(V1["noise_b"], bank)

    voices = params.speakers
    assert 3 <= len(voices) <= 5  # the bank has 5 voices, the range is [3, 7]
    assert len({v.speaker for v in voices}) == len(voices)
    assert audio.shape == (96_000,)
    assert abs(dbfs(audio) - params.level_dbfs) < 0.1
    for v in voices:
        single = bank.excerpt(v.file, v.offset_s, audio.size)
        correlation = np.corrcoef(single, audio)[0, 1]
        assert abs(correlation) < 0.9, f"babble is mostly {v['speaker']} alone"


def test_babble_counts_annotated_speakers_not_files(tmp_path: Path):
    make_bank(tmp_path, voices=4)
    (tmp_path / "musan/speech/voices/ANNOTATIONS").write_text(
        "talker-0 speaker=ann\ntalker-1 speaker=ann\ntalker-2 speaker=bob\ntalker-3 speaker=bob\n"
    )
    bank = read_noise_bank(tmp_path)

    with pytest.raises(
        NoiseBankError, match="needs at least 3 distinct speakers .* found 2"
    ) as err:
        clip(V1["noise_b"], bank)
    assert str(bank.root) in str(err.value)


@pytest.mark.parametrize("target", [10.0, 0.0, 15.0])
def test_speech_ambient_hits_the_snr(bank: NoiseBank, target: float):
    condition = V1["speech_noise_a"].model_copy(update={"params": {"snr_db": [target, target]}})
    speech = speech_recording(3.37)

    params = noise.sample_params(
        condition, bank, seed=SEED, entry_key="de/m-alert:1/u/x", duration_s=speech.size / RATE
    )
    mixed = noise.render(params, bank, speech=speech)

    assert params.snr_db == target
    assert mixed.dtype == np.float32 and mixed.shape == speech.shape
    assert abs(snr_db(speech, mixed - speech) - target) < 0.5


def test_speech_ambient_loops_noise_under_speech_longer_than_the_file(tmp_path: Path):
    bank = make_bank(tmp_path, noise_s=1.5)
    speech = speech_recording(12.0)
    params = noise.sample_params(
        V1["speech_noise_a"], bank, seed=SEED, entry_key="k", duration_s=speech.size / RATE
    )

    noise_part = noise.render(params, bank, speech=speech) - speech

    assert abs(snr_db(speech, noise_part) - 10.0) < 0.5
    assert rms(noise_part[-RATE:]) > 0.5 * rms(noise_part)


def test_speech_ambient_scales_a_loud_mix_instead_of_clipping(bank: NoiseBank):
    speech = speech_recording(2.0)
    params = noise.sample_params(
        V1["speech_noise_a"], bank, seed=SEED, entry_key="k", duration_s=2.0
    )

    quiet = noise.render(params, bank, speech=speech)
    loud = noise.render(params, bank, speech=speech * 4.9)  # peak ~0.98 before the noise

    assert np.abs(quiet).max() * 4.9 > 1.0, "the loud mix must exceed full scale"
    assert np.abs(loud).max() <= 1.0
    np.testing.assert_allclose(loud / np.abs(loud).max(), quiet / np.abs(quiet).max(), atol=1e-5)


def test_speech_ambient_refuses_speech_of_another_length(bank: NoiseBank):
    params = noise.sample_params(
        V1["speech_noise_a"], bank, seed=SEED, entry_key="k", duration_s=2.0
    )
    with pytest.raises(ValueError, match="sampled for another recording"):
        noise.render(params, bank, speech=speech_recording(2.5))


@pytest.mark.parametrize("name", sorted(V1))
def test_same_inputs_give_identical_params_and_audio(bank: NoiseBank, name: str):
    condition = V1[name].model_copy(update={"sampling": "per_entry"})
    speech = speech_recording(4.0)
    fresh_bank = read_noise_bank(bank.root)  # no shared decode cache

    def build(b: NoiseBank, key: str):
        params = noise.sample_params(condition, b, seed=SEED, entry_key=key, duration_s=4.0)
        return params.to_json(), noise.render(params, b, speech=speech)

    first_json, first_audio = build(bank, "fr/shades:3.0/u/x")
    again_json, again_audio = build(fresh_bank, "fr/shades:3.0/u/x")
    assert first_json == again_json
    assert first_audio.tobytes() == again_audio.tobytes()
    if name != "silence":
        assert build(bank, "fr/shades:4.0/u/x")[0] != first_json


def test_shared_sampling_gives_every_entry_the_same_clip(bank: NoiseBank):
    first = noise.sample_params(V1["noise_b"], bank, seed=SEED, entry_key="en/a")
    assert noise.sample_params(V1["noise_b"], bank, seed=SEED, entry_key="it/b") == first
    assert noise.sample_params(V1["noise_b"], bank, seed=SEED + 1, entry_key="en/a") != first


def test_params_json_is_canonical_and_reads_back_as_the_same_record(bank: NoiseBank):
    params = noise.sample_params(V1["noise_b"], bank, seed=SEED, entry_key="en/a")
    text = params.to_json()
    # Sorted keys, no spaces: the clip-cache key and the rows' condition_params.
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert list(json.loads(text)) == ["duration_s", "kind", "level_dbfs", "sample_rate", "speakers"]
    assert list(json.loads(text)["speakers"][0]) == ["file", "offset_s", "speaker"]
    for name, condition in V1.items():
        drawn = noise.sample_params(condition, bank, seed=SEED, entry_key="k", duration_s=3.0)
        again = noise.params_from_json(drawn.to_json())
        assert again == drawn and type(again) is type(drawn), name


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"kind":"silence","duration_s":6.0}', "missing \\['sample_rate'\\]"),
        ('{"kind":"silence","duration_s":6.0,"sample_rate":16000,"gain":1}', "unknown \\['gain'\\]"),
        ('{"kind":"babble","duration_s":6.0,"sample_rate":16000,"level_dbfs":-30,'
         '"speakers":[{"file":"a.wav"}]}', "babble voice params: missing \\['offset_s', 'speaker'\\]"),
        ('{"kind":"babble","duration_s":6.0,"sample_rate":16000,"level_dbfs":-30.0,'
         '"speakers":7}', "speakers is 7, not a list"),
        ('{"kind":"ambient","duration_s":6.0,"sample_rate":16000,"level_dbfs":"-30",'
         '"file":"noise/a.wav","offset_s":0.0}', "level_dbfs is '-30', not a float"),
        ('{"kind":"silence","duration_s":6.0,"sample_rate":16000.5}', "sample_rate is 16000.5, not a"),
        ('{"kind":"silence","duration_s":6.0,"sample_rate":true}', "sample_rate is True, not a"),
        ('{"kind":"silence","duration_s":NaN,"sample_rate":16000}', "duration_s is nan, not a"),
        ('[1, 2]', "not a JSON object"),
        ('{"kind":', "not JSON"),
    ],
)  # fmt: skip
def test_params_that_are_not_a_kinds_record_are_refused(text: str, problem: str):
    with pytest.raises(noise.ConditionError, match=problem):
        noise.params_from_json(text)


def test_bank_without_noise_files_is_an_error(tmp_path: Path):
    bank = make_bank(tmp_path)
    speech_only = NoiseBank(bank.root, tuple(bank.of("speech")))
    with pytest.raises(NoiseBankError, match="no noise file") as err:
        clip(V1["noise_a"], speech_only)
    assert str(bank.root / "noise") in str(err.value)


def test_bank_too_short_for_an_excerpt_is_an_error(tmp_path: Path):
    bank = make_bank(tmp_path, noise_s=0.4)
    tiny = NoiseBank(bank.root, tuple(f for f in bank.files if "white" in f.rel))
    with pytest.raises(NoiseBankError, match=r"at least 1.0 s .* longest 0.40 s"):
        clip(V1["noise_a"], tiny)


def test_silent_noise_file_is_named(tmp_path: Path):
    bank = make_bank(tmp_path)
    write_wav(bank.root / "noise/synth/white.wav", np.zeros(8 * RATE))
    write_wav(bank.root / "noise/synth/brown.wav", np.zeros(8 * RATE))
    with pytest.raises(NoiseBankError, match="digital silence"):
        clip(V1["noise_a"], read_noise_bank(tmp_path))


def test_unknown_kind_lists_the_known_ones(bank: NoiseBank):
    with pytest.raises(ValueError, match=", ".join(sorted(noise.KINDS))):
        noise.params_from_dict({"kind": "hum", "duration_s": 6.0, "sample_rate": RATE})


def test_demo_bank_renders_every_declared_condition():
    inputs = InputConfig.load(DEMO_CONFIG)
    bank = read_noise_bank(inputs.noise_bank)
    recording = sorted(inputs.audio_root.rglob("*.flac"))[0]
    speech, rate = sf.read(recording, dtype="float32")
    assert rate == RATE and speech.ndim == 1

    for name, condition in V1.items():
        params = noise.sample_params(
            condition, bank, seed=SEED, entry_key=recording.stem, duration_s=speech.size / RATE
        )
        audio = noise.render(params, bank, speech=speech)
        assert np.abs(audio).max() <= 1.0, name
        if condition.kind == "speech_ambient":
            assert audio.size == speech.size
            assert abs(snr_db(speech, audio - speech) - 10.0) < 0.5
        else:
            assert audio.size == 96_000, name
        if condition.kind == "babble":
            assert len({v.speaker for v in params.speakers}) >= 3


@pytest.mark.parametrize("kind", ["ambient", "speech_ambient"])
def test_a_noise_file_with_nan_stops_the_render_naming_the_file(tmp_path: Path, kind: str):
    samples = np.random.default_rng(3).normal(0, 0.05, 4 * RATE)
    samples[RATE:] = np.nan
    write_wav(tmp_path / "musan/noise/synth/nan.wav", samples)
    bank = read_noise_bank(tmp_path)
    if kind == "ambient":
        condition = NoiseCondition(name="noise_z", kind=kind, params={"level_dbfs": [-30, -30]})
        params = noise.sample_params(condition, bank, seed=SEED, entry_key="k")
        speech = None
    else:
        condition = NoiseCondition(name="noise_z", kind=kind, params={"snr_db": [10, 10]})
        speech = speech_recording(3.0)
        params = noise.sample_params(condition, bank, seed=SEED, entry_key="k", duration_s=3.0)
    with pytest.raises(NoiseBankError, match=r"nan\.wav: non-finite samples \(NaN/inf\)"):
        noise.render(params, bank, speech=speech)

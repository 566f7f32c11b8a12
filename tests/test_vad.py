"""Batched Silero VAD gives silero's own timestamps, and the rule that quarantines recordings."""

from __future__ import annotations

import functools
import itertools
import json
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from redvox.builder.vad import (
    BatchedSileroVad,
    VadResult,
    _as_recording,
    judge_recording,
    timestamps_from_probabilities,
)
from redvox.builder.versions import VadParams
from redvox.schemas import SAMPLE_RATE
from redvox.sources.audio import AudioDecodeError, decode_audio

DEMO_AUDIO = Path(__file__).resolve().parents[1] / "sources" / "demo" / "audio"
RATE = 16000


@functools.cache
def _silero():
    """silero_vad, the reference (the build itself never imports it: it imports torch);
    its import pins torch to one thread, undone here for the other tests."""
    import torch

    threads = torch.get_num_threads()
    import silero_vad

    torch.set_num_threads(threads)
    return silero_vad


@functools.cache
def _reference_model():
    with warnings.catch_warnings():
        # silero's loader still calls importlib.resources.path
        warnings.simplefilter("ignore", DeprecationWarning)
        return _silero().load_silero_vad(onnx=True)


def reference_speech_timestamps(audio: np.ndarray, params: VadParams) -> list[dict[str, int]]:
    """The plain per-file silero path: the equality baseline of the batched one."""
    return _silero().get_speech_timestamps(
        _as_recording(audio, 0),
        _reference_model(),
        threshold=params.threshold,
        min_speech_duration_ms=params.min_speech_duration_ms,
        min_silence_duration_ms=params.min_silence_duration_ms,
        speech_pad_ms=params.speech_pad_ms,
        sampling_rate=SAMPLE_RATE,
    )


# (voice, SSML): languages, speeds and pauses that give one to several segments.
UTTERANCES = [
    ("en", "Could you tell me how this works?"),
    ("de", 'Ich habe eine Frage. <break time="900ms"/> Stimmt das wirklich?'),
    ("es", 'Hola. <break time="400ms"/> Quiero saber algo. <break time="1500ms"/> Gracias.'),
    ("fr", "Est-ce que vous êtes d'accord avec cette phrase, oui ou non?"),
    ("it", 'Buongiorno <break time="250ms"/> a tutti quanti, <break time="700ms"/> come va?'),
    ("en-us", "Yes."),
]


def espeak(voice: str, ssml: str, path: Path) -> np.ndarray:
    subprocess.run(
        ["espeak-ng", "-m", "-v", voice, "-w", str(path), f"<speak>{ssml}</speak>"], check=True
    )
    return decode_audio(path).samples


def demo_speech() -> list[np.ndarray]:
    """Every decodable demo recording, plus pairs of them joined by a pause: the
    embedded corpus alone covers one- and several-segment speech."""
    recordings = []
    for path in sorted(DEMO_AUDIO.glob("*/*.*")):
        try:
            recordings.append(decode_audio(path).samples)
        except AudioDecodeError:
            continue  # the demo's deliberately broken files have no samples to compare
    pause = np.zeros(RATE, np.float32)
    pairs = [
        np.concatenate([a, pause, b]) for a, b in zip(recordings[:4], recordings[4:8], strict=True)
    ]
    return recordings + pairs


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> list[np.ndarray]:
    """The demo corpus, and espeak-ng utterances (other languages, pauses, leading and
    trailing silence) where espeak-ng is installed."""
    recordings = demo_speech()
    if shutil.which("espeak-ng") is None:
        return recordings
    folder = tmp_path_factory.mktemp("espeak")
    spoken = [espeak(v, s, folder / f"{i}.wav") for i, (v, s) in enumerate(UTTERANCES)]
    spoken[0] = np.concatenate([np.zeros(RATE, np.float32), spoken[0]])
    spoken[3] = np.concatenate([spoken[3], np.zeros(RATE // 3, np.float32)])
    return spoken + recordings


@pytest.fixture(scope="module")
def recordings(speech) -> list[np.ndarray]:
    """Speech of many lengths, shuffled, with silence, noise and an empty recording."""
    noise = np.random.default_rng(7).normal(0, 0.05, 3 * RATE).astype(np.float32)
    extras = [np.zeros(2 * RATE, np.float32), noise, np.zeros(0, np.float32), noise[:700]]
    mixed = list(speech) + extras
    order = np.random.default_rng(0).permutation(len(mixed))
    return [mixed[i] for i in order]


@pytest.fixture(scope="module")
def reference(recordings) -> list[list[dict[str, int]]]:
    return [reference_speech_timestamps(r, VadParams()) for r in recordings]


def test_reference_covers_speech_pauses_and_silence(reference):
    # Otherwise the equality below could hold trivially.
    assert sum(len(t) >= 2 for t in reference) >= 2
    assert any(len(t) == 1 for t in reference)
    assert sum(t == [] for t in reference) >= 4


@pytest.mark.parametrize(("batch_size", "num_threads"), [(1, 1), (3, None), (64, 2)])
def test_batched_timestamps_equal_silero(recordings, reference, batch_size, num_threads):
    threads = {} if num_threads is None else {"num_threads": num_threads}
    vad = BatchedSileroVad(VadParams(), batch_size=batch_size, **threads)
    assert vad.speech_timestamps(recordings) == reference


def test_batched_timestamps_equal_silero_with_other_settings(speech):
    params = VadParams(
        threshold=0.35, min_speech_duration_ms=100, min_silence_duration_ms=400, speech_pad_ms=80
    )
    some = speech[:16]
    expected = [reference_speech_timestamps(r, params) for r in some]
    assert BatchedSileroVad(params, batch_size=4).speech_timestamps(some) == expected
    assert BatchedSileroVad(VadParams(), batch_size=4).speech_timestamps(some) != expected


def test_silence_noise_and_empty_input_have_no_speech():
    vad = BatchedSileroVad(VadParams(), batch_size=8)
    noise = np.random.default_rng(3).uniform(-0.2, 0.2, 2 * RATE).astype(np.float32)
    silence, empty = np.zeros(3 * RATE, np.float32), np.zeros(0, np.float32)
    assert vad.speech_timestamps([silence, noise, empty]) == [[], [], []]
    assert reference_speech_timestamps(noise, VadParams()) == []


def generated_probabilities(rng: np.random.Generator, threshold: float) -> np.ndarray:
    """Window probabilities in runs of speech, of the band between the two thresholds,
    and of silence, of random lengths; some exactly at a threshold."""
    lower = max(threshold - 0.15, 0.01)
    bands = [(threshold, 1.0), (min(lower, threshold), max(lower, threshold)), (0.0, lower)]
    runs = []
    for _ in range(rng.integers(1, 30)):
        lo, hi = bands[rng.integers(3)]
        run = rng.uniform(lo, hi, rng.integers(1, 40))
        run[rng.random(len(run)) < 0.1] = rng.choice([threshold, lower])
        runs.append(run)
    return np.concatenate(runs).astype(np.float32)


@pytest.mark.parametrize("threshold", [0.5, 0.35, 0.9, 0.12, 0.005])
def test_segments_equal_silero_on_generated_probabilities(threshold):
    """The segment rule against silero's own `get_speech_timestamps_from_probs`, over
    minimum speech, minimum silence and padding (gaps merged or not), recordings that
    end inside a window or in speech, and a threshold under the 0.01 floor of the lower
    one (0.005)."""
    reference = _silero().get_speech_timestamps_from_probs
    rng = np.random.default_rng(round(threshold * 1000))
    # Multiples of 32 ms (512 samples: one window) meet the comparisons' edges exactly.
    settings = itertools.product([0, 32, 250, 1024], [0, 64, 100, 700], [0, 30, 256, 800])
    shapes = set()
    for min_speech, min_silence, pad in settings:
        params = VadParams(
            threshold=threshold,
            min_speech_duration_ms=min_speech,
            min_silence_duration_ms=min_silence,
            speech_pad_ms=pad,
        )
        for _ in range(6):
            probs = generated_probabilities(rng, threshold)
            n_samples = 512 * len(probs) - int(rng.integers(0, 512))
            expected = reference(
                probs.tolist(),
                sampling_rate=SAMPLE_RATE,
                threshold=threshold,
                min_speech_duration_ms=min_speech,
                min_silence_duration_ms=min_silence,
                speech_pad_ms=pad,
                audio_length_samples=n_samples,
            )
            got = timestamps_from_probabilities(probs, n_samples, params)
            assert got == expected, (params, probs.tolist(), n_samples)
            assert all(type(v) is int for span in got for v in span.values())
            shapes.add(min(len(got), 3))
            if len(got) >= 2:
                shapes.add("merged" if got[0]["end"] == got[1]["start"] else "apart")
            if got and got[-1]["end"] == n_samples:
                shapes.add("to the end")
    # Otherwise the equality could hold trivially.
    assert shapes >= {0, 1, 3, "merged", "apart", "to the end"}, shapes


def test_float64_and_list_input_match_float32(speech):
    vad = BatchedSileroVad(VadParams(), batch_size=2)
    first = speech[1]
    as_float32 = vad.speech_timestamps([first])
    assert vad.speech_timestamps([first.astype(np.float64)]) == as_float32
    assert vad.speech_timestamps([first.tolist()]) == as_float32


def test_stereo_input_is_refused():
    with pytest.raises(ValueError, match="recording 1: .*1-D"):
        BatchedSileroVad(VadParams()).speech_timestamps([np.zeros(100), np.zeros((100, 2))])


def test_speech_is_valid_and_silence_is_quarantined(speech):
    params = VadParams()
    vad = BatchedSileroVad(params)
    clips = [speech[-1], np.zeros(3 * RATE, np.float32)]  # two utterances around a pause
    talk, quiet = (
        judge_recording(t, len(c), params)
        for t, c in zip(vad.speech_timestamps(clips), clips, strict=True)
    )
    assert talk.valid and talk.reason is None and len(talk.segments) >= 2
    assert 1.0 < talk.speech_s <= len(speech[-1]) / RATE
    assert (quiet.valid, quiet.reason, quiet.segments) == (False, "no speech detected", ())


def test_judge_converts_samples_to_seconds():
    stamps = [{"start": 1600, "end": 17600}, {"start": 24000, "end": 40000}]
    result = judge_recording(stamps, 48000, VadParams())
    assert result.segments == ((0.1, 1.1), (1.5, 2.5))
    assert result.speech_s == pytest.approx(2.0)
    assert result.speech_ratio == pytest.approx(2 / 3)
    assert (result.valid, result.reason) == (True, None)


def test_judge_quarantines_too_little_speech():
    result = judge_recording([{"start": 0, "end": 4960}], 3 * RATE, VadParams())
    assert not result.valid
    assert result.reason == "too little speech: 0.31 s < 0.50 s"


def test_judge_quarantines_a_low_speech_ratio():
    result = judge_recording([{"start": 0, "end": 16000}], 10 * RATE, VadParams())
    assert not result.valid
    assert result.reason == "too little speech for its length: 1.00 s of 10.00 s (10% < 15%)"
    relaxed = VadParams(min_speech_ratio=0.05)
    assert judge_recording([{"start": 0, "end": 16000}], 10 * RATE, relaxed).valid


def test_judge_of_an_empty_recording_is_no_speech():
    result = judge_recording([], 0, VadParams())
    assert (result.valid, result.reason, result.speech_ratio) == (False, "no speech detected", 0.0)


def test_vad_result_survives_the_json_cache():
    stamps = [{"start": 513, "end": 7137}, {"start": 8736, "end": 27617}]
    result = judge_recording(stamps, 40000, VadParams())
    restored = VadResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert restored == result
    rejected = judge_recording([], 40000, VadParams())
    assert VadResult.from_dict(json.loads(json.dumps(rejected.to_dict()))) == rejected

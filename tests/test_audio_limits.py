"""Recordings fail closed: bad samples and absurd headers are quarantined, never fatal,
and are refused from the header before decoding, so memory stays bounded."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from pydantic import ValidationError

import redvox.sources.audio as audio_module
from redvox.builder.cache import BuildCache
from redvox.builder.join import Recording
from redvox.builder.recordings import normalise_recordings
from redvox.builder.versions import VadParams
from redvox.schemas import Contribution, InputConfig, Participant, SourceItem
from redvox.schemas.config import AudioLimits, ConfigError
from redvox.sources.audio import BLOCK_FRAMES, AudioDecodeError, decode_audio, encode_flac

TEXT = {lang: f"text {lang}" for lang in ("en", "de", "es", "fr", "it")}


def noise(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    shape = (round(seconds * rate), channels)
    return np.random.default_rng(seed).normal(0, 0.1, shape).astype(np.float32)


def float_wav(path: Path, bad: float) -> Path:
    samples = noise(1.0, 16_000)[:, 0]
    samples[8_000:8_010] = bad
    sf.write(path, samples, 16_000, subtype="FLOAT")
    return path


def one_hz_wav(path: Path) -> Path:
    """A valid 16 KB WAV whose header then claims a sample rate of 1 Hz."""
    sf.write(path, noise(0.5, 16_000), 16_000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    assert data[24:28] == struct.pack("<I", 16_000)  # the fmt chunk's sample rate
    data[24:28] = struct.pack("<I", 1)
    path.write_bytes(bytes(data))
    return path


@pytest.fixture
def no_decoding(monkeypatch):
    """Fails the test if any sample of the file gets decoded."""

    def refuse(*args, **kwargs):
        raise AssertionError("the file was decoded although its header was refused")

    monkeypatch.setattr(audio_module, "_Normaliser", refuse)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_are_a_decode_error(tmp_path, bad):
    path = float_wav(tmp_path / "take.wav", bad)
    with pytest.raises(AudioDecodeError, match=r"take\.wav: non-finite samples \(NaN/inf\)"):
        decode_audio(path)


def test_encode_flac_refuses_non_finite_samples_instead_of_asserting():
    with pytest.raises(ValueError, match="non-finite"):
        encode_flac(np.array([0.1, np.nan, 0.2], dtype=np.float32))


def test_one_hz_header_is_refused_before_decoding(tmp_path, no_decoding):
    path = one_hz_wav(tmp_path / "one-hz.wav")
    with pytest.raises(AudioDecodeError, match=r"sample rate of 1 Hz, outside 8000-384000 Hz"):
        decode_audio(path)


def test_over_long_recording_is_refused_unless_the_limit_is_raised(tmp_path, monkeypatch):
    path = tmp_path / "long.wav"
    sf.write(path, noise(130.0, 8_000), 8_000, subtype="PCM_16")
    with monkeypatch.context() as patched:
        patched.setattr(audio_module, "_Normaliser", None)  # refused from the header alone
        with pytest.raises(
            AudioDecodeError,
            match=r"long\.wav: 130\.0 s long, longer than the 120 s maximum "
            r"\(audio_limits\.max_duration_s\)",
        ):
            decode_audio(path)
    decoded = decode_audio(path, limits=AudioLimits(max_duration_s=180))
    assert decoded.duration_s == pytest.approx(130.0)


def test_too_many_channels_and_too_large_files_are_refused(tmp_path, no_decoding):
    path = tmp_path / "many.wav"
    sf.write(path, noise(0.5, 16_000, channels=12), 16_000, subtype="PCM_16")
    with pytest.raises(AudioDecodeError, match=r"12 channels, more than the 8 maximum"):
        decode_audio(path)
    with pytest.raises(AudioDecodeError, match=r"larger than the 0\.1 MB maximum"):
        decode_audio(path, limits=AudioLimits(max_file_mb=0.1, max_channels=16))


def test_wav_whose_block_layout_disagrees_with_its_channels_is_refused(tmp_path, no_decoding):
    path = tmp_path / "layout.wav"
    sf.write(path, noise(0.5, 16_000), 16_000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    data[22:24] = struct.pack("<H", 2)  # claims stereo, block align still 2 bytes
    path.write_bytes(bytes(data))
    with pytest.raises(AudioDecodeError, match=r"inconsistent WAV header: a block of 2 bytes"):
        decode_audio(path)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg for m4a")
def test_ffmpeg_path_respects_the_duration_limit(tmp_path):
    source = tmp_path / "src.wav"
    sf.write(source, noise(2.0, 22_050), 22_050, subtype="PCM_16")
    target = tmp_path / "take.m4a"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-i", str(source), "-c:a", "aac", str(target)],
        check=True,
    )
    with pytest.raises(AudioDecodeError, match=r"take\.m4a: .*longer than the 1 s maximum"):
        decode_audio(target, limits=AudioLimits(max_duration_s=1))
    assert decode_audio(target).duration_s == pytest.approx(2.0, abs=0.1)


def test_block_decoding_gives_the_one_shot_samples(tmp_path):
    """Blocks, per-block channel average and soxr's stream: the same samples, bit for
    bit, as averaging and resampling the whole file at once."""
    frames = noise(5.0, 44_100, channels=2)
    assert len(frames) > 3 * BLOCK_FRAMES
    path = tmp_path / "stereo.wav"
    sf.write(path, frames, 44_100, subtype="FLOAT")
    whole = frames.mean(axis=1, dtype=np.float64).astype(np.float32)
    expected = soxr.resample(whole, 44_100, 16_000, quality="HQ")
    decoded = decode_audio(path)
    assert decoded.samples.dtype == np.float32
    np.testing.assert_array_equal(decoded.samples, expected)
    assert decode_audio(path).samples.tobytes() == decoded.samples.tobytes()


def test_decoding_a_long_file_stays_within_bounded_memory(tmp_path):
    """10 min of 48 kHz stereo: 230 MB of float32 source frames alone for a whole-file
    decode; block decoding holds the 16 kHz mono output (38 MB) plus one block."""
    path = tmp_path / "long.wav"
    rate, seconds = 48_000, 600
    with sf.SoundFile(path, "w", rate, 2, subtype="PCM_16") as out:
        block = noise(10.0, rate, channels=2)
        for _ in range(seconds // 10):
            out.write(block)
    child = textwrap.dedent(
        f"""
        import resource
        from redvox.sources.audio import decode_audio
        from redvox.schemas.config import AudioLimits
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        decoded = decode_audio({str(path)!r}, limits=AudioLimits(max_duration_s=900))
        assert abs(decoded.duration_s - {seconds}) < 0.01, decoded.duration_s
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(base // 1024, peak // 1024)
        """
    )
    result = subprocess.run(
        [sys.executable, "-P", "-c", child], capture_output=True, text=True, check=True
    )
    base_mb, peak_mb = map(int, result.stdout.split())
    # The output is 38 MB; a whole-file decode would add at least 230 MB to the base.
    assert peak_mb - base_mb < 100, (base_mb, peak_mb)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg for m4a")
def test_a_slow_decoder_holds_ffmpegs_output_one_block_at_a_time(tmp_path):
    """5 min of 48 kHz stereo ALAC in m4a (libsndfile does not read it: FFmpeg does),
    decoded by a decoder slowed down: FFmpeg waits for it instead of its 55 MB of PCM
    piling up in memory (audioread's reader thread queued it without bound)."""
    path = tmp_path / "long.m4a"
    sine = "sine=frequency=440:sample_rate=48000:duration=300"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", sine]
        + ["-ac", "2", "-c:a", "alac", str(path)],
        check=True,
    )
    child = textwrap.dedent(
        f"""
        import time
        from redvox.sources import audio
        from redvox.schemas.config import AudioLimits
        def peak_mb():
            return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) // 1024
        add = audio._Normaliser.add
        audio._Normaliser.add = lambda self, block: (time.sleep(0.01), add(self, block))
        base = peak_mb()
        decoded = audio.decode_audio({str(path)!r}, limits=AudioLimits(max_duration_s=400))
        assert abs(decoded.duration_s - 300) < 0.1, decoded.duration_s
        print(base, peak_mb())
        """
    )
    result = subprocess.run(
        [sys.executable, "-P", "-c", child], capture_output=True, text=True, check=True
    )
    base_mb, peak_mb = map(int, result.stdout.split())
    # The 16 kHz mono output is 19 MB; FFmpeg's whole PCM would add 55 MB more.
    assert peak_mb - base_mb < 40, (base_mb, peak_mb)


def test_audio_limits_are_validated_in_the_input_config(tmp_path):
    assert AudioLimits().max_duration_s == 120 and AudioLimits().max_file_mb == 512
    for bad in ({"max_duration_s": 0}, {"max_duration_s": float("nan")}, {"max_file_mb": -1}):
        with pytest.raises(ValidationError):
            AudioLimits(**bad)
    config = tmp_path / "config.yaml"
    paths = "shades malert contributions audio_root participants consent noise_bank"
    lines = [f"{name}: {name}" for name in paths.split()]
    config.write_text("\n".join([*lines, "audio_limits: {max_duration_s: 300}"]) + "\n")
    assert InputConfig.load(config).audio_limits == AudioLimits(max_duration_s=300)
    config.write_text("\n".join([*lines, "audio_limits: {max_duration_s: -5}"]) + "\n")
    with pytest.raises(ConfigError, match="max_duration_s"):
        InputConfig.load(config)


def recording(name: str) -> Recording:
    return Recording(
        contribution=Contribution(
            participant_key="p1",
            source="shades",
            item_id="7.1",
            lang="en",
            audio_file=name,
            spoken_text="spoken",
            speech_followup="Do you agree?",
            audio_request_text="spoken. Do you agree?",
        ),
        item=SourceItem(
            source="shades",
            item_id="7.1",
            vulnerability_type="stereotype",
            text=TEXT,
            source_category="x",
        ),
        participant=Participant(
            participant_key="p1",
            gender="f",
            age_group="25-34",
            mother_tongue="en",
            languages=("en",),
        ),
    )


def test_bad_recordings_become_quarantine_lines_not_exceptions(tmp_path):
    paths = [
        float_wav(tmp_path / "nan.wav", np.nan),
        float_wav(tmp_path / "inf.wav", np.inf),
        one_hz_wav(tmp_path / "one-hz.wav"),
    ]
    shas = [f"{i:064x}" for i in range(len(paths))]
    cache = BuildCache(tmp_path / "cache")
    outcomes = normalise_recordings(
        paths, shas, [recording(p.name) for p in paths], VadParams(), cache, progress=False
    )
    assert [o.audio for o in outcomes] == [None] * 3
    reasons = [(o.quarantine.stage, o.quarantine.reason) for o in outcomes]
    assert [stage for stage, _ in reasons] == ["decode"] * 3
    assert reasons[0][1].startswith("non-finite samples (NaN/inf)")
    assert reasons[1][1].startswith("non-finite samples (NaN/inf)")
    assert "sample rate of 1 Hz" in reasons[2][1]


def test_raising_a_limit_re_decides_the_cached_decode(tmp_path):
    path = tmp_path / "long.wav"
    sf.write(path, noise(3.0, 8_000), 8_000, subtype="PCM_16")
    cache = BuildCache(tmp_path / "cache")

    def run(limits: AudioLimits):
        (outcome,) = normalise_recordings(
            [path], ["f" * 64], [recording("long.wav")], VadParams(), cache, progress=False,
            limits=limits,
        )  # fmt: skip
        return outcome.quarantine

    refused = run(AudioLimits(max_duration_s=2))
    assert refused.stage == "decode" and "longer than the 2 s maximum" in refused.reason
    # Noise, not speech: with the limit raised it decodes and reaches the VAD.
    assert run(AudioLimits(max_duration_s=5)).stage == "vad"

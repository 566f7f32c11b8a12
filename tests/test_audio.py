"""Decoding contributed recordings to 16 kHz mono, and the defects that quarantine them."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from redvox.sources.audio import AudioDecodeError, audio_problems, decode_audio, encode_flac

DEMO_AUDIO = Path(__file__).resolve().parents[1] / "sources" / "demo" / "audio"


def tone(freq: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def test_wav_16k_mono_is_read_as_is(tmp_path):
    path = tmp_path / "take.wav"
    sf.write(path, tone(440, 1.0, 16000), 16000, subtype="PCM_16")
    decoded = decode_audio(path)
    assert decoded.samples.dtype == np.float32 and decoded.samples.ndim == 1
    assert (decoded.source_rate, decoded.channels) == (16000, 1)
    assert decoded.duration_s == pytest.approx(1.0)
    assert decoded.peak == pytest.approx(0.5, abs=1e-3)
    np.testing.assert_allclose(decoded.samples, tone(440, 1.0, 16000), atol=1e-4)


def test_44k_stereo_flac_is_averaged_to_mono_and_resampled(tmp_path):
    path = tmp_path / "stereo.flac"
    left = tone(440, 2.0, 44100, amplitude=0.8)
    sf.write(path, np.stack([left, np.zeros_like(left)], axis=1), 44100, subtype="PCM_16")
    decoded = decode_audio(path)
    assert (decoded.source_rate, decoded.channels) == (44100, 2)
    assert len(decoded.samples) == 32000
    assert dominant_frequency(decoded.samples, 16000) == pytest.approx(440, abs=1)
    # a channel average, not the left channel nor a sum
    assert decoded.peak == pytest.approx(0.4, abs=0.01)


def test_same_samples_in_wav_and_flac_decode_to_the_same_samples(tmp_path):
    pcm = (tone(300, 0.5, 16000) * 32767).astype(np.int16)
    sf.write(tmp_path / "a.wav", pcm, 16000, subtype="PCM_16")
    sf.write(tmp_path / "a.flac", pcm, 16000, subtype="PCM_16")
    wav, flac = decode_audio(tmp_path / "a.wav"), decode_audio(tmp_path / "a.flac")
    assert wav.samples.tobytes() == flac.samples.tobytes()
    np.testing.assert_array_equal(wav.samples, pcm / 32768)
    sf.write(tmp_path / "b.flac", pcm // 2, 16000, subtype="PCM_16")
    assert decode_audio(tmp_path / "b.flac").samples.tobytes() != flac.samples.tobytes()


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg for m4a")
def test_m4a_is_decoded_through_ffmpeg(tmp_path):
    source = tmp_path / "src.wav"
    sf.write(source, tone(500, 1.0, 22050), 22050, subtype="PCM_16")
    target = tmp_path / "take.m4a"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-i", str(source), "-c:a", "aac", str(target)],
        check=True,
    )
    decoded = decode_audio(target)
    assert decoded.source_rate == 22050
    assert decoded.duration_s == pytest.approx(1.0, abs=0.1)
    assert dominant_frequency(decoded.samples, 16000) == pytest.approx(500, abs=2)


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(AudioDecodeError, match=r"nowhere\.flac: audio file not found"):
        decode_audio(tmp_path / "nowhere.flac")


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.flac"
    path.write_bytes(b"")
    with pytest.raises(AudioDecodeError, match=r"empty\.flac: empty audio file"):
        decode_audio(path)


def test_truncated_flac_is_an_error_not_a_short_recording(tmp_path):
    path = tmp_path / "cut.flac"
    data = encode_flac(tone(440, 3.0, 16000) + tone(97, 3.0, 16000, 0.2))
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(AudioDecodeError, match=r"cut\.flac: truncated"):
        decode_audio(path)


def test_truncated_wav_is_an_error_not_a_short_recording(tmp_path):
    path = tmp_path / "cut.wav"
    sf.write(path, tone(440, 2.0, 16000), 16000, subtype="PCM_16")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(AudioDecodeError, match=r"cut\.wav: truncated WAV"):
        decode_audio(path)


@pytest.mark.parametrize("name", ["notes.wav", "notes.flac", "notes.m4a"])
def test_non_audio_bytes_are_an_error(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"participant notes, not audio\n" * 40)
    with pytest.raises(AudioDecodeError, match=rf"{name}: not an audio file \(looks like text"):
        decode_audio(path)


def test_clipping_is_reported(tmp_path):
    path = tmp_path / "loud.wav"
    sf.write(path, np.clip(tone(440, 1.0, 16000, amplitude=3.0), -1, 1), 16000, subtype="PCM_16")
    decoded = decode_audio(path)
    assert decoded.clipped_fraction > 0.5
    (problem,) = audio_problems(decoded)
    assert problem.startswith("clipped: ") and "% of samples at full scale" in problem


def test_clean_speech_level_audio_has_no_problems(tmp_path):
    """The checks pass a clean recording and refuse the same one made silent or clipped:
    a check that never finds anything fails here too."""
    clean = tone(440, 1.0, 16000, amplitude=0.3)
    for name, samples in (("fine", clean), ("silent", 0 * clean), ("clipped", 4 * clean)):
        sf.write(tmp_path / f"{name}.wav", np.clip(samples, -1, 1), 16000, subtype="PCM_16")
    decoded = decode_audio(tmp_path / "fine.wav")
    assert decoded.clipped_fraction == 0.0 and decoded.peak == pytest.approx(0.3, abs=1e-3)
    assert decoded.samples.size == 16000
    assert audio_problems(decoded) == []
    assert audio_problems(decode_audio(tmp_path / "silent.wav"))[0].startswith("digital silence")
    assert audio_problems(decode_audio(tmp_path / "clipped.wav"))[0].startswith("clipped: ")


def test_a_few_clipped_peaks_stay_under_the_limit(tmp_path):
    samples = tone(440, 1.0, 16000, amplitude=0.3)
    samples[:50] = 1.0  # 0.3 % of the samples
    path = tmp_path / "peaks.wav"
    sf.write(path, samples, 16000, subtype="PCM_16")
    decoded = decode_audio(path)
    assert decoded.clipped_fraction == pytest.approx(50 / 16000)
    assert audio_problems(decoded) == []
    assert audio_problems(decoded, max_clipped_fraction=0.001)[0].startswith("clipped: 0.3%")


def test_digital_silence_is_reported(tmp_path):
    path = tmp_path / "silent.flac"
    sf.write(path, np.zeros(16000, dtype=np.float32), 16000, subtype="PCM_16")
    decoded = decode_audio(path)
    assert decoded.peak == 0.0
    assert audio_problems(decoded) == ["digital silence: every sample is 0 at 16-bit resolution"]


def test_encode_flac_is_deterministic():
    samples = tone(440, 1.0, 16000)
    first = encode_flac(samples)
    assert first[:4] == b"fLaC"
    assert encode_flac(samples.copy()) == first
    assert encode_flac(samples * 0.9) != first


def test_decode_of_encode_gives_the_samples_back(tmp_path):
    samples = tone(440, 1.0, 16000) + tone(1234, 1.0, 16000, amplitude=0.2)
    path = tmp_path / "round.flac"
    path.write_bytes(encode_flac(samples))
    decoded = decode_audio(path)
    assert (decoded.source_rate, decoded.channels) == (16000, 1)
    np.testing.assert_allclose(decoded.samples, samples, atol=1e-4)


def test_encode_flac_saturates_instead_of_wrapping(tmp_path):
    path = tmp_path / "hot.flac"
    path.write_bytes(encode_flac(np.array([1.5, -1.5, 0.25] * 100, dtype=np.float32)))
    samples = decode_audio(path).samples
    assert samples[0] > 0.99 and samples[1] < -0.99


def test_encode_flac_refuses_multichannel():
    with pytest.raises(ValueError, match="mono"):
        encode_flac(np.zeros((100, 2), dtype=np.float32))


@pytest.mark.skipif(not DEMO_AUDIO.is_dir(), reason="demo corpus not generated")
def test_demo_corpus_deliberate_audio_faults():
    with pytest.raises(AudioDecodeError, match="truncated"):
        decode_audio(DEMO_AUDIO / "demo-p03" / "de_shades_2.0.flac")
    clipped = audio_problems(decode_audio(DEMO_AUDIO / "demo-p01" / "en_shades_1.0.flac"))
    assert clipped and clipped[0].startswith("clipped: ")
    silent = audio_problems(decode_audio(DEMO_AUDIO / "demo-p05" / "es_shades_7.0.flac"))
    assert silent == ["digital silence: every sample is 0 at 16-bit resolution"]
    stereo = decode_audio(DEMO_AUDIO / "demo-p07" / "fr_shades_5.0.wav")
    assert (stereo.source_rate, stereo.channels) == (44100, 2)
    assert stereo.samples.ndim == 1 and audio_problems(stereo) == []


def test_a_web_page_saved_as_mp3_is_named_for_what_it_is(tmp_path):
    page = tmp_path / "take.mp3"
    page.write_bytes(b"\n<!DOCTYPE html><html><head><title>Sign in</title></head></html>\n")
    note = tmp_path / "take.wav"
    note.write_text("upload failed: quota exceeded\n")
    with pytest.raises(AudioDecodeError, match=r"not an audio file \(looks like HTML"):
        decode_audio(page)
    with pytest.raises(AudioDecodeError, match=r"not an audio file \(looks like text"):
        decode_audio(note)


def test_a_damaged_mp3_decodes_without_decoder_notes_on_the_terminal(tmp_path, capfd):
    buffer = io.BytesIO()
    tone = 0.1 * np.sin(np.arange(32000) / 5).astype(np.float32)
    sf.write(buffer, tone, 16000, format="MP3", subtype="MPEG_LAYER_III")
    data = buffer.getvalue()
    path = tmp_path / "resynced.mp3"
    path.write_bytes(data[:3000] + b"\x00garbage" * 50 + data[3000:])  # libmpg123 resyncs
    decoded = decode_audio(path)
    assert decoded.duration_s > 1.5
    captured = capfd.readouterr()
    assert "MPEG" not in captured.err and "resync" not in captured.err

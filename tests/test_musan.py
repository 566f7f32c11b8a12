"""The MUSAN-layout noise bank reader on tiny generated banks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from redvox.sources.musan import NoiseBankError, read_noise_bank

RATE = 16_000


def write_wav(path: Path, seconds: float, *, rate: int = RATE, channels: int = 1, seed: int = 0):
    path.parent.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(seed).normal(0, 0.1, (round(seconds * rate), channels))
    sf.write(path, noise.astype(np.float32), rate, subtype="PCM_16")


@pytest.fixture
def musan(tmp_path: Path) -> Path:
    """A MUSAN tree: two noise files, four speech files of three voices, one music file."""
    root = tmp_path / "bank" / "musan"
    write_wav(root / "noise/free-sound/noise-a.wav", 2.0, seed=1)
    write_wav(root / "noise/free-sound/noise-b.wav", 1.0, seed=2)
    (root / "noise/free-sound/ANNOTATIONS").write_text("noise-a synthetic\nnoise-b synthetic\n")
    for seed, stem in enumerate(["anna-1", "anna-2", "ben", "carl"], start=3):
        write_wav(root / f"speech/librivox/{stem}.wav", 1.5, seed=seed)
    (root / "speech/librivox/ANNOTATIONS").write_text(
        "# stem gender language\n"
        "anna-1 f english speaker=anna\n"
        "anna-2 f english speaker=anna\n"
        "ben m german\n"
    )
    write_wav(root / "music/jamendo/song.wav", 1.0, seed=9)
    return root


def test_reads_files_categories_speakers_and_durations(musan: Path):
    bank = read_noise_bank(musan)

    assert bank.root == musan
    assert [f.rel for f in bank.of("noise")] == [
        "noise/free-sound/noise-a.wav",
        "noise/free-sound/noise-b.wav",
    ]
    speech = bank.of("speech")
    assert {f.rel: f.speaker for f in speech} == {
        "speech/librivox/anna-1.wav": "anna",
        "speech/librivox/anna-2.wav": "anna",
        "speech/librivox/ben.wav": "ben",
        "speech/librivox/carl.wav": "carl",
    }
    assert {f.source for f in speech} == {"librivox"}
    assert [f.duration_s for f in speech] == [1.5] * 4
    assert [f.category for f in bank.of("music")] == ["music"]


def test_root_may_be_the_folder_that_contains_musan(musan: Path):
    assert read_noise_bank(musan.parent).root == musan
    assert read_noise_bank(musan.parent).files == read_noise_bank(musan).files


def test_load_mixes_to_mono_resamples_to_16k_and_caches(musan: Path):
    write_wav(musan / "noise/field/stereo-8k.wav", 1.0, rate=8000, channels=2)
    bank = read_noise_bank(musan)

    audio = bank.load("noise/field/stereo-8k.wav")

    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(audio.size - RATE) <= 1
    assert bank.load("noise/field/stereo-8k.wav") is audio
    with pytest.raises(ValueError):
        audio[0] = 1.0  # shared through the cache: read-only


def test_excerpt_loops_a_short_file_instead_of_padding_zeros(musan: Path):
    bank = read_noise_bank(musan)
    source = bank.load("noise/free-sound/noise-b.wav")  # 1 s

    excerpt = bank.excerpt("noise/free-sound/noise-b.wav", 0.5, 3 * RATE)

    assert excerpt.size == 3 * RATE
    np.testing.assert_array_equal(excerpt[: RATE // 2], source[RATE // 2 :])
    np.testing.assert_array_equal(excerpt[RATE // 2 : RATE + RATE // 2], source)
    assert np.sqrt(np.mean(excerpt[-RATE // 2 :] ** 2)) > 0.05


def test_unknown_file_names_the_bank(musan: Path):
    bank = read_noise_bank(musan)
    with pytest.raises(NoiseBankError, match="no file 'noise/x/gone.wav'") as err:
        bank.load("noise/x/gone.wav")
    assert str(musan) in str(err.value)


def test_fingerprint_is_stable_and_follows_audio_and_annotations(musan: Path):
    first = read_noise_bank(musan).fingerprint()
    assert read_noise_bank(musan.parent).fingerprint() == first
    assert len(first) == 64

    write_wav(musan / "noise/free-sound/noise-b.wav", 1.0, seed=99)
    changed_audio = read_noise_bank(musan).fingerprint()
    assert changed_audio != first

    annotations = musan / "noise/free-sound/ANNOTATIONS"
    annotations.write_text(annotations.read_text() + "\n")
    assert read_noise_bank(musan).fingerprint() != changed_audio


def test_missing_root_names_path_and_layout(tmp_path: Path):
    with pytest.raises(NoiseBankError, match="does not exist") as err:
        read_noise_bank(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(err.value)
    assert "{noise,speech,music}/<source>/*.wav" in str(err.value)


def test_bank_without_audio_is_an_error(tmp_path: Path):
    (tmp_path / "musan" / "noise" / "free-sound").mkdir(parents=True)
    with pytest.raises(NoiseBankError, match="no .wav files found") as err:
        read_noise_bank(tmp_path)
    assert str(tmp_path / "musan") in str(err.value)


def test_audio_outside_a_source_folder_is_an_error(musan: Path):
    write_wav(musan / "noise" / "loose.wav", 1.0)
    with pytest.raises(NoiseBankError, match="directly in a source folder") as err:
        read_noise_bank(musan)
    assert "loose.wav" in str(err.value)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("ghost m english\n", r"line 1: no file ghost\.wav"),
        ("ben m english\nben m german\n", r"line 2: ben is annotated twice"),
        ("ben speaker=\n", r"line 1: field speaker= must appear once"),
    ],
)
def test_malformed_annotations_name_file_and_line(musan: Path, lines: str, message: str):
    annotations = musan / "speech/librivox/ANNOTATIONS"
    annotations.write_text(lines)
    with pytest.raises(NoiseBankError, match=message) as err:
        read_noise_bank(musan)
    assert str(annotations) in str(err.value)


def test_unreadable_wav_is_named(musan: Path):
    (musan / "noise/free-sound/broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(NoiseBankError, match="broken.wav: not a readable WAV"):
        read_noise_bank(musan)


def test_annotations_that_are_not_utf8_name_the_line(musan: Path):
    annotations = musan / "speech/librivox/ANNOTATIONS"
    annotations.write_bytes(b"anna-1 f english speaker=anna\nben m fran\xe7ais\n")
    with pytest.raises(NoiseBankError, match=r"line 2 \(byte 40\): not valid UTF-8") as err:
        read_noise_bank(musan)
    assert str(annotations) in str(err.value) and "re-save the file as UTF-8" in str(err.value)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_noise_file_with_non_finite_samples_is_named_when_loaded(musan: Path, bad: float):
    samples = np.random.default_rng(0).normal(0, 0.1, 2 * RATE).astype(np.float32)
    samples[RATE] = bad
    sf.write(musan / "noise/free-sound/float.wav", samples, RATE, subtype="FLOAT")
    bank = read_noise_bank(musan)
    with pytest.raises(NoiseBankError, match=r"float\.wav: non-finite samples \(NaN/inf\)"):
        bank.excerpt("noise/free-sound/float.wav", 0.0, RATE)


def test_noise_file_with_an_absurd_header_is_refused_when_the_bank_is_read(musan: Path):
    path = musan / "noise/free-sound/one-hz.wav"
    write_wav(path, 0.5)
    data = bytearray(path.read_bytes())
    data[24:28] = (1).to_bytes(4, "little")  # the fmt chunk's sample rate
    path.write_bytes(bytes(data))
    with pytest.raises(
        NoiseBankError, match=r"one-hz\.wav: the header declares a sample rate of 1 Hz"
    ):
        read_noise_bank(musan)

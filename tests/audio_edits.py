"""What careless editing does to a recording, as functions: each takes the withheld
recording and a public one (16 kHz mono float32) and returns the edited file's bytes
and suffix. Used by tests/test_ownership_robust.py and bench/bench_ownership.py (the
detection table in the README comes from the latter)."""

from __future__ import annotations

import io
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

RATE = 16_000

Edit = Callable[[np.ndarray, np.ndarray], tuple[bytes, str]]


def wav(samples: np.ndarray, rate: int = RATE) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(samples, -1, 1), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def flac(samples: np.ndarray, rate: int = RATE) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(samples, -1, 1), rate, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


def encoded(samples: np.ndarray, fmt: str, subtype: str, rate: int = RATE) -> bytes:
    """`samples` as libsndfile writes `fmt`/`subtype` (MP3, OGG Vorbis or Opus, FLAC)."""
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(samples, -1, 1), rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def ffmpeg(samples: np.ndarray, suffix: str, *codec: str) -> tuple[bytes, str]:
    """`samples` encoded by FFmpeg with `codec` options into a `suffix` file."""
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.wav", Path(tmp) / f"out{suffix}"
        source.write_bytes(wav(samples))
        subprocess.run(
            ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(source), *codec, str(target)],
            check=True,
        )
        return target.read_bytes(), suffix


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))


def at_level(samples: np.ndarray, reference: np.ndarray, db: float) -> np.ndarray:
    """`samples` scaled to `db` relative to the RMS of `reference`."""
    return samples * (rms(reference) / max(rms(samples), 1e-9) * 10 ** (db / 20))


def speed(samples: np.ndarray, ratio: float) -> np.ndarray:
    """Played `ratio` times as fast (pitch follows): what a resample or a mislabelled
    rate does once decoded at 16 kHz."""
    return soxr.resample(samples, RATE * ratio, RATE).astype(np.float32)


def mislabel(samples: np.ndarray, true_rate: int, label: int) -> tuple[bytes, str]:
    """Audio at `true_rate` written with a header saying `label`."""
    return wav(soxr.resample(samples, RATE, true_rate).astype(np.float32), label), ".wav"


COMMON_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
# Every mislabel between two common rates that plays between 1/2.2 and 2.2 times as
# fast (an octave either way, 48 kHz labelled 22.05 kHz): name -> (true rate, label).
MISLABELS: dict[str, tuple[int, int]] = {
    f"{true / 1000:g} kHz labelled {label / 1000:g} kHz": (true, label)
    for true in COMMON_RATES
    for label in COMMON_RATES
    if true != label and 1 / 2.2 <= label / true <= 2.2
}


def noisy(samples: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0, 1, len(samples)).astype(np.float32)
    return samples + at_level(noise, samples, -snr_db)


def reverb(samples: np.ndarray, rt60_s: float = 0.5, seed: int = 1) -> np.ndarray:
    """A synthetic room: direct path plus exponentially decaying noise (RT60 `rt60_s`)."""
    n = int(rt60_s * RATE)
    tail = np.random.default_rng(seed).normal(0, 1, n) * np.exp(-6.9 * np.arange(n) / n)
    impulse = np.r_[1.0, 0.3 * tail / np.sqrt(np.sum(tail**2))]
    wet = np.convolve(samples, impulse)[: len(samples) + n // 2]
    return (wet * rms(samples) / rms(wet)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


def mixed(withheld: np.ndarray, other: np.ndarray, db: float) -> np.ndarray:
    """`withheld` with `other` `db` below it (0: as loud), as long as the longer one."""
    out = np.zeros(max(len(withheld), len(other)), np.float32)
    out[: len(withheld)] += withheld
    out[: len(other)] += at_level(other, withheld, -db)
    return out


def stereo(left: np.ndarray, right: np.ndarray) -> bytes:
    n = max(len(left), len(right))
    frames = np.zeros((n, 2), np.float32)
    frames[: len(left), 0], frames[: len(right), 1] = left, right
    return wav(frames)


def _plain(edit: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Edit:
    return lambda w, p: (flac(edit(w, p)), ".flac")


# The careless edits the ownership check must survive: name -> edit.
IN_SCOPE: dict[str, Edit] = {
    "trim start 0.3 s": _plain(lambda w, p: w[int(0.3 * RATE) :]),
    "trim start 1 s": _plain(lambda w, p: w[RATE:]),
    "trim end 1 s": _plain(lambda w, p: w[:-RATE]),
    "pad start 0.5 s": _plain(lambda w, p: np.r_[silence(0.5), w]),
    "pad start 3 s, end 1 s": _plain(lambda w, p: np.r_[silence(3), w, silence(1)]),
    "embedded at start": _plain(lambda w, p: np.r_[w, p]),
    "embedded in middle": _plain(lambda w, p: np.r_[p, w, p[::-1] * 0.5]),
    "concatenated after a public one": _plain(lambda w, p: np.r_[p, w]),
    "gain -20 dB": _plain(lambda w, p: w * 0.1),
    "gain +6 dB (clipping)": _plain(lambda w, p: w * 2),
    "noise 10 dB SNR": _plain(lambda w, p: noisy(w, 10)),
    "noise 5 dB SNR": _plain(lambda w, p: noisy(w, 5)),
    "MP3": lambda w, p: (encoded(w, "MP3", "MPEG_LAYER_III"), ".mp3"),
    "OGG Vorbis": lambda w, p: (encoded(w, "OGG", "VORBIS"), ".ogg"),
    "OGG Opus": lambda w, p: (encoded(w, "OGG", "OPUS"), ".opus"),
    "M4A/AAC 64 kbit/s": lambda w, p: ffmpeg(w, ".m4a", "-c:a", "aac", "-b:a", "64k"),
    "FLAC 24-bit 48 kHz": lambda w, p: (flac(soxr.resample(w, RATE, 48000), 48000), ".flac"),
    "stereo, voice in one channel": lambda w, p: (stereo(w, p), ".wav"),
    "stereo, other channel silent": lambda w, p: (stereo(silence(0.1), w), ".wav"),
    "mixed with a public voice at 0 dB": _plain(lambda w, p: mixed(w, p, 0)),
    "mixed, public voice 6 dB quieter": _plain(lambda w, p: mixed(w, p, 6)),
    **{name: lambda w, p, rates=rates: mislabel(w, *rates) for name, rates in MISLABELS.items()},
    "speed 0.90": _plain(lambda w, p: speed(w, 0.90)),
    "speed 0.97": _plain(lambda w, p: speed(w, 0.97)),
    "speed 1.04": _plain(lambda w, p: speed(w, 1.04)),
    "speed 1.10": _plain(lambda w, p: speed(w, 1.10)),
    "reverb RT60 0.5 s": _plain(lambda w, p: reverb(w)),
    "MP3 of speed 0.95 + noise 10 dB": lambda w, p: (
        encoded(noisy(speed(w, 0.95), 10), "MP3", "MPEG_LAYER_III"),
        ".mp3",
    ),
}

# How much faster each speed edit plays (what a search over speeds must find).
SPEED_OF: dict[str, float] = {
    **{name: label / true for name, (true, label) in MISLABELS.items()},
    "speed 0.90": 0.90,
    "speed 0.97": 0.97,
    "speed 1.04": 1.04,
    "speed 1.10": 1.10,
    "MP3 of speed 0.95 + noise 10 dB": 0.95,
}

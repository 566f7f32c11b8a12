"""Levels of float audio in full-scale units: RMS, dBFS, gains and SNR.

Sums are taken in float64 so that a level measured on a float32 clip of
minutes is not off by accumulation error.
"""

from __future__ import annotations

import math

import numpy as np

from redvox.schemas import SAMPLE_RATE

from .seeding import Bound

# The absolute RMS level of a clip (ambient, babble): below -80 dBFS it is near silence.
LEVEL_DBFS = Bound(-80.0, 0.0, "dBFS")
# Below this RMS (-180 dBFS) a signal is digital silence: it cannot be scaled to a level.
SILENT_RMS = 1e-9


def num_samples(duration_s: float) -> int:
    return round(duration_s * SAMPLE_RATE)


def rms(samples: np.ndarray) -> float:
    if samples.size == 0:
        return 0.0
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))


def is_silent(samples: np.ndarray) -> bool:
    return rms(samples) < SILENT_RMS


def dbfs(samples: np.ndarray) -> float:
    """RMS level in dB relative to full scale (a full-scale sine is -3.01 dBFS)."""
    level = rms(samples)
    return 20 * math.log10(level) if level > 0 else -math.inf


def db_to_gain(db: float) -> float:
    return 10 ** (db / 20)


def snr_db(speech: np.ndarray, noise: np.ndarray) -> float:
    """20 log10(rms_speech / rms_noise)."""
    return 20 * math.log10(rms(speech) / rms(noise))


def scale_to_dbfs(samples: np.ndarray, level_dbfs: float) -> np.ndarray:
    """The samples (float64) scaled so their RMS is `level_dbfs`."""
    level = rms(samples)
    if level < SILENT_RMS:
        raise ValueError("digital silence cannot be scaled to a level")
    return samples.astype(np.float64) * (db_to_gain(level_dbfs) / level)


def clip_to_full_scale(samples: np.ndarray) -> np.ndarray:
    """float32 within [-1, 1]; clipping only touches peaks above full scale, if any."""
    return np.clip(samples, -1.0, 1.0).astype(np.float32)

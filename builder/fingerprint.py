"""The landmark fingerprint of a recording (Wang's peak pairs, the Shazam method): its
spectral peaks, and the hashes of the pairs they make. Pure signal processing, read by
the decode step (builder/recordings.py, which fingerprints the released samples) and
by the ownership lookup (builder/ownership.py, which compares them).

A landmark pairs a peak with one of the FAN peaks that follow it, hashed from its
frequency, the pair's frequency difference and its time delta. How the parameters
were chosen (docs/ARCHITECTURE.md, "Data flow"): on the demo corpus, every demo
recording filed under another participant after each careless edit of
tests/audio_edits.py (`bench/bench_ownership.py` prints the table). The sparse peaks
(one per 160 ms x 500 Hz neighbourhood, within 15 dB of the loudest peak nearby)
survive 5 dB of white noise, codecs and a second voice. A hop of 8 ms, with each
peak's position refined between frames, keeps them in place under any trim, a whole
number of frames or not: a 16 ms hop missed 2 of 11 recordings trimmed by half a frame
(1 s); a 10 ms hop let distinct recordings match; a 4 ms hop caught no more and cost
2 to 2.5 times as much.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass

import numpy as np
import scipy.fft
from scipy.ndimage import maximum_filter1d

N_FFT = 512  # 32 ms at 16 kHz, bins of 31.25 Hz
HOP = 128  # 8 ms; a peak's time is refined between frames (SUB)
LOW_BIN, HIGH_BIN = 6, 128  # 190 Hz - 4 kHz, where speech outlasts added noise
PEAK_T, PEAK_F = 10, 8  # a peak is the loudest of +-80 ms x +-250 Hz around it
RANGE_DB = 15.0  # ... and within this of the loudest peak of those 160 ms
# Relative to a sine at the recording's own peak level: digital silence has no peaks,
# and a recording exported 70 dB too quiet keeps the peaks of its loud copy.
FLOOR_DB = -90.0
BLOCK = 4096  # frames of the spectrogram held at once (33 s): memory stays flat
SUB = 8  # peaks are stored in 1/8 of a frame and of a bin (parabolic refinement)
FAN = 10  # each peak is paired with the next FAN peaks ...
DT_MAX = 50  # ... at most 400 ms later (frames; the hash holds 7 bits of it)
DF_MAX = 63  # ... and at most 63 bins higher or lower
# A rate mislabel by about an octave (16 kHz audio labelled 8 kHz or 32 kHz, 24 kHz
# labelled 48 kHz) or by 3:2 (32 kHz labelled 48 kHz) moves the peaks themselves, not
# only their places: what is loudest within 80 ms x 500 Hz of the copy is not what was
# loudest within those of the original, and what was above or below the analysed band
# comes into it. Rescaling the plain peaks misses such copies (4-6 of 11), so each
# recording is also fingerprinted as it reads played this much faster, from its own
# samples (a window of N_FFT * speed samples, a hop of HOP * speed: frame for frame and
# bin for bin the spectrogram of the sped-up copy, with no resampled copy held). The
# slower direction needs no fingerprint of its own: the copy played slower by 2 is
# itself fingerprinted played faster by 2, which is the original again.
FASTER = (2.0, 1.5)
# Bumped when the fingerprint changes, so cached fingerprints are recomputed.
# v2: the fingerprints played FASTER follow the plain one. v3: a hop of 8 ms, not 4.
# v4: the floor is relative to the recording's peak, not to full scale.
FINGERPRINT_FORMAT = "landmarks-v4"


@dataclass(frozen=True)
class Fingerprint:
    """The spectral peaks of a recording, in 1/SUB of a frame and of a bin; `faster`:
    the (times, bins) of its peaks played each speed of FASTER times as fast, in frames
    and bins of that copy."""

    times: np.ndarray  # int64
    bins: np.ndarray  # int64
    faster: tuple[tuple[np.ndarray, np.ndarray], ...]

    def __post_init__(self) -> None:
        if len(self.faster) != len(FASTER):  # every lookup of FASTER needs its peaks
            raise ValueError(f"{len(self.faster)} sets of peaks played faster, not {len(FASTER)}")

    def to_text(self) -> str:
        """Compact text for the cache: the number of peak sets, the number of peaks of
        each (4 bytes each), then set by set (the plain one first) the times (4 bytes
        each) and the bins (2)."""
        sets = [(self.times, self.bins), *self.faster]
        data = np.array([len(sets), *(len(t) for t, _ in sets)], "<i4").tobytes()
        for times, bins in sets:
            data += times.astype("<i4").tobytes() + bins.astype("<i2").tobytes()
        return base64.b64encode(data).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> Fingerprint:
        data = base64.b64decode(text)
        sets = int(np.frombuffer(data[:4], "<i4")[0]) if len(data) >= 4 else 0
        counts = np.frombuffer(data[4 : 4 * (1 + sets)], "<i4").tolist() if sets > 0 else []
        at = 4 * (1 + len(counts))
        if (
            sets != 1 + len(FASTER)
            or len(counts) != sets
            or min(counts) < 0
            or 6 * sum(counts) != len(data) - at
        ):
            raise ValueError(
                f"{len(data)} bytes that are not a fingerprint ({FINGERPRINT_FORMAT}: the plain "
                f"peaks and {len(FASTER)} sets played faster)"
            )
        found = []
        for count in counts:
            times = np.frombuffer(data[at : at + 4 * count], "<i4").astype(np.int64)
            at += 4 * count
            found.append((times, np.frombuffer(data[at : at + 2 * count], "<i2").astype(np.int64)))
            at += 2 * count
        return cls(*found[0], tuple(found[1:]))


def _power(samples: np.ndarray, first: int, count: int, speed: float) -> np.ndarray:
    """Power, relative to a full-scale sine's, of frames first..first+count, bins <
    HIGH_BIN + 1, of the samples played `speed` times as fast (a window and a hop `speed`
    times as long: N_FFT * speed and HOP * speed are whole numbers for every speed of
    FASTER)."""
    size, hop = round(N_FFT * speed), round(HOP * speed)
    segment = samples[first * hop : (first + count - 1) * hop + size]
    step = segment.strides[0]
    frames = np.lib.stride_tricks.as_strided(segment, (count, size), (step * hop, step))
    # In single precision (scipy's FFT keeps it: 3-5 times numpy's double-precision one).
    spectrum = scipy.fft.rfft(frames * _window(size), axis=1)[:, : HIGH_BIN + 1]
    power = np.abs(spectrum)
    np.square(power, out=power)
    power *= np.float32(1 / (size / 4) ** 2)  # over the power of a full-scale sine's bin
    return power


@functools.cache
def _window(size: int) -> np.ndarray:
    return np.hanning(size).astype(np.float32)


def _window_max(level: np.ndarray, half: int, axis: int) -> np.ndarray:
    """The maximum of every value's neighbourhood of +-`half` along `axis` (nothing
    beyond the edges), as the maximum of two overlapping windows whose width is a power
    of two, each built by doubling: a few passes over the block, not one per value."""
    size = 2 * half + 1
    shape = list(level.shape)
    shape[axis] = half
    edge = np.full(shape, -np.inf, level.dtype)
    table = np.concatenate([edge, level, edge], axis=axis)

    def part(first: int, count: int) -> np.ndarray:
        return table[(slice(None),) * axis + (slice(first, first + count),)]

    width = 1
    while 2 * width <= size:
        count = table.shape[axis] - width
        table = np.maximum(part(0, count), part(width, count))
        width *= 2
    n = level.shape[axis]
    return np.maximum(part(0, n), part(size - width, n))


def _refined(centre: np.ndarray, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Sub-step position of a peak from its neighbours (parabola through three levels)."""
    curve = before - 2 * centre + after
    with np.errstate(invalid="ignore", divide="ignore"):
        shift = np.where(curve < 0, 0.5 * (before - after) / curve, 0.0)
    return np.clip(shift, -0.5, 0.5)


def fingerprint(samples: np.ndarray) -> Fingerprint:
    """The peaks of mono 16 kHz float samples, and those of the samples played each
    speed of FASTER times as fast."""
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    floor = peak_floor(samples)
    plain = _peaks(samples, 1.0, floor)
    return Fingerprint(*plain, tuple(_peaks(samples, s, floor) for s in FASTER))


def peak_floor(samples: np.ndarray) -> np.float32:
    """The power below which a bin holds no peak: FLOOR_DB under a sine at the samples'
    peak level (found without a copy of a long recording)."""
    peak = float(max(samples.max(), -samples.min())) if len(samples) else 0.0
    return np.float32(10 ** (FLOOR_DB / 10) * peak**2)


def _peaks(samples: np.ndarray, speed: float, floor: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """(times, bins) of the peaks of the samples played `speed` times as fast, computed
    about BLOCK frames of the plain spectrogram at a time (with the neighbourhood of a
    peak as margin), so a 1-hour file costs a few MB beyond its samples. Peaks are found
    on the power (the maximum of a neighbourhood is the same in dB); only the levels
    around each peak are taken in dB, for its refined position."""
    size, hop = round(N_FFT * speed), round(HOP * speed)
    count = 1 + (len(samples) - size) // hop if len(samples) >= size else 0
    block = max(1, round(BLOCK / speed))
    within = np.float32(10 ** (-RANGE_DB / 10))
    times, bins = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for start in range(0, count, block):
        lo, hi = max(0, start - PEAK_T - 1), min(count, start + block + PEAK_T + 1)
        power = _power(samples, lo, hi - lo, speed)
        loudest = _window_max(_window_max(power, PEAK_T, 0), PEAK_F, 1)
        band = power[:, LOW_BIN:HIGH_BIN]
        t, f = np.nonzero((band == loudest[:, LOW_BIN:HIGH_BIN]) & (band > floor))
        f += LOW_BIN
        keep = (t >= start - lo) & (t < min(count, start + block) - lo)
        nearby = maximum_filter1d(band.max(axis=1), 2 * PEAK_T + 1, mode="nearest")
        keep &= power[t, f] > nearby[t] * within
        t, f = t[keep], f[keep]
        level = _decibels(power, t, f)
        df = _refined(level[0], level[1], level[2])
        dt = _refined(level[0], level[3], level[4])
        times.append(np.round((t + lo + dt) * SUB).astype(np.int64))
        bins.append(np.round((f + df) * SUB).astype(np.int64))
    return np.concatenate(times), np.concatenate(bins)


def _decibels(power: np.ndarray, t: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Levels in dB of the peaks at (t, f), of the bins below and above them, and of the
    frames before and after them (an edge's own level where there is none)."""
    before, after = np.maximum(t - 1, 0), np.minimum(t + 1, len(power) - 1)
    values = np.stack(
        [power[t, f], power[t, f - 1], power[t, f + 1], power[before, f], power[after, f]]
    )
    return 10 * np.log10(values + np.float32(1e-12))


HASH_BITS = 22  # a landmark's hash: 8 bits of frequency, 7 of its difference, 7 of delta


def landmarks(
    times: np.ndarray, bins: np.ndarray, groups: np.ndarray, ratio: float | np.ndarray = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hash, group, anchor time in frames) of the landmarks of peaks given in frames and
    bins, ordered by group (a recording), then time, then frequency; a peak pairs only
    with peaks of its own group. The peaks are first rescaled as if played `ratio`
    times slower (f / ratio, t * ratio; one ratio, or one per peak)."""
    t, f = times * ratio, np.round(bins / ratio).astype(np.int64)
    usable = (f >= 0) & (f < 256)
    hashes, owners, anchors = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
    n = len(t)
    for k in range(1, min(FAN, n - 1) + 1):
        a, b = slice(0, n - k), slice(k, n)
        dt = np.round(t[b] - t[a]).astype(np.int64)
        df = f[b] - f[a]
        keep = (groups[a] == groups[b]) & (dt >= 1) & (dt <= DT_MAX)
        keep &= (np.abs(df) <= DF_MAX) & usable[a] & usable[b]
        hashes.append(((f[a] << 14) | ((df + 64) << 7) | dt)[keep])
        owners.append(groups[a][keep])
        anchors.append(t[a][keep])
    return np.concatenate(hashes), np.concatenate(owners), np.concatenate(anchors)

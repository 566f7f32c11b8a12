"""Every released recording belongs to one participant: audio that contains another
participant's recording (or one whose consent cannot be established) is excluded
everywhere it is used, and the noise bank holds no participant's voice.

File identity (a path, a symlink or a hard link to one file) is checked by the
contributions reader. This step checks content with a landmark fingerprint (Wang's
peak pairs, the Shazam method): the spectral peaks of a recording, paired with the
peaks that follow them, each pair hashed from its two frequencies and its time
delta. A copy shares those hashes at one time offset whatever was trimmed, padded,
added before or after it or mixed into it, so *containment* is found, not only
equality. A speed change (a resample, or a file whose header states the wrong
sample rate) scales every frequency by r and every delta by 1/r: the peaks of each
recording are rescaled by every ratio of RATIOS and hashed again, so a copy played
up to 10% faster or slower, or mislabelled between the common sample rates, still
shares its hashes at one (ratio, offset).

How the parameters were chosen (docs/ARCHITECTURE.md, "Data flow"): on the demo
corpus, every demo recording filed under another participant after each careless
edit of tests/audio_edits.py (`bench/bench_ownership.py` prints the table). The
sparse peaks (one per 80 ms x 500 Hz neighbourhood, within 15 dB of the loudest
peak nearby) survive 5 dB of white noise, codecs and a second voice; the hop of
4 ms keeps them in place under any trim (a 16 ms hop lost half of them).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path
from types import NoneType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from scipy.ndimage import maximum_filter

from redvox.schemas.config import AudioLimits, InputConfig
from redvox.schemas.errors import UserError
from redvox.schemas.fields import checked
from redvox.schemas.layout import sha256_file
from redvox.sources.audio import DEFAULT_LIMITS, AudioDecodeError, decode_audio
from redvox.sources.musan import NoiseBank

from .cache import BuildCache, digest_of
from .join import Recording, recording_quarantine
from .manifest import SHARED_AUDIO

if TYPE_CHECKING:
    from .recordings import SpeechOutcome

N_FFT = 512  # 32 ms at 16 kHz, bins of 31.25 Hz
HOP = 64  # 4 ms: a peak stays in its frame whatever was trimmed before it
LOW_BIN, HIGH_BIN = 6, 128  # 190 Hz - 4 kHz, where speech outlasts added noise
PEAK_T, PEAK_F = 20, 8  # a peak is the loudest of +-80 ms x +-250 Hz around it
RANGE_DB = 15.0  # ... and within this of the loudest peak of those 160 ms
FLOOR_DB = -90.0  # relative to a full-scale sine: digital silence has no peaks
BLOCK = 4096  # frames of the spectrogram held at once (16 s): memory stays flat
SUB = 8  # peaks are stored in 1/8 of a frame and of a bin (parabolic refinement)
FAN = 10  # each peak is paired with the next FAN peaks ...
DT_MAX = 100  # ... at most 400 ms later (frames; the hash holds 7 bits of it)
DF_MAX = 63  # ... and at most 63 bins higher or lower
# A hash held by more landmarks than this at once says nothing (speech-like commonplace).
COMMON = 64
# Two recordings hold the same audio when, at one (ratio, offset within a frame),
# at least MIN_HITS landmarks agree and these are at least MIN_SHARE of the landmarks
# of the shorter one. Measured (bench/bench_ownership.py): distinct demo recordings of
# different participants agree on at most 5 landmarks (1.7%); the hardest edit in
# scope (5 dB SNR white noise, or MP3 of a 0.95 speed change with 10 dB noise) keeps
# at least 18 (6%).
MIN_HITS = 12
MIN_SHARE = 0.04
# Landmarks one pass of the lookup sorts: about 40 bytes each while it runs.
LANDMARKS_PER_PASS = 1 << 22
COMMON_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)


def _ratios() -> tuple[float, ...]:
    """1, then 20 speeds log-spaced between 0.9 and 1/0.9 (1% apart: a peak at 4 kHz
    moves half a bin at most between two of them), then every ratio of two common
    sample rates outside that span, between 1/2.2 and 2.2 (a 16 kHz file labelled
    8 kHz plays at half speed; beyond that too little of the voice stays below 4 kHz)."""
    grid = np.exp(np.linspace(np.log(0.9), -np.log(0.9), 21))
    speeds = [1.0, *(float(r) for r in grid if abs(r - 1) > 1e-9)]
    labels = {a / b for a in COMMON_RATES for b in COMMON_RATES}
    speeds += sorted(r for r in labels if 1 / 2.2 <= r <= 2.2 and abs(math.log(r)) > -math.log(0.9))
    return tuple(round(r, 6) for r in speeds)


RATIOS = _ratios()
# Bumped when the fingerprint changes, so cached fingerprints are recomputed.
FINGERPRINT_FORMAT = "landmarks-v1"


class NoiseBankVoiceError(UserError, ValueError):
    """A noise-bank file holds a contribution's audio: the bank must hold no one's voice."""


@dataclass(frozen=True)
class Fingerprint:
    """The spectral peaks of a recording, in 1/SUB of a frame and of a bin."""

    times: np.ndarray  # int64
    bins: np.ndarray  # int64

    def to_text(self) -> str:
        """Compact text for the cache: the times (4 bytes each), then the bins (2 bytes)."""
        data = self.times.astype("<i4").tobytes() + self.bins.astype("<i2").tobytes()
        return base64.b64encode(data).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> Fingerprint:
        data = base64.b64decode(text)
        count = len(data) // 6
        times = np.frombuffer(data[: 4 * count], "<i4").astype(np.int64)
        return cls(times, np.frombuffer(data[4 * count :], "<i2").astype(np.int64))


_WINDOW = np.hanning(N_FFT).astype(np.float32)
_FULL_SCALE = (N_FFT / 4) ** 2  # power of a full-scale sine's bin under the window


def _spectrogram(samples: np.ndarray, first: int, count: int) -> np.ndarray:
    """Level (dB re a full-scale sine) of frames first..first+count, bins < HIGH_BIN + 1."""
    segment = samples[first * HOP : (first + count - 1) * HOP + N_FFT]
    step = segment.strides[0]
    frames = np.lib.stride_tricks.as_strided(segment, (count, N_FFT), (step * HOP, step))
    power = np.abs(np.fft.rfft(frames * _WINDOW, axis=1)[:, : HIGH_BIN + 1]) ** 2
    return (10 * np.log10(power / _FULL_SCALE + 1e-12)).astype(np.float32)


def _refined(centre: np.ndarray, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Sub-step position of a peak from its neighbours (parabola through three levels)."""
    curve = before - 2 * centre + after
    with np.errstate(invalid="ignore", divide="ignore"):
        shift = np.where(curve < 0, 0.5 * (before - after) / curve, 0.0)
    return np.clip(shift, -0.5, 0.5)


def fingerprint(samples: np.ndarray) -> Fingerprint:
    """The peaks of mono 16 kHz float samples, computed BLOCK frames at a time (with the
    neighbourhood of a peak as margin), so a 1-hour file costs a few MB beyond its samples."""
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    count = 1 + (len(samples) - N_FFT) // HOP if len(samples) >= N_FFT else 0
    times, bins = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for start in range(0, count, BLOCK):
        lo, hi = max(0, start - PEAK_T - 1), min(count, start + BLOCK + PEAK_T + 1)
        level = _spectrogram(samples, lo, hi - lo)
        loudest = maximum_filter(
            level, (2 * PEAK_T + 1, 2 * PEAK_F + 1), mode="constant", cval=-np.inf
        )
        nearby = maximum_filter(
            level[:, LOW_BIN:HIGH_BIN].max(axis=1), 2 * PEAK_T + 1, mode="nearest"
        )
        peak = (level == loudest) & (level > FLOOR_DB) & (level > (nearby - RANGE_DB)[:, None])
        peak[:, :LOW_BIN] = peak[:, HIGH_BIN:] = False
        peak[: start - lo] = peak[min(count, start + BLOCK) - lo :] = False
        t, f = np.nonzero(peak)
        centre = level[t, f]
        df = _refined(centre, level[t, f - 1], level[t, f + 1])
        dt = _refined(
            centre, level[np.maximum(t - 1, 0), f], level[np.minimum(t + 1, len(level) - 1), f]
        )
        times.append(np.round((t + lo + dt) * SUB).astype(np.int64))
        bins.append(np.round((f + df) * SUB).astype(np.int64))
    return Fingerprint(np.concatenate(times), np.concatenate(bins))


# --- the lookup ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Peaks:
    """Every peak of the collection, ordered by recording, time, then frequency."""

    times: np.ndarray  # frames (float)
    bins: np.ndarray  # bins (float)
    owner: np.ndarray  # recording index

    @classmethod
    def of(cls, fingerprints: Sequence[Fingerprint | str | None]) -> _Peaks:
        times, bins, owner = [], [], []
        for i, item in enumerate(fingerprints):
            fp = Fingerprint.from_text(item) if isinstance(item, str) else item
            if fp is None:
                continue
            times.append(fp.times / SUB)
            bins.append(fp.bins / SUB)
            owner.append(np.full(len(fp.times), i, np.int64))
        if not times:
            return cls(np.zeros(0), np.zeros(0), np.zeros(0, np.int64))
        t, f, o = np.concatenate(times), np.concatenate(bins), np.concatenate(owner)
        order = np.lexsort((f, t, o))
        return cls(t[order], f[order], o[order])

    def landmarks(self, ratio: float, lo: int, hi: int) -> tuple[np.ndarray, ...]:
        """(hash, recording, anchor time) of the landmarks whose hash is in [lo, hi), the
        peaks first rescaled as if played `ratio` times slower (f / ratio, t * ratio)."""
        t, f = self.times * ratio, np.round(self.bins / ratio).astype(np.int64)
        usable = (f >= 0) & (f < 256)
        hashes, owners, anchors = [], [], []
        n = len(t)
        for k in range(1, min(FAN, n - 1) + 1):
            a, b = slice(0, n - k), slice(k, n)
            dt = np.round(t[b] - t[a]).astype(np.int64)
            df = f[b] - f[a]
            code = (f[a] << 14) | ((df + 64) << 7) | dt
            keep = (self.owner[a] == self.owner[b]) & (dt >= 1) & (dt <= DT_MAX)
            keep &= (np.abs(df) <= DF_MAX) & usable[a] & usable[b] & (code >= lo) & (code < hi)
            hashes.append(code[keep])
            owners.append(self.owner[a][keep])
            anchors.append(t[a][keep])
        if not hashes:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        return np.concatenate(hashes), np.concatenate(owners), np.concatenate(anchors)


_HASH_BITS = 22
_OFFSET_BITS = 25  # (ratio, offset) in one int64: offsets of up to 18 h either way


@dataclass(frozen=True)
class Score:
    """How two recordings agree at their best (ratio, offset)."""

    hits: int  # landmarks that agree there (offsets within a frame summed)
    share: float  # hits over the landmarks of the shorter recording
    ratio: float  # one is the other played this much faster or slower

    @property
    def same_audio(self) -> bool:
        return self.hits >= MIN_HITS and self.share >= MIN_SHARE


def pair_scores(
    fingerprints: Sequence[Fingerprint | str | None], owners: Sequence[str]
) -> dict[tuple[int, int], Score]:
    """The best agreement of every pair (i, j), i < j, of recordings of different owners
    that share any landmark (a fingerprint may be given as text: `Fingerprint.to_text`).

    The landmarks are joined by hash in passes, each over one range of hash values of at
    most about LANDMARKS_PER_PASS landmarks, so the lookup's memory is bounded however
    many recordings there are; each pass joins the rescaled landmarks of every ratio
    with the plain ones. What is kept between passes is one count per (pair, ratio,
    offset) that shares a landmark."""
    peaks = _Peaks.of(fingerprints)
    owner_ids = {name: n for n, name in enumerate(sorted(set(owners)))}
    owner_of = np.array([owner_ids[o] for o in owners], np.int64)
    range_bits = max(0, math.ceil(math.log2(max(1, len(peaks.times) * FAN) / LANDMARKS_PER_PASS)))
    span = 1 << (_HASH_BITS - min(range_bits, _HASH_BITS))
    totals = np.zeros(len(fingerprints), np.int64)
    pairs, offsets, counts = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    for lo in range(0, 1 << _HASH_BITS, span):
        found = _join_pass(peaks, owner_of, lo, lo + span, totals)
        pairs, offsets, counts = _merged((pairs, offsets, counts), found)
    return _best(pairs, offsets, counts, totals, len(fingerprints))


def _join_pass(
    peaks: _Peaks, owner_of: np.ndarray, lo: int, hi: int, totals: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(pair, ratio-and-offset code) of every landmark with a hash in [lo, hi) that two
    recordings of different owners share; adds the plain landmarks to `totals`.

    The plain landmarks are sorted by (hash, owner), so the landmarks of a query's own
    owner (one speaker's takes share most of theirs) are skipped as one range, never
    paired one by one."""
    hashes, recs, anchors = peaks.landmarks(1.0, lo, hi)
    totals += np.bincount(recs, minlength=len(totals))
    owners = int(owner_of.max()) + 1 if len(owner_of) else 1
    keys = hashes * owners + owner_of[recs]
    order = np.argsort(keys, kind="stable")
    keys, recs, anchors = keys[order], recs[order], anchors[order]
    # Where each hash's landmarks start: one table lookup per query, not a search.
    bounds = np.r_[0, np.cumsum(np.bincount(hashes - lo, minlength=hi - lo))]
    pairs, codes = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for n, ratio in enumerate(RATIOS):
        q_hash, q_rec, q_anchor = peaks.landmarks(ratio, lo, hi)
        group = bounds[q_hash - lo], bounds[q_hash - lo + 1]
        wanted = (group[1] > group[0]) & (group[1] - group[0] <= COMMON)
        q_hash, q_rec, q_anchor = q_hash[wanted], q_rec[wanted], q_anchor[wanted]
        group = group[0][wanted], group[1][wanted]
        own_key = q_hash * owners + owner_of[q_rec]
        own = np.searchsorted(keys, own_key), np.searchsorted(keys, own_key + 1)
        ratio_pairs, ratio_codes = [], []
        for first, last in ((group[0], own[0]), (own[1], group[1])):
            size = last - first
            query = np.repeat(np.arange(len(q_rec)), size)
            held = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
            held += np.repeat(first, size)
            a, b = q_rec[query], recs[held]
            if ratio == 1.0:  # unscaled, i found in j is j found in i: counted once
                a, b, query, held = a[a < b], b[a < b], query[a < b], held[a < b]
            offset = np.round(anchors[held] - q_anchor[query]).astype(np.int64)
            # The offset's sign follows the pair's order, so both directions of a copy agree.
            offset = np.where(a < b, offset, -offset)
            ratio_pairs.append(np.minimum(a, b) * len(totals) + np.maximum(a, b))
            ratio_codes.append((n << _OFFSET_BITS) + offset + (1 << (_OFFSET_BITS - 1)))
        kept = _repeated(np.concatenate(ratio_pairs), np.concatenate(ratio_codes))
        pairs.append(kept[0])
        codes.append(kept[1])
    return np.concatenate(pairs), np.concatenate(codes)


def _repeated(pairs: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (pair, code) entries of one ratio whose key, or a neighbouring offset, is seen
    at least twice: a landmark shared once at an offset is chance (a copy shares MIN_HITS
    at one), and most shared landmarks are that."""
    order = np.lexsort((codes, pairs))
    pairs, codes = pairs[order], codes[order]
    if not len(pairs):
        return pairs, codes
    starts = np.flatnonzero(np.r_[True, (pairs[1:] != pairs[:-1]) | (codes[1:] != codes[:-1])])
    counts = np.diff(np.r_[starts, len(pairs)])
    near = counts.copy()
    beside = (pairs[starts][1:] == pairs[starts][:-1]) & (
        codes[starts][1:] == codes[starts][:-1] + 1
    )
    near[:-1] += np.where(beside, counts[1:], 0)
    near[1:] += np.where(beside, counts[:-1], 0)
    wanted = np.repeat(near >= 2, counts)
    return pairs[wanted], codes[wanted]


def _merged(
    kept: tuple[np.ndarray, np.ndarray, np.ndarray], found: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (pair, code, count) runs of `kept` and of the codes `found`, summed per key."""
    pairs = np.concatenate([kept[0], found[0]])
    codes = np.concatenate([kept[1], found[1]])
    counts = np.concatenate([kept[2], np.ones(len(found[0]), np.int64)])
    if not len(pairs):
        return pairs, codes, counts
    order = np.lexsort((codes, pairs))
    pairs, codes, counts = pairs[order], codes[order], counts[order]
    new = np.r_[True, (pairs[1:] != pairs[:-1]) | (codes[1:] != codes[:-1])]
    starts = np.flatnonzero(new)
    return pairs[starts], codes[starts], np.add.reduceat(counts, starts)


def _best(
    pairs: np.ndarray, codes: np.ndarray, counts: np.ndarray, totals: np.ndarray, count: int
) -> dict[tuple[int, int], Score]:
    """Per pair, the (ratio, offset) with most hits, counting the offsets one frame
    either side with it (a codec or a resample moves a copy by part of a frame)."""
    hits = counts.copy()
    same_next = (pairs[1:] == pairs[:-1]) & (codes[1:] == codes[:-1] + 1)
    hits[:-1] += np.where(same_next, counts[1:], 0)
    hits[1:] += np.where(same_next, counts[:-1], 0)
    order = np.lexsort((codes, -hits, pairs))  # per pair: most hits, then the lowest code
    first = order[np.r_[True, pairs[order][1:] != pairs[order][:-1]]] if len(order) else order
    first = first[hits[first] >= MIN_HITS // 4]  # a pair sharing two or fewer says nothing
    scores = {}
    for k in first.tolist():
        i, j = divmod(int(pairs[k]), count)
        shorter = max(1, int(min(totals[i], totals[j])))
        ratio = RATIOS[int(codes[k]) >> _OFFSET_BITS]
        scores[(i, j)] = Score(int(hits[k]), int(hits[k]) / shorter, ratio)
    return scores


def matching_pairs(fingerprints: Sequence[Fingerprint | str | None], owners: Sequence[str]) -> set:
    """Pairs (i, j), i < j, of recordings of different owners where one contains the
    other's audio (equal, part of it, or mixed with it), at any speed of RATIOS."""
    return {pair for pair, score in pair_scores(fingerprints, owners).items() if score.same_audio}


# --- the build step ------------------------------------------------------------------


@dataclass(frozen=True)
class OtherAudio:
    """An audio file the build reads that no set admits: a contributions row that did
    not join or is not admitted (`owner` its participant key cell as written, None when
    empty), or a noise-bank file."""

    where: str  # for messages: "contributions.csv line 67", or the bank file's path
    path: Path
    sha256: str
    owner: str | None = None


NOISE_BANK_OWNER = "\x00noise bank"  # no participant key is this: bank files never pair


def contribution_audio(
    config: InputConfig, rows: dict[int, dict[str, str | None]], skip: Set[int | None] = frozenset()
) -> list[OtherAudio]:
    """The audio file of every contributions line not in `skip`, whatever else is wrong
    with the line, when its audio_file names a file inside the audio folder (a path that
    leads elsewhere is the reader's problem, and nothing is read from it)."""
    root = Path(config.audio_root).resolve()
    found = []
    for line, cells in sorted(rows.items()):
        name = (cells.get("audio_file") or "").strip()
        if line in skip or not name:
            continue
        path = (root / name).resolve()
        if path.is_relative_to(root) and path.is_file():
            owner = (cells.get("participant_key") or "").strip() or None
            where = f"{config.contributions} line {line} ({name})"
            found.append(OtherAudio(where, path, sha256_file(path), owner))
    return found


def bank_audio(bank: NoiseBank) -> list[OtherAudio]:
    """Every file of the noise bank, each as the audio the check reads."""
    return [
        OtherAudio(str(bank.path(f.rel)), bank.path(f.rel), sha256_file(bank.path(f.rel)))
        for f in bank.files
    ]


def exclude_shared_audio(
    admitted: Sequence[Recording],
    outcomes: Sequence[SpeechOutcome],
    others: Sequence[OtherAudio],
    cache: BuildCache,
    limits: AudioLimits = DEFAULT_LIMITS,
    *,
    bank: Sequence[OtherAudio] = (),
    bank_loader: Callable[[Path], np.ndarray] | None = None,
) -> list[SpeechOutcome]:
    """`outcomes` of the admitted recordings, with every recording whose audio contains,
    or is contained in, audio filed under another participant refused, naming the other
    rows. `others` (every other contributions row, joined or not: consent that cannot be
    established is no consent) are fingerprinted too, behind the cache; so is every
    noise-bank file of `bank` (decoded by `bank_loader`, as the clips use it), and a
    bank file that matches any contribution stops the build (NoiseBankVoiceError).

    The outcomes come back without their fingerprints: this is their only reader."""
    prints: list[Fingerprint | str | None] = [o.fingerprint or None for o in outcomes]
    prints += [_file_fingerprint(o.path, o.sha256, cache, limits) for o in others]
    prints += [_bank_fingerprint(o, cache, bank_loader) for o in bank]
    where = [f"{r.file} line {r.line} ({r.contribution.audio_file})" for r in admitted] + [
        o.where for o in [*others, *bank]
    ]
    owners = [r.participant_key for r in admitted]
    owners += [o.owner if o.owner else f"\x00{o.where}" for o in others]
    owners += [NOISE_BANK_OWNER] * len(bank)
    pairs = matching_pairs(prints, owners)
    _refuse_bank_voices(pairs, len(admitted) + len(others), where)
    partners: dict[int, list[int]] = {}
    for i, j in sorted(pairs):
        partners.setdefault(i, []).append(j)
        partners.setdefault(j, []).append(i)
    result = [replace(outcome, fingerprint=None) for outcome in outcomes]
    for i, found in partners.items():
        if i >= len(admitted):
            continue
        named = ", ".join(where[j] for j in sorted(found))
        reason = (
            f"{SHARED_AUDIO}: holds the same voice as {named} (one contains the other, or "
            "they are mixed), filed under another participant or under a row whose consent "
            "cannot be established; a recording belongs to one participant, fix the "
            "audio_file of the wrong rows"
        )
        result[i] = replace(
            result[i],
            audio=None,
            quarantine=recording_quarantine(admitted[i], "ownership", reason, SHARED_AUDIO),
        )
    return result


def _refuse_bank_voices(pairs: set, contributions: int, where: Sequence[str]) -> None:
    found = sorted((j, i) for i, j in pairs if i < contributions <= j)
    if found:
        bank_file, row = found[0]
        more = f" (and {len(found) - 1} more such pairs)" if len(found) > 1 else ""
        raise NoiseBankVoiceError(
            f"{where[bank_file]}: this noise-bank file holds the voice of the contribution "
            f"on {where[row]}{more}; the bank must hold no participant's voice: remove the "
            "file from the noise bank"
        )


def check_noise_bank(
    contributions: Sequence[OtherAudio],
    bank: Sequence[OtherAudio],
    bank_loader: Callable[[Path], np.ndarray],
    cache: BuildCache,
    limits: AudioLimits = DEFAULT_LIMITS,
) -> None:
    """NoiseBankVoiceError when a file of `bank` holds the audio of any of `contributions`
    (for `variants add`, which mixes bank files into new clips)."""
    prints = [_file_fingerprint(o.path, o.sha256, cache, limits) for o in contributions]
    prints += [_bank_fingerprint(o, cache, bank_loader) for o in bank]
    # Contributions never pair with each other here: only the bank is checked.
    owners = [NOISE_BANK_OWNER + "contribution"] * len(contributions)
    owners += [NOISE_BANK_OWNER] * len(bank)
    where = [o.where for o in [*contributions, *bank]]
    _refuse_bank_voices(matching_pairs(prints, owners), len(contributions), where)


@dataclass(frozen=True)
class FingerprintFact:
    """The fingerprint of a file no set admits (or of a noise-bank file), as the
    `fingerprint` cache stores it (`to_dict`): `Fingerprint.to_text`, or None when its
    audio does not decode."""

    KIND: ClassVar[str] = "fingerprint"

    fingerprint: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FingerprintFact:
        return cls(checked(d, "fingerprint", (str, NoneType)))


def _cached_fingerprint(
    key: str, cache: BuildCache, compute: Callable[[], str | None]
) -> str | None:
    fact = cache.get(FingerprintFact, key)
    if fact is None:
        fact = FingerprintFact(compute())
        cache.put(key, fact)
    return fact.fingerprint


def _file_fingerprint(
    path: Path, file_sha: str, cache: BuildCache, limits: AudioLimits
) -> str | None:
    def compute() -> str | None:
        try:
            return fingerprint(decode_audio(path, limits=limits).samples).to_text()
        except AudioDecodeError:
            return None  # unusable audio is released nowhere

    return _cached_fingerprint(
        digest_of(FINGERPRINT_FORMAT, file_sha, limits.model_dump_json()), cache, compute
    )


def _bank_fingerprint(
    file: OtherAudio, cache: BuildCache, loader: Callable[[Path], np.ndarray] | None
) -> str | None:
    """A bank file is fingerprinted from the samples the clips are mixed from; one that
    cannot be decoded stops the build where the bank is read (NoiseBankError)."""
    if loader is None:
        raise ValueError("bank files need the bank's loader")
    key = digest_of(FINGERPRINT_FORMAT, "noise bank", file.sha256)
    return _cached_fingerprint(key, cache, lambda: fingerprint(loader(file.path)).to_text())

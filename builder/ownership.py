"""Every released recording belongs to one participant: the same audio filed under
two participants is excluded everywhere it is used.

File identity (a path, a symlink or a hard link to one file) is checked by the
contributions reader. This step checks content: the same audio, re-encoded to
another format or bitrate, has different bytes but the same robust fingerprint.

The fingerprint is the Haitsma-Kalker robust audio hash: per 20 ms frame, 32 bits,
each the sign of an energy difference between adjacent frequency bands, taken
between consecutive frames. Lossy coding, resampling and level changes flip few
bits; different recordings (even of the same sentence by another voice) differ in
about half of them. Only frames with speech-like energy count, so the digital
silence between words of two unrelated recordings does not match.
"""

from __future__ import annotations

import base64
import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import NoneType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from redvox.schemas import SAMPLE_RATE
from redvox.schemas.config import AudioLimits
from redvox.schemas.fields import checked
from redvox.sources.audio import DEFAULT_LIMITS, AudioDecodeError, decode_audio

from .cache import BuildCache, digest_of
from .join import Recording, recording_quarantine
from .manifest import SHARED_AUDIO

if TYPE_CHECKING:
    from .recordings import SpeechOutcome

FRAME = 1024  # 64 ms at 16 kHz
HOP = 128  # 8 ms: a copy shifted by part of a hop still lines up
BANDS = 33  # 33 bands -> 32 bits per frame
LOW_HZ, HIGH_HZ = 300.0, 3000.0
# Frames this far below the loudest frame are silence and carry no bits.
ACTIVE_DB = 40.0
# Two recordings are the same audio when their active frames, at the best lag,
# differ in at most this share of bits (Haitsma-Kalker: 0.35 for 3 s blocks).
# Measured on the demo corpus: MP3, Vorbis and Opus copies, a 30 dB noise floor or
# 69 ms of leading padding stay <= 0.14; different recordings are all >= 0.37.
MAX_BIT_ERROR = 0.25
MAX_LAG = 25  # frames (200 ms): encoder delay and padding of a converted copy
MIN_OVERLAP = 60  # active frames (0.5 s) both sides must share to compare at all
# Sub-fingerprints found in this many recordings say nothing (silence-like frames).
COMMON = 64
# Words two recordings must share at one offset (within a frame) to be compared.
MIN_HITS = 2
# Active frames whose words are sorted at once: about 20 bytes each while they are.
WORDS_PER_PASS = 1 << 21

FINGERPRINT_FORMAT = "hk-v1"


@dataclass(frozen=True)
class Fingerprint:
    bits: np.ndarray  # uint32 per frame
    active: np.ndarray  # bool per frame

    def to_text(self) -> str:
        """Compact text for the decode cache: the words, then one bit per frame."""
        data = self.bits.astype("<u4").tobytes() + np.packbits(self.active).tobytes()
        return base64.b64encode(data).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> Fingerprint:
        data = base64.b64decode(text)
        count = (8 * len(data)) // 33  # 32 bits of word + 1 bit of activity per frame
        while 4 * count + (count + 7) // 8 > len(data):
            count -= 1
        bits = np.frombuffer(data[: 4 * count], dtype="<u4").astype(np.uint32)
        active = np.unpackbits(np.frombuffer(data[4 * count :], np.uint8))[:count].astype(bool)
        return cls(bits, active)


def _band_edges() -> np.ndarray:
    """FFT bin index of each band edge, log-spaced between LOW_HZ and HIGH_HZ."""
    hz = np.geomspace(LOW_HZ, HIGH_HZ, BANDS + 1)
    return np.round(hz / SAMPLE_RATE * FRAME).astype(int)


def fingerprint(samples: np.ndarray) -> Fingerprint:
    """The robust hash of mono 16 kHz float samples."""
    samples = np.asarray(samples, dtype=np.float32)
    if len(samples) < FRAME + HOP:
        return Fingerprint(np.zeros(0, np.uint32), np.zeros(0, bool))
    count = 1 + (len(samples) - FRAME) // HOP
    frames = np.lib.stride_tricks.as_strided(
        samples, shape=(count, FRAME), strides=(samples.strides[0] * HOP, samples.strides[0])
    )
    power = np.abs(np.fft.rfft(frames * np.hanning(FRAME).astype(np.float32), axis=1)) ** 2
    edges = _band_edges()
    energy = np.add.reduceat(power, edges[:-1], axis=1)[:, :BANDS]
    band_diff = energy[:, :-1] - energy[:, 1:]  # (frames, 32)
    bits = (band_diff[1:] - band_diff[:-1]) > 0
    weights = (1 << np.arange(32, dtype=np.uint64)).astype(np.uint64)
    words = (bits.astype(np.uint64) * weights).sum(axis=1).astype(np.uint32)
    level = 10 * np.log10(energy.sum(axis=1) + 1e-12)
    active = (level > level.max() - ACTIVE_DB)[1:] & (level[1:] > -100.0)
    return Fingerprint(words, active)


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def bit_error(a: Fingerprint, b: Fingerprint, lags: Iterable[int] | None = None) -> float:
    """The smallest share of differing bits over frames active in both, across `lags`
    (frames of `a` ahead of `b`; default: every lag within MAX_LAG)."""
    best = 1.0
    for lag in range(-MAX_LAG, MAX_LAG + 1) if lags is None else lags:
        start_a, start_b = max(0, lag), max(0, -lag)
        n = min(len(a.bits) - start_a, len(b.bits) - start_b)
        if n < MIN_OVERLAP:
            continue
        both = a.active[start_a : start_a + n] & b.active[start_b : start_b + n]
        count = int(np.count_nonzero(both))
        if count < MIN_OVERLAP:
            continue
        diff = a.bits[start_a : start_a + n][both] ^ b.bits[start_b : start_b + n][both]
        errors = int(_POPCOUNT[diff.view(np.uint8)].sum())
        best = min(best, errors / (32 * count))
    return best


def _decoded(fp: Fingerprint | str | None) -> Fingerprint | None:
    """A fingerprint given in its text form (`Fingerprint.to_text`) is decoded each time it
    is used: the collection's fingerprints are never all decoded at once."""
    return Fingerprint.from_text(fp) if isinstance(fp, str) else fp


def _frames(fp: Fingerprint | str | None) -> int:
    """About how many frames a fingerprint has, without decoding it (to plan passes)."""
    if fp is None:
        return 0
    return len(fp.bits) if isinstance(fp, Fingerprint) else len(fp) * 6 // 33


def _offset_votes(
    fingerprints: Sequence[Fingerprint | str | None], owners: Sequence[str]
) -> dict[tuple[int, int], Counter[int]]:
    """For each pair of recordings of different owners sharing at least MIN_HITS words of
    active frames (a word found in at most COMMON recordings), how many words they
    share at each offset within MAX_LAG.

    The (word, recording, frame) of every active frame of the collection are sorted by
    word, in passes of about WORDS_PER_PASS frames each taking one range of word values
    (lowest first: the order one sort of them all gives): memory stays bounded however
    many recordings there are. Each shared word is first noted in 8 bytes, and only
    pairs sharing enough get a Counter (pairs sharing one word by chance grow with the
    square of the collection)."""
    frames = sum(_frames(fp) for fp in fingerprints)
    range_bits = max(0, math.ceil(math.log2(max(1, frames) / WORDS_PER_PASS)))
    shared = array("q")  # _SPAN * (i * count + j) + offset + MAX_LAG, in the order found
    for k in range(1 << range_bits):
        lo, hi = k << (32 - range_bits), (k + 1) << (32 - range_bits)
        _note_shared_words(fingerprints, owners, lo, hi, shared)
    return _votes(np.frombuffer(shared, np.int64), len(fingerprints))


def _note_shared_words(
    fingerprints: Sequence[Fingerprint | str | None],
    owners: Sequence[str],
    lo: int,
    hi: int,
    shared: array,
) -> None:
    """Append to `shared` every word in [lo, hi) that two recordings of different owners
    share within MAX_LAG frames, in word order, then in recording order."""
    words, frames, owner_of = [], [], []
    for i, item in enumerate(fingerprints):
        fp = _decoded(item)
        if fp is None:
            continue
        positions = np.flatnonzero(fp.active)
        unique, first = np.unique(fp.bits[positions], return_index=True)
        a, b = np.searchsorted(unique, lo), len(unique)
        if hi < 1 << 32:
            b = np.searchsorted(unique, hi)
        words.append(unique[a:b])
        frames.append(positions[first[a:b]].astype(np.int32))
        owner_of.append(i)
    if not words:
        return
    ends = np.cumsum([len(w) for w in words])
    frame = np.concatenate(frames)
    del frames
    word = np.concatenate(words)
    del words
    order = np.argsort(word, kind="stable").astype(np.int32)
    word = word[order]
    # Runs of one word: only the few words that repeat are looked at, one by one.
    repeats = np.flatnonzero(word[1:] == word[:-1])
    del word
    chain_starts = np.r_[True, np.diff(repeats) != 1] if len(repeats) else np.zeros(0, bool)
    starts = repeats[chain_starts]
    sizes = np.diff(np.r_[np.flatnonzero(chain_starts), len(repeats)]) + 1
    count = len(fingerprints)
    for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        if size > COMMON:
            continue
        found = order[start : start + size]
        which = np.searchsorted(ends, found, side="right")
        holders = [
            (owner_of[k], at) for k, at in zip(which.tolist(), frame[found].tolist(), strict=True)
        ]
        for x, (i, at_i) in enumerate(holders):
            for j, at_j in holders[x + 1 :]:
                if owners[i] != owners[j] and abs(at_i - at_j) <= MAX_LAG:
                    pair = min(i, j) * count + max(i, j)
                    offset = at_i - at_j if i < j else at_j - at_i
                    shared.append(_SPAN * pair + offset + MAX_LAG)


_SPAN = 2 * MAX_LAG + 1  # offsets -MAX_LAG..MAX_LAG


def _votes(shared: np.ndarray, count: int) -> dict[tuple[int, int], Counter[int]]:
    """The offset votes of the pairs sharing at least MIN_HITS words (`shared` as
    `_offset_votes` notes them), each Counter filled in the order the words were found."""
    pairs = shared // _SPAN
    unique, hits = np.unique(pairs, return_counts=True)
    votes: dict[tuple[int, int], Counter[int]] = defaultdict(Counter)
    for code in shared[np.isin(pairs, unique[hits >= MIN_HITS])].tolist():
        pair, offset = divmod(code, _SPAN)
        votes[divmod(pair, count)][offset - MAX_LAG] += 1
    return votes


def matching_pairs(fingerprints: Sequence[Fingerprint | str | None], owners: Sequence[str]) -> set:
    """Pairs (i, j), i < j, of recordings of different owners that are the same audio
    (a fingerprint may be given in its text form: see `_decoded`).

    Candidates share at least two exact sub-fingerprints of active frames at the same
    offset (the Haitsma-Kalker lookup: a copy shares words at one lag, unrelated
    audio shares the odd word at random lags); each candidate pair is then confirmed
    by its bit error around the offset its words agree on.
    """
    votes = _offset_votes(fingerprints, owners)
    pairs = set()
    for (i, j), offsets in votes.items():
        # A codec shifts a copy by part of a hop, so its words agree within one frame.
        lag, hits = max(
            ((o, offsets[o - 1] + offsets[o] + offsets[o + 1]) for o in offsets),
            key=lambda vote: (vote[1], -abs(vote[0])),
        )
        if hits < MIN_HITS:
            continue
        near = range(max(-MAX_LAG, lag - 2), min(MAX_LAG, lag + 2) + 1)
        a, b = _decoded(fingerprints[i]), _decoded(fingerprints[j])
        if bit_error(a, b, near) <= MAX_BIT_ERROR:
            pairs.add((i, j))
    return pairs


# --- the build step ------------------------------------------------------------------


def exclude_shared_audio(
    admitted: Sequence[Recording],
    outcomes: Sequence[SpeechOutcome],
    others: Sequence[Recording],
    other_paths: Sequence[Path],
    other_shas: Sequence[str],
    cache: BuildCache,
    limits: AudioLimits = DEFAULT_LIMITS,
) -> list[SpeechOutcome]:
    """`outcomes` of the admitted recordings, with every recording whose audio is also
    filed under another participant (admitted or not) refused, naming the other rows.

    `others` are the joined recordings no set admits: they are never released, but a
    public participant's row must not carry their voice, so they are fingerprinted too
    (behind the cache, keyed by file hash; their audio is not stored).

    The outcomes come back without their fingerprints: this is their only reader, and
    at about 3.5 KB a recording they would otherwise be held to the end of the build.
    """
    recordings = [*admitted, *others]
    prints: list[Fingerprint | str | None] = [o.fingerprint or None for o in outcomes]
    prints += [
        _file_fingerprint(p, sha, cache, limits)
        for p, sha in zip(other_paths, other_shas, strict=True)
    ]
    pairs = matching_pairs(prints, [r.participant_key for r in recordings])
    partners: dict[int, list[int]] = defaultdict(list)
    for i, j in pairs:
        partners[i].append(j)
        partners[j].append(i)
    result = [replace(outcome, fingerprint=None) for outcome in outcomes]
    for i, found in partners.items():
        if i >= len(admitted):
            continue
        where = ", ".join(f"{recordings[j].file} line {recordings[j].line}" for j in sorted(found))
        reason = (
            f"{SHARED_AUDIO}: the same audio as {where}, filed under another participant; "
            "a recording belongs to one participant, fix the audio_file of the wrong rows"
        )
        result[i] = replace(
            result[i],
            audio=None,
            quarantine=recording_quarantine(admitted[i], "ownership", reason, SHARED_AUDIO),
        )
    return result


@dataclass(frozen=True)
class FingerprintFact:
    """The fingerprint of a recording no set admits, as the `fingerprint` cache stores it
    (`to_dict`): `Fingerprint.to_text`, or None when its audio does not decode."""

    KIND: ClassVar[str] = "fingerprint"

    fingerprint: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FingerprintFact:
        return cls(checked(d, "fingerprint", (str, NoneType)))


def _file_fingerprint(
    path: Path, file_sha: str, cache: BuildCache, limits: AudioLimits
) -> Fingerprint | None:
    key = digest_of(FINGERPRINT_FORMAT, file_sha, limits.model_dump_json())
    fact = cache.get(FingerprintFact, key)
    if fact is None:
        try:
            text = fingerprint(decode_audio(path, limits=limits).samples).to_text()
        except AudioDecodeError:
            text = None  # unusable audio is released nowhere
        fact = FingerprintFact(text)
        cache.put(key, fact)
    return Fingerprint.from_text(fact.fingerprint) if fact.fingerprint else None

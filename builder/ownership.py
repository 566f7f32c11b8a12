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
up to 10% faster or slower still shares its hashes at one (ratio, offset). A
mislabel by about 2 or 3:2 moves the peaks themselves; the peaks of each recording
played 2 and 1.5 times as fast (builder/fingerprint.py FASTER) are looked up too, at
the ratios of FASTER_RATIOS, so a copy mislabelled between any two common sample
rates (within 2.2 times) is found.

The fingerprint itself (peaks, landmark hashes, and how their parameters were
chosen) is builder/fingerprint.py; this module looks every recording up against all
the others, in batches whose size does not grow with the collection.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import NoneType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from redvox.schemas.config import AudioLimits, InputConfig
from redvox.schemas.errors import UserError
from redvox.schemas.fields import checked
from redvox.schemas.layout import sha256_file
from redvox.sources.audio import DEFAULT_LIMITS, AudioDecodeError, decode_audio
from redvox.sources.musan import NoiseBank

from .cache import BuildCache, digest_of
from .fingerprint import (
    FASTER,
    FINGERPRINT_FORMAT,
    HASH_BITS,
    SUB,
    Fingerprint,
    fingerprint,
    landmarks,
)
from .join import Recording, recording_quarantine
from .manifest import SHARED_AUDIO

if TYPE_CHECKING:  # annotations only: importing recordings loads the VAD's onnxruntime
    from .recordings import SpeechOutcome

# A landmark whose hash more than this many landmarks of other participants than its
# own hold says nothing (speech-like commonplace, a stop-list): it is looked up nowhere,
# so the lookup's work per landmark is bounded however large the collection grows.
COMMON = 64
# Two recordings hold the same audio when, at one (ratio, offset within a frame),
# at least MIN_HITS landmarks agree and these are at least MIN_SHARE of the landmarks
# of the shorter one. Measured (bench/bench_ownership.py): distinct demo recordings of
# different participants agree on at most 5 landmarks (1.0%); the hardest edit in
# scope keeps 12 (MP3 of a 0.95 speed change with 10 dB noise: 12, 4.1%), 5 dB SNR
# white noise 22 (7.6%), every rate mislabel at least 34.
MIN_HITS = 12
MIN_SHARE = 0.04
# Peaks of the query recordings one step of the lookup rescales at once (about 5
# landmarks each, and a few shared landmarks for each of those: some 100 bytes a peak).
PEAKS_PER_BATCH = 1 << 16
COMMON_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)


_SPAN = -math.log(0.9)  # speeds within 10% either way: log-distance at most this


def _mislabels() -> list[float]:
    """Every ratio of two common sample rates outside +-10% of 1, between 1/2.2 and 2.2
    (a 16 kHz file labelled 8 kHz plays at half speed; beyond that too little of the
    voice stays below 4 kHz)."""
    labels = {a / b for a in COMMON_RATES for b in COMMON_RATES}
    return sorted(r for r in labels if 1 / 2.2 <= r <= 2.2 and abs(math.log(r)) > _SPAN)


def _left_over(ratio: float, speed: float) -> list[float]:
    """What is left of a copy at `ratio` once the recording is played `speed` times as
    fast or as slow, where that is within 10%: the ratios at which the fingerprint played
    that fast finds it (none: it does not)."""
    return [left for left in (ratio / speed, ratio * speed) if abs(math.log(left)) <= _SPAN + 1e-9]


def _ratios() -> tuple[float, ...]:
    """1, then 10 speeds log-spaced up to 1/0.9 (1% apart: a peak at 4 kHz moves half a
    bin at most between two of them), then the mislabels above 1 that no fingerprint
    played FASTER finds (32 kHz labelled 24 kHz). No speed below 1: every recording is
    looked up against every other, so of a pair the one that plays faster is rescaled
    to the other's speed (a copy played 0.95 times as fast is found from its original,
    at 1/0.95)."""
    grid = np.exp(np.linspace(0.0, -np.log(0.9), 11))[1:]
    speeds = [1.0, *(float(r) for r in grid)]
    speeds += [r for r in _mislabels() if r > 1 and not any(_left_over(r, s) for s in FASTER)]
    return tuple(round(r, 6) for r in speeds)


RATIOS = _ratios()


def _faster_ratios() -> tuple[tuple[float, ...], ...]:
    """For each speed s of FASTER, the ratios its peaks are looked up at: what is left
    of each mislabel within 10% of s or 1/s once played s times as fast, both ways (a
    22.05 kHz file labelled 48 kHz is its recording played 2 times as fast, then 1.088
    times; a 48 kHz one labelled 22.05 kHz played 2 times as fast is its recording
    played 1.088 times as slow). The speeds between (a copy played 1.8 times as fast)
    are not looked up: beyond +-10%, only the rate mislabels are promised."""
    return tuple(
        tuple(sorted({round(left, 6) for r in _mislabels() for left in _left_over(r, s)}))
        for s in FASTER
    )


FASTER_RATIOS = _faster_ratios()
_OFFSET_BITS = 26  # offsets, in frames, of up to 74 h either way


class NoiseBankVoiceError(UserError, ValueError):
    """A noise-bank file holds a contribution's audio: the bank must hold no one's voice."""


class UnreadableVoiceError(UserError, ValueError):
    """Audio of someone not cleared for every set built (withheld, unknown, or in the
    audio folder under no row) cannot be decoded: a copy of it filed under another
    participant, or put in the noise bank, could not be found."""


# --- the lookup ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Peaks:
    """Every peak of the collection, ordered by recording (the recordings of one
    participant next to each other), then time, then frequency."""

    times: np.ndarray  # frames (float)
    bins: np.ndarray  # bins (float)
    owner: np.ndarray  # recording index
    order: np.ndarray  # the recordings, in the order of their peaks
    rank: np.ndarray  # where each recording is in `order`
    starts: np.ndarray  # where the peaks of order[k] start (one more: the end)

    @classmethod
    def of(
        cls, sets: Sequence[tuple[np.ndarray, np.ndarray] | None], owner_of: np.ndarray
    ) -> _Peaks:
        """From the (times, bins) of each recording's peaks (None: it has none)."""
        times, bins, owner = [np.zeros(0)], [np.zeros(0)], [np.zeros(0, np.int64)]
        for i, item in enumerate(sets):
            if item is None:
                continue
            times.append(item[0] / SUB)
            bins.append(item[1] / SUB)
            owner.append(np.full(len(item[0]), i, np.int64))
        t, f, o = np.concatenate(times), np.concatenate(bins), np.concatenate(owner)
        recordings = np.argsort(owner_of, kind="stable")
        rank = np.empty_like(recordings)
        rank[recordings] = np.arange(len(recordings))
        order = np.lexsort((f, t, rank[o]))
        starts = np.searchsorted(rank[o[order]], np.arange(len(sets) + 1))
        return cls(t[order], f[order], o[order], recordings, rank, starts)

    def batches(self) -> list[tuple[int, int]]:
        """(first, last) recordings of `order` of each batch: a batch ends at the first
        recording past each multiple of PEAKS_PER_BATCH peaks."""
        count = len(self.order)
        cuts = np.searchsorted(self.starts, np.arange(0, self.starts[-1], PEAKS_PER_BATCH), "right")
        edges = np.unique(np.r_[0, np.minimum(cuts, count), count]).tolist()
        return list(zip(edges[:-1], edges[1:], strict=True))


@dataclass(frozen=True)
class _Index:
    """The plain landmarks of every recording, sorted by (hash, participant): where each
    hash's landmarks start is one table lookup, and those of a query's own participant
    (one speaker's takes share most of theirs) are skipped as one range, found in a
    table of the (participant, hash) ranges."""

    recs: np.ndarray  # recording
    anchors: np.ndarray  # anchor time, in 1/SUB of a frame
    bounds: np.ndarray  # bounds[h]: the first landmark of hash h
    blocks: np.ndarray  # participant << HASH_BITS | hash of each range, in order
    block_start: np.ndarray  # where that range starts ...
    block_end: np.ndarray  # ... and ends
    totals: np.ndarray  # plain landmarks per recording
    owner_of: np.ndarray  # participant of each recording

    @classmethod
    def of(cls, peaks: _Peaks, owner_of: np.ndarray) -> _Index:
        hashes, recs, anchors = landmarks(peaks.times, peaks.bins, peaks.owner)
        totals = np.bincount(recs, minlength=len(owner_of))
        # One sort key, (hash, participant), and compact copies: what is held to the end
        # is 8 bytes a landmark, and what the build holds for a moment about 40.
        key = (hashes << 32) | owner_of[recs]
        del hashes
        order = np.argsort(key)
        key = key[order]
        recs = recs[order].astype(np.int32)
        anchors = np.round(anchors[order] * SUB).astype(np.int32)
        del order
        hashes = key >> 32
        bounds = np.r_[0, np.cumsum(np.bincount(hashes, minlength=1 << HASH_BITS))]
        start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        end = np.r_[start[1:], len(key)]
        block = ((key[start] & 0xFFFFFFFF) << HASH_BITS) | hashes[start]
        by_block = np.argsort(block)
        return cls(
            recs,
            anchors,
            bounds,
            block[by_block],
            start[by_block],
            end[by_block],
            totals,
            owner_of,
        )

    def shared(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(query landmark, index landmark) of every landmark of another participant
        sharing a query's hash, the hashes held by more than COMMON such left out; the
        queries given as their participant << HASH_BITS | hash, in order."""
        hashes = keys & ((1 << HASH_BITS) - 1)
        group = self.bounds[hashes], self.bounds[hashes + 1]
        wanted = np.flatnonzero(group[1] > group[0])
        first, last = group[0][wanted], group[1][wanted]
        # The queries of a batch are of few participants: their searches stay in a few
        # small stretches of the table.
        key = keys[wanted]
        at = np.minimum(np.searchsorted(self.blocks, key), len(self.blocks) - 1)
        held_own = self.blocks[at] == key
        own = (
            np.where(held_own, self.block_start[at], first),
            np.where(held_own, self.block_end[at], first),
        )
        common = (last - first) - (own[1] - own[0]) > COMMON
        found, held = [], []
        for lo, hi in ((first, own[0]), (own[1], last)):
            size = np.where(common, 0, hi - lo)
            found.append(np.repeat(wanted, size))
            start = np.repeat(lo - np.cumsum(size) + size, size)
            held.append(np.arange(int(size.sum())) + start)
        return np.concatenate(found), np.concatenate(held)


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
    fingerprints: Sequence[Fingerprint | str | None],
    owners: Sequence[str],
    floor: int = MIN_HITS // 4,
) -> dict[tuple[int, int], Score]:
    """The best agreement of every pair (i, j), i < j, of recordings of different owners
    that agree on at least `floor` landmarks at one (ratio, offset) (a fingerprint may be
    given as text: `Fingerprint.to_text`).

    The recordings are looked up in batches of about PEAKS_PER_BATCH peaks, one ratio
    at a time: the batch's landmarks, rescaled by the ratio, are joined with the plain
    landmarks of the collection, and every (query, candidate, offset) they share is
    counted; then so are the landmarks of the batch played each speed of FASTER (at
    the few ratios of FASTER_RATIOS). What one step holds is bounded (its landmarks, and
    at most COMMON shared landmarks for each), and so is what is kept between steps:
    the best offset of each (pair, ratio) that reaches `floor`."""
    owner_ids = {name: n for n, name in enumerate(sorted(set(owners)))}
    owner_of = np.array([owner_ids[o] for o in owners], np.int64)
    prints = [Fingerprint.from_text(f) if isinstance(f, str) else f for f in fingerprints]
    peaks = _Peaks.of([(fp.times, fp.bins) if fp else None for fp in prints], owner_of)
    index = _Index.of(peaks, owner_of)
    count = len(fingerprints)
    # Every lookup: its peaks, its ratio, and that ratio as Score reports it.
    lookups = [(peaks, r, r) for r in RATIOS]
    for k, speed in enumerate(FASTER):
        faster = _Peaks.of([fp.faster[k] if fp else None for fp in prints], owner_of)
        lookups += [(faster, r, r / speed) for r in FASTER_RATIOS[k]]
    del prints  # the peaks are held once, as _Peaks
    steps = [
        (query, index, first, last, n, ratio, floor, query is peaks)
        for n, (query, ratio, _) in enumerate(lookups)
        for first, last in query.batches()
    ]
    # The steps are independent and numpy's sorts and gathers let go of the GIL: they
    # run on the CPUs the build may use, their results taken in step order.
    with ThreadPoolExecutor(max_workers=_lookup_threads()) as pool:
        found = list(pool.map(lambda step: _batch(*step), steps))
    pairs = np.concatenate([np.zeros(0, np.int64), *(f[0] for f in found)])
    hits = np.concatenate([np.zeros(0, np.int64), *(f[1] for f in found)])
    ratios = np.concatenate([np.zeros(0, np.int64), *(f[2] for f in found)])
    # A pair may be found at several ratios: its best.
    order = np.lexsort((ratios, -hits, pairs))
    first = order[np.r_[True, pairs[order][1:] != pairs[order][:-1]]] if len(order) else order
    scores = {}
    for k in first.tolist():
        i, j = divmod(int(pairs[k]), count)
        shorter = max(1, int(min(index.totals[i], index.totals[j])))
        score = Score(int(hits[k]), int(hits[k]) / shorter, round(lookups[ratios[k]][2], 6))
        scores[(i, j)] = score
    return scores


def _lookup_threads() -> int:
    """Threads of the lookup: the CPUs this process may run on, at most 4 (each step
    holds its own temporary arrays, about 100 MB at most)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _batch(
    peaks: _Peaks,
    index: _Index,
    first: int,
    last: int,
    n: int,
    ratio: float,
    floor: int,
    plain: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair i * count + j with i < j, hits, n) of the best offset of every pair of a
    query recording order[first..last-1], its peaks rescaled by `ratio`, and another
    participant's recording that agree on at least `floor` landmarks there."""
    count = len(index.totals)
    lo, hi = peaks.starts[first], peaks.starts[last]
    q_hash, q_local, q_anchor = landmarks(
        peaks.times[lo:hi], peaks.bins[lo:hi], peaks.rank[peaks.owner[lo:hi]] - first, ratio
    )
    q_rec = peaks.order[q_local + first]
    # In the order of the index's tables (participant, then hash): their reads are
    # near each other, not all over memory.
    keys = (index.owner_of[q_rec] << HASH_BITS) | q_hash
    by_key = np.argsort(keys)
    keys, q_local, q_rec, q_anchor = keys[by_key], q_local[by_key], q_rec[by_key], q_anchor[by_key]
    query, held = index.shared(keys)
    b = index.recs[held].astype(np.int64)
    if plain and ratio == 1.0:  # unscaled, i found in j is j found in i: from the first
        keep = q_rec[query] < b
        query, held, b = query[keep], held[keep], b[keep]
    cell = q_local[query] * count + b
    offset = np.round(index.anchors[held] / SUB - q_anchor[query]).astype(np.int64)
    codes = np.sort((cell << _OFFSET_BITS) + offset + (1 << (_OFFSET_BITS - 1)))
    # A pair's landmarks at one offset are at most all it shares: the pairs that share
    # fewer than `floor` in all (most of them, by chance) are left out first.
    cells = codes >> _OFFSET_BITS
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
    sizes = np.diff(np.r_[starts, len(codes)])
    codes = codes[np.repeat(sizes >= floor, sizes)]
    if not len(codes):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    hits = np.diff(np.r_[starts, len(codes)])
    codes = codes[starts]
    counts = hits.copy()
    beside = codes[1:] == codes[:-1] + 1  # offsets a frame apart (a codec, a resample)
    hits[:-1] += np.where(beside, counts[1:], 0)
    hits[1:] += np.where(beside, counts[:-1], 0)
    wanted = hits >= floor  # most shared landmarks are chance, one or two at an offset
    codes, hits = codes[wanted], hits[wanted]
    cells = codes >> _OFFSET_BITS
    order = np.lexsort((codes, -hits, cells))
    best = order[np.r_[True, cells[order][1:] != cells[order][:-1]]] if len(order) else order
    a, b = np.divmod(cells[best], count)
    a = peaks.order[a + first]
    return np.minimum(a, b) * count + np.maximum(a, b), hits[best], np.full(len(best), n)


def matching_pairs(fingerprints: Sequence[Fingerprint | str | None], owners: Sequence[str]) -> set:
    """Pairs (i, j), i < j, of recordings of different owners where one contains the
    other's audio (equal, part of it, or mixed with it), at any speed of RATIOS or
    rate mislabel."""
    scores = pair_scores(fingerprints, owners, floor=MIN_HITS)
    return {pair for pair, score in scores.items() if score.same_audio}


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
    # A file of the audio folder that no row names and neither its name nor its first
    # bytes call audio: looked up when it decodes, and no recording when it does not.
    optional: bool = False


NOISE_BANK_OWNER = "\x00noise bank"  # no participant key is this: bank files never pair


def contribution_audio(
    config: InputConfig, rows: dict[int, dict[str, str | None]], skip: Set[int | None] = frozenset()
) -> list[OtherAudio]:
    """The audio file of every contributions line not in `skip`, whatever else is wrong
    with the line, when its audio_file names a file: one that a link leads outside the
    audio folder is refused by the reader, and still read here (never released, its
    voice is looked for)."""
    root = Path(config.audio_root).resolve()
    found = []
    for line, cells in sorted(rows.items()):
        name = (cells.get("audio_file") or "").strip()
        if line in skip or not name:
            continue
        path = _file(root / name)
        if path is not None:
            owner = (cells.get("participant_key") or "").strip() or None
            where = f"{config.contributions} line {line} ({name})"
            found.append(OtherAudio(where, path, sha256_file(path), owner))
    return found


# What an audio file in the audio folder may be called, or begin with, to be taken
# for a recording that must decode (every container the readers know by these; FFmpeg
# reads more, and any other file is tried too).
AUDIO_SUFFIXES = frozenset(
    ".wav .wave .flac .mp3 .ogg .oga .opus .m4a .mp4 .aac .webm .mka .mkv .mov .aif .aiff "
    ".aifc .wma .amr .3gp .caf .wv .ape .ac3 .au .snd .w64 .rf64 .ts .m2ts .mpg .mpeg .mp2 "
    ".flv .nut .tta .sph .voc .sf .paf .avr .sds .g722 .sox .spx .mpc .dts .eac3 .avi .wmv "
    ".asf .ra .rm".split()
)
_AUDIO_MAGIC = (b"RIFF", b"RIFX", b"RF64", b"fLaC", b"OggS", b"ID3", b"FORM", b"#!AMR")
_AUDIO_MAGIC += (b"\x1aE\xdf\xa3", b"caff", b"wvpk", b"MAC ", b"\x30\x26\xb2\x75", b".snd")
_AUDIO_MAGIC += (b"riff", b"NIST_1A", b"Creative Voice", b"FLV", b"TTA1", b"\x0b\x77")
# Files that operating systems leave beside others (macOS AppleDouble `._x.flac` and
# .DS_Store, Windows Thumbs.db): metadata, never a recording.
_METADATA_MAGIC = (b"\x00\x05\x16\x07", b"\x00\x00\x00\x01Bud1")
_METADATA_NAMES = frozenset({"thumbs.db", "desktop.ini", ".ds_store"})


def _kind(path: Path) -> str | None:
    """ "audio" when a file's name or first bytes say it holds audio (an MPEG frame or an
    ADTS header begin with 11 set bits, MPEG-TS packets with 0x47), "metadata" for an
    operating system's files, None for anything else."""
    with path.open("rb") as handle:
        head = handle.read(189)
    if path.name.lower() in _METADATA_NAMES or head.startswith(_METADATA_MAGIC):
        return "metadata"
    mpeg = len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0
    known = head.startswith(_AUDIO_MAGIC) or head[4:8] == b"ftyp" or mpeg
    transport = len(head) > 188 and head[0] == head[188] == 0x47  # two MPEG-TS packets
    if known or transport or path.suffix.lower() in AUDIO_SUFFIXES:
        return "audio"
    return None


def unclaimed_audio(
    config: InputConfig, rows: dict[int, dict[str, str | None]]
) -> list[OtherAudio]:
    """Every file of the audio folder that no contributions row in `rows` leads to (by
    path, link or hard link): a recording whose row is missing or could not be read (a
    line the table reader rejected), whose consent therefore cannot be established.
    Empty files and an operating system's metadata files are left out; a file that is
    not audio by its name or first bytes is `optional` (no recording unless it
    decodes). Links that lead outside the folder are not in it."""
    root = Path(config.audio_root).resolve()
    claimed: set[tuple[int, int]] = set()
    for cells in rows.values():
        name = (cells.get("audio_file") or "").strip()
        path = _inside(root, root / name) if name else None
        if path is not None:
            claimed.add(_identity(path))
    found = []

    def refuse(error: OSError) -> None:
        raise UserError(
            f"{error.filename}: cannot be read ({error.strerror}); every file of "
            "audio_root is checked for a participant's voice: make it readable"
        )

    for folder, subfolders, names in os.walk(root, onerror=refuse):
        subfolders.sort()
        for name in sorted(names):
            path = _inside(root, Path(folder) / name)
            if path is None:
                continue
            try:
                identity = _identity(path)
                if identity in claimed or path.stat().st_size == 0:
                    continue
                claimed.add(identity)  # one file, however many links lead to it
                kind = _kind(path)
                if kind == "metadata":
                    continue
                where = f"{path} (in audio_root, named by no readable contributions row)"
                found.append(OtherAudio(where, path, sha256_file(path), optional=kind is None))
            except OSError as error:
                refuse(error)
    return found


def _inside(root: Path, path: Path) -> Path | None:
    """The file `path` leads to, when it is one inside `root` (None for a link that
    leads outside, a link loop, a folder or nothing)."""
    path = _file(path)
    return path if path is not None and path.is_relative_to(root) else None


def _file(path: Path) -> Path | None:
    """The regular file `path` leads to (None for a link loop, a folder, a device or
    nothing)."""
    try:
        path = path.resolve()
    except (OSError, RuntimeError):  # a loop of symbolic links
        return None
    return path if path.is_file() else None


def _identity(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino


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
    cleared: Set[str] = frozenset(),
    bank: Sequence[OtherAudio] = (),
    bank_loader: Callable[[Path], np.ndarray] | None = None,
) -> list[SpeechOutcome]:
    """`outcomes` of the admitted recordings, with every recording whose audio contains,
    or is contained in, audio filed under another participant refused, naming the other
    rows. Refused recordings that decoded (clipped, too little speech) keep their
    fingerprints for this. `others` (every other contributions row, joined or not, and
    the audio folder's files no row names: consent that cannot be established is no
    consent) are fingerprinted too, behind the cache; so is every noise-bank file of
    `bank` (decoded by `bank_loader`, as the clips use it), and a bank file that matches
    any contribution stops the build (NoiseBankVoiceError). So does a recording that
    cannot be decoded unless its participant is one of `cleared` (admitted to every set
    built: a copy of their audio would be published with their consent)
    (UnreadableVoiceError).

    The outcomes come back without their fingerprints: this is their only reader."""
    prints: list[Fingerprint | str | None] = [o.fingerprint or None for o in outcomes]
    prints += [_file_fingerprint(o.path, o.sha256, cache, limits) for o in others]
    where = [f"{r.file} line {r.line} ({r.contribution.audio_file})" for r in admitted] + [
        o.where for o in [*others, *bank]
    ]
    owners = [r.participant_key for r in admitted]
    owners += [o.owner if o.owner else f"\x00{o.where}" for o in others]

    def why(k: int) -> str:
        if k < len(admitted):
            quarantine = outcomes[k].quarantine
            return quarantine.reason if quarantine else "no fingerprint"
        return _decode_error(others[k - len(admitted)].path, limits)

    needed = [owner not in cleared for owner in owners[: len(admitted)]]
    needed += [not o.optional and o.owner not in cleared for o in others]
    _refuse_unreadable(prints, needed, where, why)
    prints += [_bank_fingerprint(o, cache, bank_loader) for o in bank]
    owners += [NOISE_BANK_OWNER] * len(bank)
    pairs = matching_pairs(prints, owners)
    _refuse_bank_voices(pairs, len(admitted) + len(others), where)
    partners: dict[int, list[int]] = {}
    for i, j in sorted(pairs):
        partners.setdefault(i, []).append(j)
        partners.setdefault(j, []).append(i)
    result = [replace(outcome, fingerprint=None) for outcome in outcomes]
    for i, found in partners.items():
        if i >= len(admitted) or result[i].audio is None:  # refused already, for its own reason
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


def _refuse_unreadable(
    prints: Sequence[Fingerprint | str | None],
    needed: Sequence[bool],
    where: Sequence[str],
    why: Callable[[int], str],
) -> None:
    """UnreadableVoiceError for the recordings without a fingerprint (they did not
    decode: `why(k)` says why) that `needed` one (their participant is not cleared)."""
    found = [k for k, p in enumerate(prints) if p is None and needed[k]]
    if found:
        named = "; ".join(f"{where[k]} ({why(k)})" for k in found[:5])
        more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
        raise UnreadableVoiceError(
            f"{len(found)} recording(s) cannot be decoded, and belong to someone not "
            "admitted to every set being built (or to no one known): a copy of them filed "
            "under another participant or put in the noise bank could not be found, so "
            f"nothing is built: {named}{more}. Re-export each file (or raise audio_limits, "
            "when it is over them) so that it decodes, or delete it (and its row, if it has "
            "one)"
        )


def _decode_error(path: Path, limits: AudioLimits) -> str:
    try:
        decode_audio(path, limits=limits)
    except AudioDecodeError as exc:
        return str(exc).removeprefix(f"{path}: ")
    return "it decodes now: run the command again"


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
    cleared: Set[str] = frozenset(),
) -> None:
    """NoiseBankVoiceError when a file of `bank` holds the audio of any of `contributions`
    (for `variants add`, which mixes bank files into new clips); UnreadableVoiceError
    when one of them does not decode and its owner is not in `cleared`."""
    prints: list[str | None] = [
        _file_fingerprint(o.path, o.sha256, cache, limits) for o in contributions
    ]
    where = [o.where for o in [*contributions, *bank]]
    needed = [not o.optional and o.owner not in cleared for o in contributions]
    _refuse_unreadable(
        prints, needed, where, lambda k: _decode_error(contributions[k].path, limits)
    )
    prints += [_bank_fingerprint(o, cache, bank_loader) for o in bank]
    # Contributions never pair with each other here: only the bank is checked.
    owners = [NOISE_BANK_OWNER + "contribution"] * len(contributions)
    owners += [NOISE_BANK_OWNER] * len(bank)
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

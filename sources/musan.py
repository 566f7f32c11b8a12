"""Reader of a MUSAN-layout noise bank: `musan/{noise,speech,music}/<source>/*.wav`.

The bank is read once into a list of `NoiseFile`s (headers only); audio is
decoded on demand by `NoiseBank.load`, which keeps recently used files in
memory because a build renders many clips from the same few files.

ANNOTATIONS (one per source folder in MUSAN) are MUSAN style: one line per
file, `<file stem> <fields...>`. MUSAN itself names no speakers (Kaldi recipes
treat every speech file as its own speaker), so a file's speaker is its stem
unless its line carries a `speaker=<id>` field: that is how a bank says that
two files share a voice, so babble never mixes a speaker with itself. A source
folder without one is read all the same (every file its own speaker) and listed in
`NoiseBank.unannotated`, so that `redvox sources check` can warn about it.

Bank files fail closed with a NoiseBankError that names the file: a header whose
rate lies outside MIN_SOURCE_RATE..MAX_SOURCE_RATE, more than MAX_CHANNELS channels
or more than MAX_NOISE_FILE_S of audio when the bank is read; NaN/inf samples when a
file is first loaded for a clip (the build stops rather than render from it: a file
is never silently dropped, which would change what every later draw picks).
ANNOTATIONS must be UTF-8.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from tqdm import tqdm

from redvox.schemas import SAMPLE_RATE
from redvox.schemas.config import MAX_SOURCE_RATE, MIN_SOURCE_RATE
from redvox.schemas.errors import UserError
from redvox.schemas.layout import sha256_file

SPEECH_CATEGORY = "speech"  # the category whose files are voices (babble's speakers)
CATEGORIES: tuple[str, ...] = ("noise", SPEECH_CATEGORY, "music")
ANNOTATIONS = "ANNOTATIONS"
EXPECTED_LAYOUT = (
    "expected MUSAN layout: <root>/{noise,speech,music}/<source>/*.wav, optionally an "
    "ANNOTATIONS file per source folder (root may also be a folder containing musan/)"
)
# Decoded audio kept in memory: a few MUSAN speech files of several minutes each.
CACHE_BYTES = 256 * 2**20
# Hashing a full MUSAN copy (11 GB) takes minutes; a small bank needs no progress bar.
PROGRESS_BYTES = 256 * 2**20
# MUSAN's longest files (music) last minutes; an hour is 230 MB once decoded to 16 kHz.
MAX_NOISE_FILE_S = 3600.0
MAX_CHANNELS = 8


class NoiseBankError(UserError, ValueError):
    """The noise bank cannot provide what a condition needs; the message names the bank path."""


@dataclass(frozen=True)
class NoiseFile:
    rel: str
    category: str
    source: str
    speaker: str
    duration_s: float


class _AudioCache:
    """Least-recently-used decoded files, bounded by their total size in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()

    def get(self, rel: str) -> np.ndarray | None:
        if rel in self._items:
            self._items.move_to_end(rel)
        return self._items.get(rel)

    def put(self, rel: str, audio: np.ndarray) -> None:
        self._items[rel] = audio
        while len(self._items) > 1 and sum(a.nbytes for a in self._items.values()) > self.max_bytes:
            self._items.popitem(last=False)


@dataclass(frozen=True)
class NoiseBank:
    root: Path
    files: tuple[NoiseFile, ...]
    annotations: tuple[str, ...] = ()
    # source folders (relative to root) that have no ANNOTATIONS file
    unannotated: tuple[str, ...] = ()
    _cache: _AudioCache = field(
        default_factory=lambda: _AudioCache(CACHE_BYTES), repr=False, compare=False
    )
    _fingerprint: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def of(self, category: str) -> list[NoiseFile]:
        if category not in CATEGORIES:
            raise ValueError(f"unknown noise bank category {category!r}; use one of {CATEGORIES}")
        return sorted((f for f in self.files if f.category == category), key=lambda f: f.rel)

    @cached_property
    def _rels(self) -> frozenset[str]:
        return frozenset(f.rel for f in self.files)

    def path(self, rel: str) -> Path:
        """Where a file of the bank lies; a path the bank does not hold is an error."""
        if rel not in self._rels:
            raise NoiseBankError(
                f"{self.root}: no file {rel!r} in this noise bank; the params were sampled "
                "from another bank (compare the build manifest's noise bank fingerprint)"
            )
        return self.root / rel

    def load(self, rel: str) -> np.ndarray:
        """The file as float32 mono at 16 kHz (read-only: it is shared through the cache)."""
        cached = self._cache.get(rel)
        if cached is not None:
            return cached
        audio = _decode(self.path(rel))
        audio.flags.writeable = False
        self._cache.put(rel, audio)
        return audio

    def excerpt(self, rel: str, offset_s: float, num_samples: int) -> np.ndarray:
        """`num_samples` from `offset_s` on, looping the file when it ends (never zero-padding)."""
        audio = self.load(rel)
        if audio.size == 0:
            raise NoiseBankError(f"{self.root / rel}: the file has no samples; remove it")
        start = round(offset_s * SAMPLE_RATE) % audio.size
        if start + num_samples <= audio.size:
            return audio[start : start + num_samples]
        return np.take(audio, (start + np.arange(num_samples)) % audio.size)

    def fingerprint(self) -> str:
        """sha256 over (rel, size, sha256) of every file the bank reads, ANNOTATIONS included."""
        if "sha256" not in self._fingerprint:
            rels = sorted([f.rel for f in self.files] + list(self.annotations))
            total = sum((self.root / rel).stat().st_size for rel in rels)
            digest = hashlib.sha256()
            bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=f"hashing noise bank {self.root}",
                disable=total < PROGRESS_BYTES,
            )
            with bar:
                for rel in rels:
                    path = self.root / rel
                    file_digest = sha256_file(path, on_block=lambda block: bar.update(len(block)))
                    digest.update(f"{rel}\x1f{path.stat().st_size}\x1f{file_digest}\n".encode())
            self._fingerprint["sha256"] = digest.hexdigest()
        return self._fingerprint["sha256"]


def read_noise_bank(root: Path) -> NoiseBank:
    """Read a MUSAN-layout bank's file list, durations and speakers (no audio is decoded)."""
    root = _bank_root(Path(root))
    files: list[NoiseFile] = []
    annotations: list[str] = []
    unannotated: list[str] = []
    for category in CATEGORIES:
        if not (root / category).is_dir():
            continue
        for path in sorted((root / category).rglob("*")):
            if path.is_file() and path.suffix.lower() == ".wav":
                _check_depth(root, path)
        for source_dir in sorted(p for p in (root / category).iterdir() if p.is_dir()):
            wavs = sorted(p for p in source_dir.iterdir() if p.suffix.lower() == ".wav")
            speakers = _read_annotations(source_dir, {p.stem for p in wavs})
            if (source_dir / ANNOTATIONS).is_file():
                annotations.append((source_dir / ANNOTATIONS).relative_to(root).as_posix())
            elif wavs:
                unannotated.append(source_dir.relative_to(root).as_posix())
            files += [_noise_file(root, p, category, speakers.get(p.stem, p.stem)) for p in wavs]
    if not files:
        raise NoiseBankError(f"{root}: no .wav files found; {EXPECTED_LAYOUT}")
    return NoiseBank(
        root=root,
        files=tuple(files),
        annotations=tuple(annotations),
        unannotated=tuple(unannotated),
    )


def _bank_root(root: Path) -> Path:
    if not root.is_dir():
        raise NoiseBankError(f"{root}: noise bank folder does not exist; {EXPECTED_LAYOUT}")
    has_categories = any((root / c).is_dir() for c in CATEGORIES)
    if not has_categories and (root / "musan").is_dir():
        return root / "musan"
    return root


def _check_depth(root: Path, path: Path) -> None:
    parts = path.relative_to(root).parts
    if len(parts) != 3:
        raise NoiseBankError(
            f"{path}: audio must sit directly in a source folder, <category>/<source>/<file>.wav; "
            f"move it there. {EXPECTED_LAYOUT}"
        )


def _read_annotations(source_dir: Path, stems: set[str]) -> dict[str, str]:
    """Speaker of each stem that its ANNOTATIONS line names with a `speaker=<id>` field."""
    path = source_dir / ANNOTATIONS
    if not path.is_file():
        return {}
    speakers: dict[str, str] = {}
    seen: set[str] = set()
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise NoiseBankError(
            f"{path}, line {line} (byte {err.start}): not valid UTF-8 ({err.reason}); "
            "re-save the file as UTF-8"
        ) from None
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        stem = fields[0].removesuffix(".wav")
        where = f"{path}, line {number}"
        if stem not in stems:
            raise NoiseBankError(
                f"{where}: no file {stem}.wav in {source_dir}; fix the line or add the file"
            )
        if stem in seen:
            raise NoiseBankError(f"{where}: {stem} is annotated twice; keep one line")
        seen.add(stem)
        tagged = [f.removeprefix("speaker=") for f in fields[1:] if f.startswith("speaker=")]
        if len(tagged) > 1 or tagged == [""]:
            raise NoiseBankError(f"{where}: field speaker= must appear once, with an id")
        if tagged:
            speakers[stem] = tagged[0]
    return speakers


def _noise_file(root: Path, path: Path, category: str, speaker: str) -> NoiseFile:
    if not path.is_file():
        raise NoiseBankError(
            f"{path}: not a file (a symbolic link loop, a link to nothing or a folder named "
            ".wav); replace or remove it"
        )
    try:
        info = sf.info(str(path))
    except RuntimeError as err:  # soundfile's errors derive from it
        raise NoiseBankError(
            f"{path}: not a readable WAV file ({err}); replace or remove it"
        ) from err
    if not MIN_SOURCE_RATE <= info.samplerate <= MAX_SOURCE_RATE:
        raise NoiseBankError(
            f"{path}: the header declares a sample rate of {info.samplerate} Hz, outside "
            f"{MIN_SOURCE_RATE}-{MAX_SOURCE_RATE} Hz; replace or remove the file"
        )
    if not 1 <= info.channels <= MAX_CHANNELS:
        raise NoiseBankError(
            f"{path}: {info.channels} channels (1 to {MAX_CHANNELS} allowed); "
            "replace or remove the file"
        )
    if info.frames / info.samplerate > MAX_NOISE_FILE_S:
        raise NoiseBankError(
            f"{path}: {info.frames / info.samplerate:.0f} s of audio, longer than the "
            f"{MAX_NOISE_FILE_S:.0f} s a noise file may last; cut it into shorter files"
        )
    return NoiseFile(
        rel=path.relative_to(root).as_posix(),
        category=category,
        source=path.parent.name,
        speaker=speaker,
        duration_s=info.frames / info.samplerate,
    )


def _decode(path: Path) -> np.ndarray:
    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except RuntimeError as err:  # soundfile's errors derive from it
        raise NoiseBankError(f"{path}: cannot decode ({err}); replace or remove it") from err
    mono = audio.mean(axis=1, dtype=np.float32)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE).astype(np.float32)
    # NaN/inf in the source stay non-finite through the mean and the resampler.
    if not np.isfinite(mono).all():
        raise NoiseBankError(
            f"{path}: non-finite samples (NaN/inf); the build will not render a clip from it: "
            "re-export the file as 16-bit PCM, or remove it from the bank"
        )
    return np.ascontiguousarray(mono)

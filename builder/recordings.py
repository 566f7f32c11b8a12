"""Decode and VAD-judge every recording, behind the build cache.

Only cache misses reach the workers; each worker decodes a batch and runs the
batched VAD on it, so both scale with --workers, while the parent alone writes
the cache.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import tempfile
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import NoneType
from typing import IO, Any, ClassVar

import numpy as np
from tqdm import tqdm

from redvox.schemas import SAMPLE_RATE
from redvox.schemas.config import AudioLimits
from redvox.schemas.fields import checked
from redvox.sources.audio import (
    DEFAULT_LIMITS,
    AudioDecodeError,
    audio_problems,
    decode_audio,
    flac_samples,
    write_flac,
)

from .cache import BuildCache, digest_of
from .fingerprint import FINGERPRINT_FORMAT, fingerprint
from .join import Recording, recording_quarantine
from .manifest import QuarantineRecord, Stage
from .rows import AudioRef
from .vad import BatchedSileroVad, VadResult, judge_recording
from .versions import VadParams

# Recordings one worker decodes and judges at once: a full batch for the batched
# VAD, and a bounded amount of audio in memory per worker.
BATCH = 64
VAD_BATCH = 64
# Bumped when the normalisation changes, so cached decodes are not reused. v2: the
# header and NaN/inf checks refuse files v1 accepted, facts carry the ownership
# fingerprint; the audio limits are in the key too. v3: the fingerprint is the landmark
# fingerprint, not the Haitsma-Kalker hash. The fingerprint's own format
# (builder/fingerprint.py FINGERPRINT_FORMAT) is in the key too.
DECODE_FORMAT = "decode-v3"
# A released FLAC larger than this waits on disk, not in memory, while its samples are
# fingerprinted and judged (a 1-hour recording: 67 MB of FLAC beside 230 MB of samples).
_SPILL_BYTES = 8 << 20
# Samples of a batch awaiting the VAD at most (30 min, 115 MB), beyond those of the
# recording that crosses it: a batch of short recordings is still judged in one go.
_HELD_SAMPLES = 1800 * SAMPLE_RATE


@dataclass(frozen=True)
class DecodeFact:
    """What decoding one recording gave, as the `decoded` cache stores it (`to_dict`):
    the released FLAC (`blob`), its duration, its defects and its ownership
    fingerprint; or, when it could not be decoded, only why (`error`)."""

    KIND: ClassVar[str] = "decoded"

    blob: str | None = None  # None until the parent stores the FLAC, and on error
    duration_s: float | None = None
    problems: tuple[str, ...] = ()
    fingerprint: str | None = None
    error: str | None = None

    @property
    def usable(self) -> bool:
        return self.error is None and not self.problems

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        fact: dict[str, Any] = {
            "duration_s": self.duration_s,
            "problems": list(self.problems),
            "fingerprint": self.fingerprint,
        }
        if self.blob is not None:
            fact["blob"] = self.blob
        return fact

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecodeFact:
        """A stored fact always has its blob: the parent stores the FLAC before the fact."""
        if "error" in d:
            return cls(error=checked(d, "error", str))
        return cls(
            blob=checked(d, "blob", str),
            duration_s=checked(d, "duration_s", float),
            problems=tuple(checked(d, "problems", list, each=str)),
            fingerprint=checked(d, "fingerprint", (str, NoneType)),
        )


@dataclass(frozen=True)
class SpeechOutcome:
    """A recording after decode and VAD: its audio when usable, else why not."""

    audio: AudioRef | None
    quarantine: QuarantineRecord | None
    fingerprint: str | None = None  # of the released samples, for the ownership check


@dataclass(frozen=True)
class _Batch:
    """Recordings one worker decodes and judges: `decoded[i]` is the cached decode fact
    (None: decode it), `judged[i]` whether its VAD verdict is cached."""

    paths: tuple[str, ...]
    decoded: tuple[DecodeFact | None, ...]
    judged: tuple[bool, ...]
    cache_root: str
    vad_params: VadParams
    limits: AudioLimits = DEFAULT_LIMITS


def _normalise_file(
    path: str, limits: AudioLimits = DEFAULT_LIMITS
) -> tuple[DecodeFact, IO[bytes] | None, np.ndarray | None]:
    """Decode one recording, encode it as released, report its defects: the fact, the
    released FLAC in a scratch file (read it with `_released_bytes`) and its samples.

    Everything downstream (VAD, mixing) uses the samples of the released FLAC, so
    a result is the same whether it was just computed or read back from the cache.
    """
    try:
        decoded = decode_audio(path, limits=limits)
    except AudioDecodeError as exc:
        return DecodeFact(error=str(exc).removeprefix(f"{path}: ")), None, None
    problems = tuple(audio_problems(decoded))
    # From the decoded samples, not the released 16-bit ones: a recording far too quiet
    # (refused as digital silence once quantised) still holds a voice to look for.
    print_text = fingerprint(decoded.samples).to_text()
    released = tempfile.SpooledTemporaryFile(_SPILL_BYTES)
    write_flac(decoded.samples, released)
    # The decoded samples go before the released ones are read back: a long recording
    # is never held twice (a 1-hour file: 230 MB each).
    del decoded
    released.seek(0)
    samples = flac_samples(released)
    fact = DecodeFact(
        duration_s=len(samples) / SAMPLE_RATE,
        problems=problems,
        fingerprint=print_text,
    )
    return fact, released, samples


def _released_bytes(released: IO[bytes] | None) -> bytes | None:
    """The bytes of a scratch FLAC from `_normalise_file`, which is then closed."""
    if released is None:
        return None
    with released:
        released.seek(0)
        return released.read()


@functools.cache
def _vad_model(params: VadParams) -> BatchedSileroVad:
    return BatchedSileroVad(params, batch_size=VAD_BATCH)


def _judge_batch(batch: _Batch) -> list[tuple[DecodeFact, bytes | None, VadResult | None]]:
    """Worker: (decode fact, new FLAC bytes, new VAD verdict) per recording of the batch.

    Decoding and VAD run in the same process so that both scale with --workers;
    the parent alone writes the cache. The samples awaiting the VAD are judged as soon
    as they reach _HELD_SAMPLES, so long recordings are not all held at once."""
    facts = list(batch.decoded)
    released: list[IO[bytes] | None] = [None] * len(facts)
    verdicts: list[VadResult | None] = [None] * len(facts)
    held: dict[int, np.ndarray] = {}
    cache = BuildCache(Path(batch.cache_root))

    def judge_held() -> None:
        if held:
            stamps = _vad_model(batch.vad_params).speech_timestamps(list(held.values()))
            for (i, audio), timestamps in zip(held.items(), stamps, strict=True):
                verdicts[i] = judge_recording(timestamps, len(audio), batch.vad_params)
            held.clear()

    for i, path in enumerate(batch.paths):
        if facts[i] is None:
            facts[i], released[i], audio = _normalise_file(path, batch.limits)
        elif facts[i].usable and not batch.judged[i]:
            audio = flac_samples(cache.blob(facts[i].blob))
        else:
            continue
        if facts[i].usable:
            held[i] = audio
            if sum(map(len, held.values())) >= _HELD_SAMPLES:
                judge_held()
        del audio
    judge_held()
    # The samples are gone before the FLAC bytes come back from their scratch files.
    flacs = [_released_bytes(file) for file in released]
    return list(zip(facts, flacs, verdicts, strict=True))


@contextmanager
def _workers(count: int) -> Iterator[Executor | None]:
    if count <= 1:
        yield None
        return
    # spawn: the parent may hold onnxruntime threads, which fork would copy half-alive.
    context = multiprocessing.get_context("spawn")
    with _safe_path(), ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        yield pool


@contextmanager
def _safe_path() -> Iterator[None]:
    """PYTHONSAFEPATH=1 (Python's -P) while the workers start: a spawned worker is a
    `python -c`, which would otherwise put the working directory first on sys.path, where
    a folder such as copy/ shadows the standard library."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = before


def _in_order(pool: Executor | None, batches: Iterator[_Batch], window: int) -> Iterator[list]:
    """Results of the batches in order, at most `window` in flight: memory stays flat."""
    if pool is None:
        for batch in batches:
            yield _judge_batch(batch)
        return
    in_flight: deque = deque()
    for batch in batches:
        in_flight.append(pool.submit(_judge_batch, batch))
        if len(in_flight) >= window:
            yield in_flight.popleft().result()
    while in_flight:
        yield in_flight.popleft().result()


def normalise_recordings(
    paths: Sequence[Path],
    file_shas: Sequence[str],
    recordings: Sequence[Recording],
    vad_params: VadParams,
    cache: BuildCache,
    workers: int = 1,
    progress: bool = True,
    *,
    limits: AudioLimits = DEFAULT_LIMITS,
) -> list[SpeechOutcome]:
    """Decode and judge every recording; only cache misses reach the workers.

    `limits` (the input config's `audio_limits`) bound what a recording may be; they
    are part of the decode cache key, so changing one re-decides every cached fact."""
    vad_json = vad_params.model_dump_json()
    limits_json = limits.model_dump_json()
    decode_keys = [
        digest_of(DECODE_FORMAT, FINGERPRINT_FORMAT, sha, limits_json) for sha in file_shas
    ]
    facts = [cache.get(DecodeFact, k) for k in decode_keys]
    verdicts = [
        cache.get(VadResult, digest_of("vad", f.blob, vad_json)) if f and f.usable else None
        for f in facts
    ]
    todo = [i for i, f in enumerate(facts) if f is None or (f.usable and verdicts[i] is None)]
    spans = [todo[s : s + BATCH] for s in range(0, len(todo), BATCH)]
    batches = (
        _Batch(
            paths=tuple(str(paths[i]) for i in span),
            decoded=tuple(facts[i] for i in span),
            judged=tuple(verdicts[i] is not None for i in span),
            cache_root=str(cache.root),
            vad_params=vad_params,
            limits=limits,
        )
        for span in spans
    )
    bar = tqdm(total=len(todo), desc="decode + VAD", unit="rec", disable=not progress or not todo)
    # No pool at all when everything is cached: starting workers costs seconds.
    with _workers(workers if todo else 1) as pool, bar:
        for span, results in zip(spans, _in_order(pool, batches, 2 * workers), strict=True):
            for i, (fact, flac, verdict) in zip(span, results, strict=True):
                if flac is not None:
                    fact = replace(fact, blob=cache.put_blob(flac))
                if facts[i] is None:
                    facts[i] = fact
                    cache.put(decode_keys[i], fact)
                if verdict is not None:
                    verdicts[i] = verdict
                    cache.put(digest_of("vad", fact.blob, vad_json), verdict)
            bar.update(len(span))
    return [_outcome(r, f, v) for r, f, v in zip(recordings, facts, verdicts, strict=True)]


def _outcome(rec: Recording, fact: DecodeFact, verdict: VadResult | None) -> SpeechOutcome:
    # A refused recording keeps its fingerprint when it decoded (clipped, too little
    # speech): it is released nowhere, but a copy of it filed under another participant
    # must still be found (builder/ownership.py).
    def refused(stage: Stage, reason: str) -> SpeechOutcome:
        return SpeechOutcome(None, recording_quarantine(rec, stage, reason), fact.fingerprint)

    if fact.error is not None:
        return refused("decode", fact.error)
    if fact.problems:
        return refused("decode", "; ".join(fact.problems))
    if not verdict.valid:
        return refused("vad", verdict.reason)
    return SpeechOutcome(AudioRef(fact.blob, "", fact.duration_s), None, fact.fingerprint)

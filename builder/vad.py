"""Silero VAD over many recordings at once, and the rule that quarantines a recording.

`silero_vad.get_speech_timestamps` runs its ONNX model one 512-sample window at a
time for one recording: about 190 `session.run` calls for a 6 s clip. Here B
recordings advance in lockstep, each with its own LSTM state and 64-sample context
row, so a batch costs the same number of calls as its longest recording. The
per-window probabilities are then turned into segments by `timestamps_from_probabilities`,
the rule of silero's `get_speech_timestamps_from_probs` (the second half of
`get_speech_timestamps`) for the settings `VadParams` allows, so the timestamps are the
reference ones (tests/test_vad.py checks they are equal, on the real model's
probabilities and on generated ones).

Nothing here imports torch: silero's package imports it (about 195 MB of resident
memory per process), while the model is an ONNX file onnxruntime runs, found without
importing the package. A build worker with the model loaded starts at about 150 MB.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import NoneType
from typing import Any, ClassVar

import numpy as np
import onnxruntime as ort
from tqdm import tqdm

from redvox.schemas import SAMPLE_RATE
from redvox.schemas.fields import checked

from .versions import VadParams

# What silero's OnnxWrapper feeds the 16 kHz model: 512 new samples after the last 64
# of the previous window (zeros before the first), an LSTM state of 2 x 128 per row.
WINDOW = 512
CONTEXT = 64
_STATE_SHAPE = (2, 128)
_RATE_INPUT = np.array(SAMPLE_RATE, dtype=np.int64)


def _model_path() -> str:
    """The ONNX file `load_silero_vad(onnx=True)` loads (opset 16), located without
    importing silero_vad (whose package imports torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("silero-vad is not installed; run `make venv`")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: silero-vad's ONNX model is missing; run `make venv`")
    return str(path)


def _as_recording(audio: np.ndarray, index: int) -> np.ndarray:
    samples = np.asarray(audio, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(
            f"recording {index}: VAD takes mono 16 kHz samples (1-D), got shape {samples.shape}"
        )
    return samples


class BatchedSileroVad:
    """Silero VAD (ONNX) run on `batch_size` recordings at once on one onnxruntime session."""

    def __init__(self, params: VadParams, *, batch_size: int = 64, num_threads: int = 1):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.params = params
        self.batch_size = batch_size
        options = ort.SessionOptions()
        # One thread: the model is tiny, so on 2 cores a second thread costs more in
        # synchronisation than it gains (measured 1.1-1.9x vs 3.6-5.1x over per-file).
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            _model_path(), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def speech_timestamps(self, recordings: Sequence[np.ndarray]) -> list[list[dict[str, int]]]:
        """Per recording, the {"start", "end"} sample spans `get_speech_timestamps` returns."""
        probabilities = self.speech_probabilities(recordings)
        return [
            timestamps_from_probabilities(probs, len(audio), self.params)
            for probs, audio in zip(probabilities, recordings, strict=True)
        ]

    def speech_probabilities(self, recordings: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per recording, the float32 speech probability of each 512-sample window."""
        audio = [_as_recording(r, i) for i, r in enumerate(recordings)]
        # Longest first: within a batch the rows still running are always a prefix.
        order = sorted(range(len(audio)), key=lambda i: len(audio[i]), reverse=True)
        probabilities: list[np.ndarray] = [np.zeros(0, np.float32)] * len(audio)
        with tqdm(
            total=len(audio), desc="Silero VAD", unit="rec", disable=len(audio) <= self.batch_size
        ) as bar:
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                for i, probs in zip(batch, self._run_batch([audio[i] for i in batch]), strict=True):
                    probabilities[i] = probs
                bar.update(len(batch))
        return probabilities

    def _run_batch(self, batch: list[np.ndarray]) -> list[np.ndarray]:
        """Window probabilities of recordings sorted longest first, run in lockstep."""
        n_windows = [-(-len(audio) // WINDOW) for audio in batch]
        longest = n_windows[0] if batch else 0
        probs = np.zeros((len(batch), longest), dtype=np.float32)
        state = np.zeros((_STATE_SHAPE[0], len(batch), _STATE_SHAPE[1]), dtype=np.float32)
        window = np.zeros((len(batch), CONTEXT + WINDOW), dtype=np.float32)
        for w in range(longest):
            active = sum(n > w for n in n_windows)
            # Each row: the 64 samples before the window (zeros before the first), then
            # 512 new ones (zeros past the end). Cut from the audio itself, window by
            # window, so a long recording is never copied whole.
            window[:active] = 0.0
            start = w * WINDOW
            for row, audio in zip(window[:active], batch[:active], strict=True):
                before = audio[max(start - CONTEXT, 0) : start]
                row[CONTEXT - len(before) : CONTEXT] = before
                new = audio[start : start + WINDOW]
                row[CONTEXT : CONTEXT + len(new)] = new
            out, state = self._session.run(
                None,
                {
                    "input": window[:active],
                    "state": np.ascontiguousarray(state[:, :active]),
                    "sr": _RATE_INPUT,
                },
            )
            probs[:active, w] = out[:, 0]
        return [probs[i, :n] for i, n in enumerate(n_windows)]


def timestamps_from_probabilities(
    probabilities: np.ndarray, n_samples: int, params: VadParams
) -> list[dict[str, int]]:
    """The {"start", "end"} sample spans silero's `get_speech_timestamps_from_probs` gives
    for these window probabilities with `params` (no maximum segment length: VadParams
    has none, so silero's max-speech cut never applies).

    A segment opens at a window at or above the threshold; while open, a window below
    the lower threshold (0.15 under it, at least 0.01) marks where silence began, a
    window back at the threshold forgets that mark, and once the silence reaches the
    minimum silence the segment closes at its mark (kept when longer than the minimum
    speech). Kept segments are then padded: a gap shorter than two pads is split
    between its neighbours."""
    threshold = params.threshold
    lower = max(threshold - 0.15, 0.01)
    min_speech = SAMPLE_RATE * params.min_speech_duration_ms / 1000
    min_silence = SAMPLE_RATE * params.min_silence_duration_ms / 1000
    pad = SAMPLE_RATE * params.speech_pad_ms / 1000
    spans: list[list[int]] = []
    start: int | None = None  # the open segment's first sample
    silent_from = 0  # where the open segment's silence began; 0: no silence
    for i, p in enumerate(probabilities.tolist()):
        at = WINDOW * i
        if p >= threshold:
            silent_from = 0
            if start is None:
                start = at
                continue
        # Not elif: below 0.01 the lower threshold can exceed the threshold itself.
        if start is not None and p < lower:
            silent_from = silent_from or at
            if at - silent_from >= min_silence:
                if silent_from - start > min_speech:
                    spans.append([start, silent_from])
                start, silent_from = None, 0
    if start is not None and n_samples - start > min_speech:
        spans.append([start, n_samples])
    for i, span in enumerate(spans):
        if i == 0:
            span[0] = int(max(0, span[0] - pad))
        if i == len(spans) - 1:
            span[1] = int(min(n_samples, span[1] + pad))
            continue
        after = spans[i + 1]
        gap = after[0] - span[1]
        if gap < 2 * pad:
            span[1] += int(gap // 2)
            after[0] = int(max(0, after[0] - gap // 2))
        else:
            span[1] = int(min(n_samples, span[1] + pad))
            after[0] = int(max(0, after[0] - pad))
    return [{"start": s, "end": e} for s, e in spans]


@dataclass(frozen=True)
class VadResult:
    """The VAD verdict on one recording, as the `vad` cache stores it (`to_dict`)."""

    KIND: ClassVar[str] = "vad"

    segments: tuple[tuple[float, float], ...]  # (start, end) in seconds
    speech_s: float
    speech_ratio: float  # speech_s / recording duration
    valid: bool
    reason: str | None  # why the recording is quarantined; None when valid

    def to_dict(self) -> dict[str, Any]:
        return {
            "segments": [list(segment) for segment in self.segments],
            "speech_s": self.speech_s,
            "speech_ratio": self.speech_ratio,
            "valid": self.valid,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VadResult:
        segments = checked(d, "segments", list, each=list)
        return cls(
            segments=tuple((float(start), float(end)) for start, end in segments),
            speech_s=checked(d, "speech_s", float),
            speech_ratio=checked(d, "speech_ratio", float),
            valid=checked(d, "valid", bool),
            reason=checked(d, "reason", (str, NoneType)),
        )


def judge_recording(
    timestamps: list[dict[str, int]],
    n_samples: int,
    params: VadParams,
    sample_rate: int = SAMPLE_RATE,
) -> VadResult:
    """Seconds of speech in a recording and whether it is enough to keep it."""
    segments = tuple((t["start"] / sample_rate, t["end"] / sample_rate) for t in timestamps)
    speech_s = sum(t["end"] - t["start"] for t in timestamps) / sample_rate
    duration_s = n_samples / sample_rate
    ratio = speech_s / duration_s if n_samples else 0.0
    if not timestamps:
        reason = "no speech detected"
    elif speech_s < params.min_speech_s:
        reason = f"too little speech: {speech_s:.2f} s < {params.min_speech_s:.2f} s"
    elif ratio < params.min_speech_ratio:
        reason = (
            f"too little speech for its length: {speech_s:.2f} s of {duration_s:.2f} s "
            f"({ratio:.0%} < {params.min_speech_ratio:.0%})"
        )
    else:
        reason = None
    return VadResult(segments, speech_s, ratio, reason is None, reason)

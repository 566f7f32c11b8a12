"""Silero VAD over many recordings at once, and the rule that quarantines a recording.

`silero_vad.get_speech_timestamps` runs its ONNX model one 512-sample window at a
time for one recording: about 190 `session.run` calls for a 6 s clip. Here B
recordings advance in lockstep, each with its own LSTM state and 64-sample context
row, so a batch costs the same number of calls as its longest recording. The
per-window probabilities are then turned into segments by silero's own
`get_speech_timestamps_from_probs`, the second half of `get_speech_timestamps`, so
the timestamps are the reference ones (tests/test_vad.py checks they are equal).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from types import ModuleType, NoneType
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


@functools.cache
def _silero() -> ModuleType:
    """silero_vad, imported once; its import pins torch to one thread, undone here."""
    import torch

    threads = torch.get_num_threads()
    import silero_vad

    torch.set_num_threads(threads)
    return silero_vad


def _model_path() -> str:
    """The ONNX file `load_silero_vad(onnx=True)` loads (opset 16)."""
    _silero()
    return str(resources.files("silero_vad.data").joinpath("silero_vad.onnx"))


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
    """Silero's own segment logic (thresholds, min speech/silence, padding) on window probs."""
    return _silero().get_speech_timestamps_from_probs(
        probabilities.tolist(),
        sampling_rate=SAMPLE_RATE,
        threshold=params.threshold,
        min_speech_duration_ms=params.min_speech_duration_ms,
        min_silence_duration_ms=params.min_silence_duration_ms,
        speech_pad_ms=params.speech_pad_ms,
        audio_length_samples=n_samples,
    )


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

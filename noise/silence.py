"""Kind `silence`: digital zeros, the control condition of the text requests."""

from __future__ import annotations

import dataclasses

import numpy as np

from redvox.schemas import NoiseCondition
from redvox.sources.musan import NoiseBank

from .kind import ClipParams
from .levels import num_samples
from .seeding import checked_ranges

KIND = "silence"
MIXES_SPEECH = False
BOUNDS: dict = {}  # nothing is drawn


@dataclasses.dataclass(frozen=True, kw_only=True)
class SilenceParams(ClipParams, kind=KIND):
    """Nothing is drawn: the length and the rate are all there is."""


PARAMS = SilenceParams


def check_condition(condition: NoiseCondition) -> None:
    checked_ranges(condition, BOUNDS)


def sample_params(
    rng: np.random.Generator,
    condition: NoiseCondition,
    bank: NoiseBank,
    *,
    duration_s: float | None = None,
) -> SilenceParams:
    """Nothing is drawn: silence has no parameters but its length."""
    check_condition(condition)
    return SilenceParams(duration_s=condition.duration_s)


def render(
    params: SilenceParams, bank: NoiseBank, *, speech: np.ndarray | None = None
) -> np.ndarray:
    return np.zeros(num_samples(params.duration_s), dtype=np.float32)

"""Kind `silence`: digital zeros, the control condition of the text requests."""

from __future__ import annotations

import numpy as np

from redvox.schemas import SAMPLE_RATE, NoiseCondition
from redvox.sources.musan import NoiseBank

from .levels import num_samples
from .seeding import check_param_keys

KIND = "silence"
MIXES_SPEECH = False


def check_condition(condition: NoiseCondition) -> None:
    check_param_keys(condition, set())


def sample_params(
    rng: np.random.Generator,
    condition: NoiseCondition,
    bank: NoiseBank,
    *,
    duration_s: float | None = None,
) -> dict:
    """Nothing is drawn: silence has no parameters but its length."""
    check_condition(condition)
    return {"kind": KIND, "duration_s": condition.duration_s, "sample_rate": SAMPLE_RATE}


def render(params: dict, bank: NoiseBank, *, speech: np.ndarray | None = None) -> np.ndarray:
    return np.zeros(num_samples(params["duration_s"]), dtype=np.float32)

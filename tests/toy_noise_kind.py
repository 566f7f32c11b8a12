"""A toy noise kind for tests: a constant tone level, nothing drawn but its length.

It implements noise/kind.py NoiseKindModule and nothing else: registering it
(`redvox.noise.register_kind`) is all the builder needs to render its clips.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from redvox.noise.kind import ClipParams
from redvox.noise.levels import num_samples
from redvox.noise.seeding import check_param_keys
from redvox.schemas import SAMPLE_RATE

KIND = "toy_hum"
MIXES_SPEECH = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyParams(ClipParams, kind=KIND):
    level: float


PARAMS = ToyParams


def check_condition(condition) -> None:
    check_param_keys(condition, set())


def sample_params(rng, condition, bank, *, duration_s=None) -> ToyParams:
    check_condition(condition)
    return ToyParams(duration_s=condition.duration_s, level=round(float(rng.uniform(0.01, 0.1)), 6))


def render(params: ToyParams, bank, *, speech=None) -> np.ndarray:
    t = np.arange(num_samples(params.duration_s)) / SAMPLE_RATE
    return (params.level * np.sin(2 * np.pi * 50 * t)).astype(np.float32)

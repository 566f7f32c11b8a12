"""A toy noise kind for tests: a 50 Hz hum at a drawn absolute level.

It implements noise/kind.py NoiseKindModule and nothing else: registering it
(`redvox.noise.register_kind`) is all the builder needs to render its clips, and
all the kind tests of tests/test_noise_contract.py need to cover it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from redvox.noise.kind import ClipParams
from redvox.noise.levels import LEVEL_DBFS, num_samples, scale_to_dbfs
from redvox.noise.seeding import checked_ranges, draw_db
from redvox.schemas import SAMPLE_RATE

KIND = "toy_hum"
MIXES_SPEECH = False
BOUNDS = {"level_dbfs": LEVEL_DBFS}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyParams(ClipParams, kind=KIND):
    level_dbfs: float


PARAMS = ToyParams


def check_condition(condition):
    return checked_ranges(condition, BOUNDS)


def sample_params(rng, condition, bank, *, duration_s=None) -> ToyParams:
    (low, high) = check_condition(condition)["level_dbfs"]
    return ToyParams(duration_s=condition.duration_s, level_dbfs=draw_db(rng, low, high))


def render(params: ToyParams, bank, *, speech=None) -> np.ndarray:
    t = np.arange(num_samples(params.duration_s)) / SAMPLE_RATE
    hum = np.sin(2 * np.pi * 50 * t)
    return scale_to_dbfs(hum, params.level_dbfs).astype(np.float32)

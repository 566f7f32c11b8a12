"""Kind `ambient`: one excerpt of a MUSAN noise file at an absolute RMS level.

The level is absolute (dBFS), not an SNR: the clip accompanies a typed
request, so there is no speech to be relative to.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from redvox.schemas import NoiseCondition
from redvox.sources.musan import NoiseBank, NoiseBankError

from .excerpt import ExcerptParams, sample_excerpt
from .levels import LEVEL_DBFS, clip_to_full_scale, is_silent, num_samples, scale_to_dbfs
from .seeding import checked_ranges

KIND = "ambient"
MIXES_SPEECH = False
BOUNDS = {"level_dbfs": LEVEL_DBFS}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AmbientParams(ExcerptParams, kind=KIND):
    level_dbfs: float  # absolute RMS level of the clip: there is no speech to be relative to


PARAMS = AmbientParams


def check_condition(condition: NoiseCondition) -> dict[str, tuple[float, float]]:
    return checked_ranges(condition, BOUNDS)


def sample_params(
    rng: np.random.Generator,
    condition: NoiseCondition,
    bank: NoiseBank,
    *,
    duration_s: float | None = None,
) -> AmbientParams:
    """Draws, in this order: the file, the offset, the level."""
    return sample_excerpt(
        AmbientParams, rng, bank, condition.duration_s, check_condition(condition)
    )


def render(
    params: AmbientParams, bank: NoiseBank, *, speech: np.ndarray | None = None
) -> np.ndarray:
    excerpt = bank.excerpt(params.file, params.offset_s, num_samples(params.duration_s))
    if is_silent(excerpt):
        raise NoiseBankError(
            f"{bank.root / params.file}: digital silence from {params.offset_s} s, "
            "nothing to scale to a level; remove the file from the bank"
        )
    return clip_to_full_scale(scale_to_dbfs(excerpt, params.level_dbfs))

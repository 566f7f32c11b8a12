"""Params of the kinds that take one excerpt of a MUSAN noise file (ambient,
speech_ambient): which file, from where, and one dB value drawn from a range."""

from __future__ import annotations

import dataclasses

import numpy as np

from redvox.sources.musan import NoiseBank

from .kind import ClipParams
from .seeding import draw_db, draw_offset, usable_files


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExcerptParams(ClipParams):
    file: str  # relative to the bank's root
    offset_s: float


def sample_excerpt(
    params: type[ExcerptParams],
    rng: np.random.Generator,
    bank: NoiseBank,
    duration_s: float,
    ranges: dict[str, tuple[float, float]],
) -> ExcerptParams:
    """The params of one excerpt of `duration_s` of a MUSAN noise file. Draws, in this
    order: the file, the offset, then a dB value per range (rounded by draw_db)."""
    files = usable_files(bank, "noise")
    chosen = files[rng.integers(len(files))]
    offset_s = draw_offset(rng, chosen.duration_s, duration_s)
    levels = {key: draw_db(rng, low, high) for key, (low, high) in ranges.items()}
    return params(duration_s=duration_s, file=chosen.rel, offset_s=offset_s, **levels)

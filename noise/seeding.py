"""Where every random draw of a condition comes from, and the ranges it draws from.

A generator is derived from (version seed, entry key, condition name) alone, so
a clip does not depend on the order in which entries are built, on how many
other conditions exist, or on any global RNG state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from redvox.schemas import NoiseCondition
from redvox.schemas.errors import UserError
from redvox.schemas.layout import keyed_hash
from redvox.sources.musan import NoiseBank, NoiseBankError, NoiseFile

# entry_key of conditions whose rows all share one clip.
SHARED_KEY = "__shared__"
# Looping a shorter snippet turns noise or speech into an audible periodic buzz.
MIN_SOURCE_S = 1.0


@dataclass(frozen=True)
class Bound:
    """The physical bounds of one condition parameter, inclusive. Each kind declares its
    own (`BOUNDS` in its module, e.g. babble's speakers [1, 16]): outside them a range is a
    typo or a unit mistake, not a condition (an SNR of 1e308 overflows, -400 dBFS renders
    digital silence, 100 speakers are no longer babble)."""

    low: float
    high: float
    unit: str
    integer: bool = False


class ConditionError(UserError, ValueError):
    """A condition whose params cannot be drawn from; the message names it and the field."""


def rng_for(seed: int, entry_key: str, condition: str) -> np.random.Generator:
    digest = keyed_hash(seed, entry_key, condition)
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "big")))


def param_range(condition: NoiseCondition, key: str, bound: Bound) -> tuple[float, float]:
    """`condition.params[key]` as a validated `(min, max)` pair within BOUND."""
    where = f"condition {condition.name!r} ({condition.kind}), params.{key}"
    lowest, highest, unit, integer = bound.low, bound.high, bound.unit, bound.integer
    allowed = f"{key} must lie within [{lowest}, {highest}] {unit}"
    if key not in condition.params:
        raise ConditionError(f"{where}: missing; give a [min, max] range")
    value = condition.params[key]
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ConditionError(f"{where}: {value!r} is not a [min, max] range")
    low, high = value
    kinds = (int,) if integer else (int, float)
    if not all(isinstance(v, kinds) and not isinstance(v, bool) for v in value):
        raise ConditionError(
            f"{where}: {value!r} must hold two {'integers' if integer else 'numbers'}"
        )
    # ints are finite (and math.isfinite would overflow on a 400-digit one)
    if not all(isinstance(v, int) or math.isfinite(v) for v in value):
        raise ConditionError(f"{where}: {value!r} must be finite; {allowed}")
    if low > high:
        raise ConditionError(f"{where}: min {low} is greater than max {high}; swap them")
    if low < lowest:
        raise ConditionError(f"{where}: min {low} must be >= {lowest}; {allowed}")
    if high > highest:
        raise ConditionError(f"{where}: max {high} is above {highest}; {allowed}")
    return low, high


def check_param_keys(condition: NoiseCondition, allowed: set[str]) -> None:
    """A misspelt key would otherwise be ignored and the kind's range silently missing."""
    unknown = sorted(set(condition.params) - allowed)
    if unknown:
        raise ConditionError(
            f"condition {condition.name!r} ({condition.kind}): unknown params {unknown}; "
            f"this kind takes {sorted(allowed) or 'no params'}"
        )


def draw_offset(rng: np.random.Generator, file_s: float, excerpt_s: float) -> float:
    """Start of an excerpt inside the file, floored to the millisecond; 0 when the file is
    shorter than the excerpt (it is looped from its start)."""
    return math.floor(rng.uniform(0.0, max(0.0, file_s - excerpt_s)) * 1000) / 1000


def draw_db(rng: np.random.Generator, low: float, high: float) -> float:
    """A level or SNR in dB, rounded to 0.01 dB so the recorded value is the one applied."""
    return round(float(rng.uniform(low, high)), 2)


def usable_files(bank: NoiseBank, category: str) -> list[NoiseFile]:
    """The files of a category long enough to loop into an excerpt, sorted by path."""
    files = bank.of(category)
    usable = [f for f in files if f.duration_s >= MIN_SOURCE_S]
    if not usable:
        longest = max((f.duration_s for f in files), default=0.0)
        raise NoiseBankError(
            f"{bank.root}: no {category} file of at least {MIN_SOURCE_S} s in {bank.root / category} "
            f"({len(files)} files, longest {longest:.2f} s); add {category} recordings to the bank"
        )
    return usable


def checked_ranges(
    condition: NoiseCondition, bounds: Mapping[str, Bound]
) -> dict[str, tuple[float, float]]:
    """The condition's params checked against a kind's BOUNDS: exactly those keys, each a
    [min, max] range within its bound; `{key: (min, max)}` in the order of BOUNDS."""
    check_param_keys(condition, set(bounds))
    return {key: param_range(condition, key, bound) for key, bound in bounds.items()}

"""Distracting-audio conditions: one module per kind, `sample_params` then `render`.

Sampling and rendering are separate steps, as in audiomentations, but the draws
come from a generator derived from (version seed, entry key, condition name) and
are all written into a JSON-serialisable params dict. That dict is stored on
every row the clip is used for, so a clip can be audited and rendered again
from its row alone (given the same noise bank).
"""

from __future__ import annotations

import json
from types import ModuleType

import numpy as np

from redvox.schemas import SAMPLE_RATE, NoiseCondition
from redvox.sources.musan import NoiseBank

from . import ambient, babble, silence, speech_ambient
from .seeding import PARAM_BOUNDS, SHARED_KEY, ConditionError, rng_for

KINDS: dict[str, ModuleType] = {
    module.KIND: module for module in (silence, ambient, babble, speech_ambient)
}


def kind_module(kind: str) -> ModuleType:
    if kind not in KINDS:
        raise ValueError(f"unknown noise condition kind {kind!r}; known kinds: {', '.join(KINDS)}")
    return KINDS[kind]


def check_condition(condition: NoiseCondition) -> None:
    """Validate a condition's params before a build starts drawing from them: known keys,
    [min, max] ranges of finite numbers within PARAM_BOUNDS; ConditionError otherwise."""
    kind_module(condition.kind).check_condition(condition)


def sample_params(
    condition: NoiseCondition,
    bank: NoiseBank,
    *,
    seed: int,
    entry_key: str,
    duration_s: float | None = None,
) -> dict:
    """The params of the clip of `condition` for `entry_key` (ignored for shared sampling)."""
    key = SHARED_KEY if condition.sampling == "shared" else entry_key
    rng = rng_for(seed, key, condition.name)
    return kind_module(condition.kind).sample_params(rng, condition, bank, duration_s=duration_s)


def render(params: dict, bank: NoiseBank, *, speech: np.ndarray | None = None) -> np.ndarray:
    """float32 mono 16 kHz audio of the clip; clip kinds ignore `speech`."""
    if params.get("sample_rate") != SAMPLE_RATE:
        raise ValueError(
            f"params are for {params.get('sample_rate')!r} Hz; this builder renders {SAMPLE_RATE} Hz"
        )
    return kind_module(params.get("kind")).render(params, bank, speech=speech)


def params_json(params: dict) -> str:
    """Canonical JSON: equal params give equal strings, hence equal clip-cache keys."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), allow_nan=False)


__all__ = [
    "KINDS",
    "PARAM_BOUNDS",
    "SHARED_KEY",
    "ConditionError",
    "check_condition",
    "kind_module",
    "params_json",
    "render",
    "rng_for",
    "sample_params",
]

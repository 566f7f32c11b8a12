"""Distracting-audio conditions: one module per kind, `sample_params` then `render`.

Sampling and rendering are separate steps, as in audiomentations, but the draws
come from a generator derived from (version seed, entry key, condition name) and
are all written into the kind's params record (noise/kind.py ClipParams). Its
JSON is stored on every row the clip is used for, so a clip can be audited and
rendered again from its row alone (`params_from_json`, then `render`, given the
same noise bank).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Mapping
from typing import Any

import numpy as np

from redvox.schemas import SAMPLE_RATE, NoiseCondition
from redvox.sources.musan import NoiseBank

from .kind import ClipParams, NoiseKindModule
from .seeding import SHARED_KEY, Bound, ConditionError, rng_for

KINDS: dict[str, NoiseKindModule] = {}


def register_kind(module: NoiseKindModule) -> NoiseKindModule:
    """Add a kind module (see noise/kind.py) to the registry under its KIND."""
    if (
        not isinstance(module, NoiseKindModule)
        or not isinstance(module.MIXES_SPEECH, bool)
        or not isinstance(module.BOUNDS, Mapping)
        or not all(isinstance(k, str) and isinstance(b, Bound) for k, b in module.BOUNDS.items())
        or not (isinstance(module.PARAMS, type) and issubclass(module.PARAMS, ClipParams))
        or module.PARAMS.KIND != module.KIND
    ):
        raise TypeError(f"{module!r} does not implement noise/kind.py NoiseKindModule")
    if module.KIND in KINDS and KINDS[module.KIND] is not module:
        raise ValueError(f"noise kind {module.KIND!r} is already registered")
    KINDS[module.KIND] = module
    return module


def _register_package_kinds() -> None:
    """Register every module of this package that declares a `KIND`: a new kind is one new
    file here (the helpers kind.py, levels.py and seeding.py declare none)."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "KIND"):
            register_kind(module)


_register_package_kinds()


def kind_module(kind: str) -> NoiseKindModule:
    """The module of a registered kind; ConditionError naming the known ones otherwise
    (a condition's `kind` is checked here, not by schemas, which cannot import noise)."""
    if kind not in KINDS:
        raise ConditionError(
            f"unknown noise condition kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}"
        )
    return KINDS[kind]


def mixes_speech(condition: NoiseCondition) -> bool:
    """Whether the condition's clips are the recording itself mixed with noise (speech rows,
    one clip per row); otherwise a clip of `duration_s` goes with a text request."""
    return kind_module(condition.kind).MIXES_SPEECH


def renders_one_clip(condition: NoiseCondition) -> bool:
    """Whether every row of the condition points at the same clip."""
    return condition.is_shared and not mixes_speech(condition)


def check_condition(condition: NoiseCondition) -> None:
    """Validate a condition's params before a build starts drawing from them: known keys,
    [min, max] ranges of finite numbers within the kind's BOUNDS; ConditionError otherwise."""
    kind_module(condition.kind).check_condition(condition)


def sample_params(
    condition: NoiseCondition,
    bank: NoiseBank,
    *,
    seed: int,
    entry_key: str,
    duration_s: float | None = None,
) -> ClipParams:
    """The params of the clip of `condition` for `entry_key` (ignored for shared sampling)."""
    key = SHARED_KEY if condition.is_shared else entry_key
    rng = rng_for(seed, key, condition.name)
    return kind_module(condition.kind).sample_params(rng, condition, bank, duration_s=duration_s)


def render(params: ClipParams, bank: NoiseBank, *, speech: np.ndarray | None = None) -> np.ndarray:
    """float32 mono 16 kHz audio of the clip; clip kinds ignore `speech`."""
    if params.sample_rate != SAMPLE_RATE:
        raise ConditionError(
            f"params are for {params.sample_rate!r} Hz; this builder renders {SAMPLE_RATE} Hz"
        )
    return kind_module(params.KIND).render(params, bank, speech=speech)


def params_from_dict(data: Mapping[str, Any]) -> ClipParams:
    """The params record of a row's `condition_params` (parsed), by its `kind`."""
    return kind_module(data.get("kind")).PARAMS.from_dict(data)


def params_from_json(text: str) -> ClipParams:
    """The params record of a row's `condition_params` JSON."""
    try:
        data = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ConditionError(f"condition_params is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConditionError(f"condition_params is not a JSON object: {text!r}")
    return params_from_dict(data)


__all__ = [
    "KINDS",
    "Bound",
    "ClipParams",
    "SHARED_KEY",
    "ConditionError",
    "NoiseKindModule",
    "check_condition",
    "kind_module",
    "mixes_speech",
    "params_from_dict",
    "params_from_json",
    "register_kind",
    "render",
    "renders_one_clip",
    "rng_for",
    "sample_params",
]

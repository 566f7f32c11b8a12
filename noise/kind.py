"""The contract every noise-kind module (silence.py, ambient.py, ...) implements.

A kind is a module, registered in `redvox.noise.KINDS` by its `KIND` name: every
module of this package that declares `KIND` is registered when `redvox.noise` is
imported, so adding a kind is adding its file (a kind defined elsewhere, e.g. a
test's, is added with `redvox.noise.register_kind`). The builder never branches
on a kind's name: it asks the registry whether the kind mixes the participant's
recording (`MIXES_SPEECH`) and otherwise only calls the three functions below,
through `redvox.noise`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np

from redvox.schemas import SAMPLE_RATE, NoiseCondition
from redvox.schemas.fields import checked
from redvox.sources.musan import NoiseBank

from .seeding import Bound, ConditionError


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClipParams:
    """Every draw of one clip: a kind subclasses it with its own fields (`PARAMS`).

    The dict form (`to_dict`, with `kind` added) is what the rows record in
    `condition_params` and, as canonical JSON (`to_json`), what keys the clip cache:
    a field's name and value are part of the release, so renaming one is a new
    version. `from_dict` reads it back exactly (a row's params re-render its clip).
    """

    KIND: ClassVar[str]
    duration_s: float
    sample_rate: int = SAMPLE_RATE

    def __init_subclass__(cls, *, kind: str | None = None, **kwargs: Any) -> None:
        """`class AmbientParams(ClipParams, kind="ambient")`: the kind its dict names."""
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.KIND = kind

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        """Canonical JSON: equal params give equal strings, hence equal clip-cache keys."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The params a `to_dict` wrote: this kind, exactly these fields (ConditionError
        naming what differs otherwise, e.g. params of another builder's version)."""
        if data.get("kind") != cls.KIND:
            raise ConditionError(f"params of kind {data.get('kind')!r}, not {cls.KIND!r}")
        return cls(**field_values(cls, {k: v for k, v in data.items() if k != "kind"}, cls.KIND))


def field_values(record: type, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`data` as the keyword arguments of the dataclass `record`: exactly its fields, its
    numbers finite numbers and its strings strings (fields of other types are the
    caller's to convert); ConditionError naming the field otherwise."""
    names = {field.name for field in dataclasses.fields(record)}
    missing, unknown = sorted(names - set(data)), sorted(set(data) - names)
    if missing or unknown:
        raise ConditionError(
            f"{where} params: missing {missing or 'nothing'}, unknown {unknown or 'none'}"
        )
    for name, hint in typing.get_type_hints(record).items():
        if name not in names or hint not in (float, int, str):
            continue
        try:
            value = checked(data, name, (int, float) if hint is float else hint)
            if hint is float and not math.isfinite(value):
                raise TypeError(f"{value} is not finite")
        except TypeError:
            raise ConditionError(
                f"{where} params: {name} is {data[name]!r}, not a {hint.__name__}"
            ) from None
    return {name: data[name] for name in names}


@runtime_checkable
class NoiseKindModule(Protocol):
    # The `kind` of the conditions it renders (NoiseCondition.kind).
    KIND: str
    # True: a clip is the recording itself mixed with noise (one per row, as long as the
    # recording, a speech row); False: a clip of `duration_s` sent with a text request.
    MIXES_SPEECH: bool
    # The record of one clip's draws (a ClipParams subclass whose KIND is the kind's).
    PARAMS: type[ClipParams]
    # The physical bounds of each `params` range the kind draws from, by key: the kind
    # owns them (seeding.checked_ranges checks a condition against them), and the tests
    # of every registered kind derive valid and invalid conditions from them.
    BOUNDS: Mapping[str, Bound]

    def check_condition(self, condition: NoiseCondition) -> None:
        """Raise ConditionError when the condition's params do not fit the kind."""

    def sample_params(
        self,
        rng: np.random.Generator,
        condition: NoiseCondition,
        bank: NoiseBank,
        *,
        duration_s: float | None = None,
    ) -> ClipParams:
        """Every draw of one clip, as the kind's PARAMS."""

    def render(
        self, params: ClipParams, bank: NoiseBank, *, speech: np.ndarray | None = None
    ) -> np.ndarray:
        """float32 mono audio of the clip the params describe."""

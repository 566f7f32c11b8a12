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

from typing import Protocol, runtime_checkable

import numpy as np

from redvox.schemas import NoiseCondition
from redvox.sources.musan import NoiseBank


@runtime_checkable
class NoiseKindModule(Protocol):
    # The `kind` of the conditions it renders (NoiseCondition.kind).
    KIND: str
    # True: a clip is the recording itself mixed with noise (one per row, as long as the
    # recording, a speech row); False: a clip of `duration_s` sent with a text request.
    MIXES_SPEECH: bool

    def check_condition(self, condition: NoiseCondition) -> None:
        """Raise ConditionError when the condition's params do not fit the kind."""

    def sample_params(
        self,
        rng: np.random.Generator,
        condition: NoiseCondition,
        bank: NoiseBank,
        *,
        duration_s: float | None = None,
    ) -> dict:
        """Every draw of one clip, JSON-serialisable, with `kind` and `sample_rate`."""

    def render(
        self, params: dict, bank: NoiseBank, *, speech: np.ndarray | None = None
    ) -> np.ndarray:
        """float32 mono audio of the clip the params describe."""

"""The text sources of a build (SHADES, M-ALERT, ...): one module per source, all
implementing `sources/texts/source.py`, registered here by `NAME`.

Everything that used to list the sources by hand asks this registry: the input config's
`texts` keys (`text_inputs`), what a build reads and hashes (`read_texts`,
`redvox.sources.inputs`), the contributions reader's item-id maps (`normalize_item_id`),
the selection's strata (`sources/selection.py`) and the card's source datasets and
licences (`release/hub/card.py`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from redvox.schemas import InputConfig, SourceItem
from redvox.schemas.config import ConfigError
from redvox.schemas.records import SOURCE_NAME

from ..problems import ReadResult
from .source import Stratum, TextSourceModule

T = TypeVar("T")

TEXTS: dict[str, TextSourceModule] = {}

_STRINGS = (
    "NAME", "INPUT", "TITLE", "CONTENT", "HUB_ID", "LICENSE", "TERMS", "GATE_TERMS", "AGREEMENT_TERMS",
)  # fmt: skip


def register_text_source(module: TextSourceModule) -> TextSourceModule:
    """Add a text-source module (see sources/texts/source.py) to the registry by NAME."""
    if (
        not isinstance(module, TextSourceModule)
        or not all(isinstance(getattr(module, name), str) for name in _STRINGS)
        or not (module.MET_BY is None or isinstance(module.MET_BY, str))
        or not isinstance(module.REQUIRED, bool)
        or not isinstance(module.POSITION, int)
        or not SOURCE_NAME.match(module.NAME)
    ):
        raise TypeError(f"{module!r} does not implement sources/texts/source.py TextSourceModule")
    for other in TEXTS.values():
        if other is not module and module.NAME == other.NAME:
            raise ValueError(f"text source {module.NAME!r} is already registered")
        if other is not module and module.INPUT == other.INPUT:
            raise ValueError(f"input key {module.INPUT!r} is already {other.NAME!r}'s")
    TEXTS[module.NAME] = module
    return module


def _register_package_sources() -> None:
    """Register every module of this package that declares a `NAME`: a new source is one
    new file here (the contract, source.py, declares none)."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "NAME"):
            register_text_source(module)


def text_sources() -> list[TextSourceModule]:
    """Every registered source, in the order the card and the tables list them."""
    return sorted(TEXTS.values(), key=lambda m: (m.POSITION, m.NAME))


_register_package_sources()


def text_source(name: str) -> TextSourceModule | None:
    """The registered source of that NAME (the item keys' prefix), None when unknown."""
    return TEXTS.get(name)


def input_names() -> tuple[str, ...]:
    """The input keys of every registered source, in order (`shades`, `malert`, ...)."""
    return tuple(m.INPUT for m in text_sources())


def normalize_item_id(source: str | None, raw: str | None) -> str | None:
    """A contribution's `item_id` as its source's reader writes it, so keys match; the
    cell as written when the source is unknown (the row is refused for that)."""
    module = TEXTS.get(source or "")
    return (module.normalize_id(raw) if module else None) or raw


@dataclass(frozen=True)
class TextInput:
    source: TextSourceModule
    path: Path


def text_inputs(config: InputConfig) -> list[TextInput]:
    """The config's text inputs, in registry order; ConfigError naming the config and the
    key for a name no source registers, or a required source left out."""
    by_input = {m.INPUT: m for m in text_sources()}
    known = ", ".join(by_input)
    for name in config.texts:
        if name not in by_input:
            raise ConfigError(
                f"{config.origin}: texts.{name}: no text source has this input key (known: "
                f"{known}); fix the name, or register the source's module in sources/texts/"
            )
    for module in by_input.values():
        if module.REQUIRED and module.INPUT not in config.texts:
            raise ConfigError(
                f"{config.origin}: texts.{module.INPUT}: missing; a build reads the "
                f"{module.TITLE} file, name it with `texts: {{{module.INPUT}: FILE}}` "
                f"(or `{module.INPUT}: FILE`)"
            )
    return [TextInput(m, config.texts[m.INPUT]) for m in text_sources() if m.INPUT in config.texts]


def config_sources(config: InputConfig) -> list[TextSourceModule]:
    """The sources the config names, in registry order."""
    return [text.source for text in text_inputs(config)]


def unobserved(name: str, read: Callable[[], ReadResult[T]]) -> ReadResult[T]:
    """The step that only runs `read` (no progress shown)."""
    return read()


def read_texts(
    config: InputConfig,
    languages: Sequence[str],
    step: Callable[[str, Callable[[], ReadResult]], ReadResult] = unobserved,
) -> list[tuple[TextInput, ReadResult[SourceItem]]]:
    """Every text input of the config read for `languages`, each with what was wrong;
    `step(input name, read)` runs each read (a progress bar's hook)."""
    return [
        (text, step(text.source.INPUT, lambda text=text: text.source.read(text.path, languages)))
        for text in text_inputs(config)
    ]


def strata(config: InputConfig) -> list[tuple[str, Stratum]]:
    """(source name, stratum) of every source the config names: the selection rule."""
    return [(m.NAME, s) for m in config_sources(config) for s in m.strata(config.items)]


__all__ = [
    "TEXTS", "Stratum", "TextInput", "TextSourceModule", "config_sources", "input_names",
    "normalize_item_id", "read_texts", "register_text_source", "strata", "text_inputs",
    "text_source", "text_sources", "unobserved",
]  # fmt: skip

"""Where the raw inputs of a build live: a YAML file of paths, relative to itself.

The demo corpus ships one (`sources/demo/config.yaml`); `RELEASE_CONFIG` or
`--config` points at a real collection.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from .errors import UserError


class ItemSelection(BaseModel):
    """Either an explicit list of item keys (how a published version pins its
    items) or a seeded stratified draw: `shades` SHADES items plus `per_group`
    items from each M-ALERT group."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    item_keys: tuple[str, ...] | None = Field(
        default=None, description="e.g. 'shades:7.1', 'm-alert:10330'"
    )
    item_keys_file: Path | None = Field(default=None, description="one item key per line")
    seed: int = 0
    shades: int = Field(default=181, ge=0)
    per_group: int = Field(default=70, ge=0)

    @model_validator(mode="after")
    def _one_list_at_most(self) -> ItemSelection:
        if self.item_keys is not None and self.item_keys_file is not None:
            raise ValueError("give item_keys or item_keys_file, not both")
        return self


# Sample rates a recording or noise file may declare; outside them the header is corrupt
# (a "1 Hz" WAV of 16 KB would resample to 128 M samples) or the audio is not speech.
MIN_SOURCE_RATE = 8_000
MAX_SOURCE_RATE = 384_000


class AudioLimits(BaseModel):
    """Bounds a contributed recording must respect before it is decoded at all, so that
    one bad file costs a quarantine line, not the memory or the time of a build.

    Checked from the file size and the header; decoding also stops as soon as a
    recording turns out longer than `max_duration_s`. The longest real take is under
    30 s, so the defaults leave ample room. `max_file_mb` is in 10^6 bytes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_duration_s: float = Field(default=120.0, gt=0, le=4 * 3600, allow_inf_nan=False)
    max_file_mb: float = Field(default=512.0, gt=0, le=16_384, allow_inf_nan=False)
    max_channels: int = Field(default=8, ge=1, le=64)


# The top-level keys the first configs name their text sources by (`shades: FILE`), each
# the input key of a registered text source: the same as `texts: {shades: FILE}`.
TEXT_ALIASES = ("shades", "malert")


def merge_text_aliases(raw: Mapping[str, Any], where: str = "input config") -> dict[str, Any]:
    """`raw` with the alias keys moved into `texts`; ConfigError when one source is given
    both ways (which of the two files is meant cannot be told)."""
    merged = dict(raw)
    texts = merged.get("texts")
    if not any(key in merged for key in TEXT_ALIASES) or not (
        texts is None or isinstance(texts, Mapping)
    ):
        return merged
    texts = dict(texts or {})
    for key in TEXT_ALIASES:
        if key not in merged:
            continue
        if key in texts:
            raise ConfigError(
                f"{where}: {key} is given twice, as `{key}:` and as `texts: {{{key}: ...}}`; "
                "keep one of the two"
            )
        texts[key] = merged.pop(key)
    merged["texts"] = texts
    return merged


class InputConfig(BaseModel):
    """Paths of every input of a build. Relative paths are resolved against the
    folder of the YAML file that declares them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    texts: dict[str, Path] = Field(
        min_length=1,
        description=(
            "text sources by input key (redvox.sources.texts): shades (SHADES CSV, released or "
            "raw layout), malert (M-ALERT parquet, CSV or JSONL), ...; `shades: FILE` and "
            "`malert: FILE` at the top level mean the same"
        ),
    )
    contributions: Path = Field(description="contributions manifest, CSV or JSONL")
    audio_root: Path = Field(
        description="folder the contributions' audio_file paths are relative to"
    )
    participants: Path = Field(description="participants registry CSV (private)")
    consent: Path = Field(description="consent registry CSV (private)")
    noise_bank: Path = Field(
        description="MUSAN-layout folder: musan/{noise,speech,music}/<source>/*.wav"
    )
    pseudonym_key_file: Path | None = Field(
        default=None, description="file holding the HMAC key for user_id; REDVOX_PSEUDONYM_KEY wins"
    )
    items: ItemSelection = Field(default_factory=ItemSelection)
    synthetic: bool = Field(default=False, description="true for the embedded demo corpus")
    withdrawal_contact: str | None = Field(
        default=None,
        description="private address (e-mail or postal) for withdrawals, named in the card; "
        "required to stage a release that is not the demo",
    )
    audio_limits: AudioLimits = Field(
        default_factory=AudioLimits, description="size, duration and channel bounds of a recording"
    )
    # The YAML file the config was loaded from, for messages (None: built in code).
    _origin: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _text_aliases(cls, raw: Any) -> Any:
        return merge_text_aliases(raw) if isinstance(raw, Mapping) else raw

    def __eq__(self, other: object) -> bool:
        # Where a config was loaded from is no part of it: equal inputs are equal configs.
        if not isinstance(other, InputConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # `texts` is a dict

    @property
    def origin(self) -> str:
        """How messages name this config: its file, or "the input config"."""
        return str(self._origin) if self._origin is not None else "the input config"

    @classmethod
    def load(cls, path: str | Path) -> InputConfig:
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: input config not found") from None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not a readable YAML file: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of input names to paths")
        try:
            config = cls.model_validate(merge_text_aliases(raw, str(path)))
        except ValidationError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        config = config.resolved(path.parent)
        config._origin = path
        return config

    def resolved(self, base: Path) -> InputConfig:
        """The same config with every relative path made absolute against `base`."""
        updates: dict[str, Any] = {
            "texts": {
                name: value if value.is_absolute() else _resolve(base / value, f"texts.{name}")
                for name, value in self.texts.items()
            }
        }
        for name in (
            "contributions",
            "audio_root",
            "participants",
            "consent",
            "noise_bank",
            "pseudonym_key_file",
        ):
            value = getattr(self, name)
            if value is not None and not value.is_absolute():
                updates[name] = _resolve(base / value, name)
        items = self.items
        if items.item_keys_file is not None and not items.item_keys_file.is_absolute():
            items = items.model_copy(
                update={"item_keys_file": _resolve(base / items.item_keys_file, "item_keys_file")}
            )
        return self.model_copy(update={**updates, "items": items})


def _resolve(path: Path, name: str) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: a symbolic link loop (Python < 3.13)
        raise ConfigError(
            f"{path}: {name} cannot be followed ({exc}); point it at the file or folder itself"
        ) from None


class ConfigError(UserError, ValueError):
    """An input config that cannot be used; the message names the file."""


DEMO_CONFIG = Path(__file__).resolve().parent.parent / "sources" / "demo" / "config.yaml"

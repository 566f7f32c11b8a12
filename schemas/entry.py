"""The released row, and the Hugging Face features derived from it.

Column names and meanings of the contract columns are a compatibility promise
(docs/ARCHITECTURE.md, "Release schema contract"); extras come after them and may grow in MINOR versions.
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

from .audio_cell import SAMPLE_RATE, AudioCell
from .records import Source
from .vocab import ATTACK_TYPE, AgeGroup, Gender, Lang, Modality, VulnerabilityType


class _AudioFeature:
    """Marks the field that becomes `datasets.Audio(sampling_rate=16000)`."""


class _Float32:
    """Marks a float stored as float32."""


class Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # --- contract columns, in the public release's order ---
    ID: int = Field(ge=0, description="dense integer, unique within a language config")
    audio: Annotated[AudioCell, _AudioFeature()] = Field(description="16 kHz mono audio")
    original_id: str = Field(description="SHADES index like '7.1' or M-ALERT id like '10330'")
    user_id: str = Field(pattern=r"^[0-9a-f]{32}$", description="keyed HMAC of the participant key")
    lang: Lang
    vulnerability_type: VulnerabilityType
    attack_type: Literal["non_adversarial"] = ATTACK_TYPE
    audio_type: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$",
        description="speech, silence, noise_a, noise_b or a newer condition",
    )
    modality: Modality = Field(
        description="speech: the request is spoken; text: typed, with a distracting clip"
    )
    user_text: str = Field(
        description="typed follow-up (speech rows) or harmful content + follow-up (text rows)"
    )
    transcript: str | None = Field(
        description=(
            "transcript of the recording (spoken rows); null for text rows, and for spoken "
            "rows without one"
        )
    )
    gender: Gender
    mother_tongue: str = Field(description="BCP-47 style tag, normalised")
    ethnicity: str | None
    age_group: AgeGroup

    # --- extras (documented in the card) ---
    entry_key: str = Field(
        description="lang/source:item/user_id/audio_type; stable across versions"
    )
    source: Source
    prompt_text: str = Field(description="the item text the participant was asked to speak")
    native_speaker: bool = Field(description="mother tongue is the row's language")
    duration_s: Annotated[float, _Float32()] = Field(ge=0, description="audio duration in seconds")
    condition_params: str | None = Field(
        description="JSON of the parameters that rendered the clip; null for the plain recordings (audio_type speech)"
    )
    builder_version: str = Field(
        description=(
            "dataset version that first built this row; a row carried unchanged into a "
            "later version keeps it"
        )
    )


CONTRACT_COLUMNS: tuple[str, ...] = (
    "ID", "audio", "original_id", "user_id", "lang", "vulnerability_type", "attack_type",
    "audio_type", "modality", "user_text", "transcript", "gender", "mother_tongue",
    "ethnicity", "age_group",
)  # fmt: skip
COLUMNS: tuple[str, ...] = tuple(Entry.model_fields)
EXTRA_COLUMNS: tuple[str, ...] = COLUMNS[len(CONTRACT_COLUMNS) :]
assert COLUMNS[: len(CONTRACT_COLUMNS)] == CONTRACT_COLUMNS, (
    "Entry must start with the contract columns"
)


def entry_key(lang: str, item_key: str, user_id: str, audio_type: str) -> str:
    """The id that joins results between versions: it never encodes the dense `ID`."""
    return f"{lang}/{item_key}/{user_id}/{audio_type}"


def _dtype(annotation: Any) -> str:
    """Arrow dtype name of a (possibly Optional / Literal) scalar annotation."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"cannot derive a feature from {annotation!r}")
        return _dtype(args[0])
    if origin is Literal:
        kinds = {type(a) for a in get_args(annotation)}
        if kinds != {str}:
            raise TypeError(f"only string Literals become features, got {annotation!r}")
        return "string"
    return {int: "int64", str: "string", bool: "bool", float: "float64"}[annotation]


def _feature_spec() -> dict[str, tuple[str, ...]]:
    spec: dict[str, tuple[str, ...]] = {}
    for name, field in Entry.model_fields.items():
        markers = field.metadata
        if any(isinstance(m, _AudioFeature) for m in markers):
            spec[name] = ("audio",)
        elif any(isinstance(m, _Float32) for m in markers):
            spec[name] = ("value", "float32")
        else:
            spec[name] = ("value", _dtype(field.annotation))
    return spec


@cache
def release_features():
    """The `datasets.Features` of every shard, derived from `Entry` and defined nowhere else."""
    import datasets  # heavy import, only where features are needed

    features = {}
    for name, spec in _feature_spec().items():
        if spec[0] == "audio":
            features[name] = datasets.Audio(sampling_rate=SAMPLE_RATE)
        else:
            features[name] = datasets.Value(spec[1])
    return datasets.Features(features)


def column_dtypes() -> dict[str, str]:
    """Column -> dtype name ('audio' for the audio column), without importing `datasets`."""
    return {
        name: spec[-1] if spec[0] == "value" else "audio" for name, spec in _feature_spec().items()
    }

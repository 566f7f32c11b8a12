"""The records every step passes around. Readers in `sources/` produce them,
the builder consumes them; nothing else defines these shapes."""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .vocab import (
    PUBLIC,
    SPEECH_AUDIO_TYPE,
    AgeGroup,
    DatasetSet,
    Gender,
    Lang,
    VulnerabilityType,
    normalize_age_group,
    normalize_gender,
    normalize_mother_tongue,
    screen_free_text,
)

# A text source's name (`shades`, `m-alert`, ...): the prefix of its item keys and the rows'
# `source`. Which names exist is the text-source registry's (`redvox.sources.texts`), which
# checks every name it reads against itself, since schemas cannot import sources: a new
# source is one module there, not an edit here too.
SOURCE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


def _source_name(value: str) -> str:
    if not SOURCE_NAME.match(value):
        raise ValueError(f"{value!r} is not a text source name (lower-case letters, digits, -)")
    return value


Source = Annotated[str, AfterValidator(_source_name)]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)


def item_key(source: str, item_id: str) -> str:
    """The key of a source item, unique across sources: `shades:7.1`, `m-alert:10330`."""
    return f"{source}:{item_id}"


class SourceItem(_Record):
    """One text item, parallel across the languages of the build that read it."""

    source: Source
    item_id: str = Field(
        min_length=1, description="SHADES index like '7.1' or M-ALERT id like '10330'"
    )
    vulnerability_type: VulnerabilityType
    text: dict[Lang, str] = Field(
        min_length=1, description="the item text in each language of the build (en, de, ...)"
    )
    source_category: str = Field(description="SHADES bias_type or ALERT micro category")

    @field_validator("text")
    @classmethod
    def _all_languages(cls, text: dict[str, str]) -> dict[str, str]:
        missing = [lang for lang, value in text.items() if not (value or "").strip()]
        if missing:
            raise ValueError(
                f"no text for {', '.join(missing)}: only items parallel across the languages "
                "of the build are used"
            )
        return {lang: value.strip() for lang, value in text.items()}

    @property
    def key(self) -> str:
        """Unique across the sources: `shades:7.1`, `m-alert:10330`."""
        return item_key(self.source, self.item_id)


class Participant(_Record):
    """Self-declared demographics of one participant, keyed by the private collection key."""

    participant_key: str = Field(min_length=1)
    gender: Gender
    age_group: AgeGroup
    mother_tongue: str = Field(
        description="BCP-47 style tag, e.g. es-ES, it (a value no tag or name maps is refused)"
    )
    ethnicity: str | None = None
    languages: tuple[Lang, ...] = Field(
        min_length=1, description="languages the participant recorded in"
    )

    @field_validator("gender", mode="before")
    @classmethod
    def _gender(cls, v: Any) -> str:
        return normalize_gender(v)

    @field_validator("age_group", mode="before")
    @classmethod
    def _age(cls, v: Any) -> str:
        return normalize_age_group(v)

    @field_validator("mother_tongue", mode="before")
    @classmethod
    def _tongue(cls, v: Any) -> str:
        return normalize_mother_tongue(v)

    @field_validator("ethnicity", mode="before")
    @classmethod
    def _ethnicity(cls, v: Any) -> str | None:
        return screen_free_text(v, "ethnicity")


class ConsentState(StrEnum):
    """Where a participant stands. Only PUBLIC reaches the public set; PUBLIC and
    PARTICIPATION_ONLY reach the full set; everything else is excluded."""

    PUBLIC = "public"
    PARTICIPATION_ONLY = "participation_only"
    WITHDRAWN = "withdrawn"
    NO_PARTICIPATION_CONSENT = "no_participation_consent"
    AMBIGUOUS = "ambiguous"
    NO_RECORD = "no_record"

    def allows(self, dataset_set: DatasetSet) -> bool:
        if dataset_set == PUBLIC:
            return self is ConsentState.PUBLIC
        return self in (ConsentState.PUBLIC, ConsentState.PARTICIPATION_ONLY)


class ConsentRecord(_Record):
    """One row of the private consent registry. A blank answer is kept as None and
    counts as no consent (deny by default)."""

    participant_key: str = Field(min_length=1)
    participation_consent: bool | None
    public_release_consent: bool | None
    withdrawal_date: dt.date | None = None
    consent_form_version: str | None = None

    def state(self) -> ConsentState:
        # A withdrawal excludes whatever its date: a future date is a data-entry
        # problem, and excluding is the safe reading of it.
        if self.withdrawal_date is not None:
            return ConsentState.WITHDRAWN
        if self.participation_consent is None or not self.consent_form_version:
            return ConsentState.AMBIGUOUS
        if not self.participation_consent:
            # Public consent without participation consent contradicts itself.
            return (
                ConsentState.AMBIGUOUS
                if self.public_release_consent
                else ConsentState.NO_PARTICIPATION_CONSENT
            )
        if self.public_release_consent is None:
            return ConsentState.PARTICIPATION_ONLY
        return (
            ConsentState.PUBLIC if self.public_release_consent else ConsentState.PARTICIPATION_ONLY
        )


def resolve_consent(records: list[ConsentRecord]) -> ConsentState:
    """The state of one participant from all their registry rows: none is NO_RECORD,
    any withdrawal wins, rows that disagree otherwise are AMBIGUOUS."""
    if not records:
        return ConsentState.NO_RECORD
    states = {r.state() for r in records}
    if ConsentState.WITHDRAWN in states:
        return ConsentState.WITHDRAWN
    if len(states) > 1:
        return ConsentState.AMBIGUOUS
    return states.pop()


# The consent registry's columns, in file order.
CONSENT_COLUMNS: tuple[str, ...] = tuple(ConsentRecord.model_fields)


class Contribution(_Record):
    """One recording exported by the collection interface: participant x item x language."""

    participant_key: str = Field(min_length=1)
    source: Source
    item_id: str = Field(min_length=1)
    lang: Lang
    audio_file: str = Field(min_length=1, description="path relative to the audio root")
    spoken_text: str = Field(description="the harmful content as the participant phrased it")
    speech_followup: str = Field(description="typed follow-up sent with the speech request")
    audio_request_text: str = Field(
        description="harmful content + follow-up sent as text with a distracting clip"
    )
    discomfort: int | None = Field(default=None, ge=1, le=5)
    transcript: str | None = Field(
        default=None, description="ASR transcript when the collection provides one"
    )

    @property
    def item_key(self) -> str:
        return item_key(self.source, self.item_id)

    @property
    def key(self) -> tuple[str, str, str]:
        """Two rows with the same key are the same recording twice."""
        return (self.lang, self.item_key, self.participant_key)


class NoiseCondition(_Record):
    """A distracting-audio condition; `name` becomes the rows' `audio_type`.

    `params` holds the kind's ranges (e.g. `snr_db: [0, 15]`); the values drawn
    from them for a clip are recorded on every row that uses it. Their physical
    bounds are the kind's own (`BOUNDS` in its module, e.g. speakers [1, 16] for
    babble), checked by `redvox.noise.check_condition`.

    `kind` names a module of `redvox.noise` (silence, ambient, babble, speech_ambient,
    ...); it is checked against that registry wherever a condition is used (a build's
    config, `variants add`), since schemas cannot import noise: a new kind is one new
    module, not an edit here too.
    """

    # At most 64 characters: the name becomes a folder name (`variants add`) and a column value.
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)
    kind: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)
    duration_s: float = Field(default=6.0, gt=0, le=60, allow_inf_nan=False)
    sampling: Literal["shared", "per_entry"] = "shared"
    params: dict[str, Any] = Field(default_factory=dict)
    description: str = ""

    @property
    def is_shared(self) -> bool:
        """Sampled once for all rows (`sampling: shared`), not once per entry."""
        return self.sampling == "shared"

    @model_validator(mode="after")
    def _not_speech(self) -> NoiseCondition:
        if self.name == SPEECH_AUDIO_TYPE:
            raise ValueError(
                "'speech' is the audio_type of the recordings themselves, not a condition name"
            )
        return self

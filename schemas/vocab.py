"""Controlled vocabularies of the release and the normalisation into them.

The collection interface let participants type some fields freely, so the raw
registry holds `ES_ES`, `ES-ES`, `es-ES` or `Italian` for the same mother
tongue. Everything is mapped here, once, and the card says so.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from .errors import UserError

Lang = Literal["en", "de", "es", "fr", "it"]
LANGUAGES: tuple[str, ...] = get_args(Lang)

VulnerabilityType = Literal[
    "stereotype",
    "unsafe_request_crime",
    "unsafe_request_substance",
    "unsafe_request_sexual_content",
    "unsafe_request_self_harm",
    "unsafe_request_weapons",
]
VULNERABILITY_TYPES: tuple[str, ...] = get_args(VulnerabilityType)

# ALERT micro-category prefix -> RedVox group. `hate_*` is deliberately absent:
# RedVox does not use it. Note the real spelling `sex_harrasment` is covered by
# the prefix.
MALERT_PREFIXES: dict[str, str] = {
    "crime_": "unsafe_request_crime",
    "substance_": "unsafe_request_substance",
    "sex_": "unsafe_request_sexual_content",
    "self_harm_": "unsafe_request_self_harm",
    "weapon_": "unsafe_request_weapons",
}
MALERT_EXCLUDED_PREFIXES: tuple[str, ...] = ("hate_",)

AgeGroup = Literal["18-24", "25-34", "34-44", "45-54", "55-64", "65+"]
AGE_GROUPS: tuple[str, ...] = get_args(AgeGroup)

Gender = Literal["female", "male", "non-binary", "other", "undisclosed"]
GENDERS: tuple[str, ...] = get_args(Gender)

Modality = Literal["speech", "text"]
SPEECH_MODALITY: Modality = "speech"  # the row's audio is the spoken request (alone or mixed)
# The audio_type of a recording itself (every other audio_type names a noise condition).
SPEECH_AUDIO_TYPE = "speech"

# The sets a version is built as: everyone with participation consent (full), and
# those who also consented to public release (public). builder/consent.py decides who is in which.
DatasetSet = Literal["full", "public"]
SETS: tuple[DatasetSet, ...] = get_args(DatasetSet)
FULL, PUBLIC = SETS

# The English names (lower case) of the release languages: SHADES headers, demo voices.
LANGUAGE_NAMES: dict[str, str] = {
    "en": "english",
    "de": "german",
    "es": "spanish",
    "fr": "french",
    "it": "italian",
}
ATTACK_TYPE = "non_adversarial"

# The canonical region for a bare language tag, so `es` and `es-ES` do not
# become two values when both occur.
_LANGUAGE_NAMES: dict[str, str] = {
    **{name: lang for lang, name in LANGUAGE_NAMES.items()},
    "inglese": "en",
    "deutsch": "de",
    "tedesco": "de",
    "español": "es",
    "espanol": "es",
    "castellano": "es",
    "français": "fr",
    "francais": "fr",
    "italiano": "it",
    "portuguese": "pt",
    "português": "pt",
    "romanian": "ro",
    "russian": "ru",
    "polish": "pl",
    "dutch": "nl",
    "arabic": "ar",
    "chinese": "zh",
    "mandarin": "zh",
    "hindi": "hi",
    "turkish": "tr",
    "catalan": "ca",
    "greek": "el",
    "ukrainian": "uk",
    "japanese": "ja",
    "korean": "ko",
    "persian": "fa",
    "farsi": "fa",
    "bengali": "bn",
    "urdu": "ur",
    "albanian": "sq",
}
_TAG = re.compile(r"^(?P<lang>[A-Za-z]{2,3})(?:[-_ ](?P<region>[A-Za-z]{2}|\d{3}))?$")


class VocabularyError(UserError, ValueError):
    """A self-declared value that cannot be mapped onto the release vocabulary."""


# Country names as participants type them after a language name: `Portuguese (Brazil)`.
_REGION_NAMES: dict[str, str] = {
    "brazil": "BR", "brasil": "BR", "portugal": "PT", "spain": "ES", "españa": "ES",
    "espana": "ES", "mexico": "MX", "méxico": "MX", "argentina": "AR", "colombia": "CO",
    "chile": "CL", "peru": "PE", "united states": "US", "usa": "US", "us": "US",
    "america": "US", "united kingdom": "GB", "uk": "GB", "great britain": "GB",
    "britain": "GB", "england": "GB", "ireland": "IE", "canada": "CA", "australia": "AU",
    "india": "IN", "france": "FR", "belgium": "BE", "switzerland": "CH", "swiss": "CH",
    "germany": "DE", "austria": "AT", "italy": "IT", "italia": "IT", "netherlands": "NL",
    "china": "CN", "taiwan": "TW",
}  # fmt: skip
_NAMED_REGION = re.compile(r"^(?P<name>[^()]+?)\s*[(,]\s*(?P<region>[^()]+?)\s*\)?$")


def _mother_tongue_tag(text: str) -> str | None:
    """The tag of collapsed, non-empty `text`, or None when nothing maps it."""
    named = _LANGUAGE_NAMES.get(text.casefold())
    if named:
        return named
    match = _TAG.match(text)
    if match:
        lang = match["lang"].lower()
        region = match["region"]
        return f"{lang}-{region.upper()}" if region else lang
    match = _NAMED_REGION.match(text)
    if match:
        lang = _LANGUAGE_NAMES.get(match["name"].casefold())
        region = _REGION_NAMES.get(match["region"].casefold())
        if lang and region:
            return f"{lang}-{region}"
    return None


def normalize_mother_tongue(raw: str, *, strict: bool = True) -> str:
    """Map a free-typed mother tongue onto a BCP-47 style tag.

    `ES_ES`, `ES-ES`, `es-es` -> `es-ES`; `Italian` -> `it`; `EN-US` -> `en-US`;
    `Portuguese (Brazil)` -> `pt-BR`. A value nothing maps raises, or with
    `strict=False` is kept as written (whitespace collapsed): a self-declared answer
    is never a reason to drop a participant.
    """
    if raw is None:
        raise VocabularyError("mother tongue is empty")
    text = " ".join(str(raw).split())
    if not text:
        raise VocabularyError("mother tongue is empty")
    tag = _mother_tongue_tag(text)
    if tag is not None:
        return tag
    if not strict:
        return text
    raise VocabularyError(
        f"mother tongue {raw!r} is neither a language tag (e.g. es-ES) nor a known language name"
    )


def is_known_mother_tongue(raw: str | None) -> bool:
    """Whether `raw` maps onto a tag (False for a value kept as written)."""
    text = " ".join(str(raw or "").split())
    return bool(text) and _mother_tongue_tag(text) is not None


def primary_language(tag: str) -> str:
    """`es-ES` -> `es`: the language part of a normalised tag."""
    return tag.split("-", 1)[0]


_AGE_ALIASES = {"35-44": "34-44", "65-74": "65+", "75+": "65+", ">65": "65+", "65 +": "65+"}


def normalize_age_group(raw: str) -> str:
    """Age groups as the public release writes them (`34-44` is the release's own spelling)."""
    text = str(raw).strip().replace("–", "-").replace(" - ", "-")
    text = _AGE_ALIASES.get(text, text)
    if text not in AGE_GROUPS:
        raise VocabularyError(f"age group {raw!r} is not one of {', '.join(AGE_GROUPS)}")
    return text


_GENDER_ALIASES = {
    "f": "female",
    "female": "female",
    "woman": "female",
    "w": "female",
    "donna": "female",
    "m": "male",
    "male": "male",
    "man": "male",
    "uomo": "male",
    "non-binary": "non-binary",
    "nonbinary": "non-binary",
    "non binary": "non-binary",
    "nb": "non-binary",
    "other": "other",
    "prefer not to say": "undisclosed",
    "undisclosed": "undisclosed",
    "": "undisclosed",
}


def normalize_gender(raw: str | None) -> str:
    """Self-declared gender onto the release vocabulary; empty means undisclosed."""
    key = " ".join(str(raw or "").split()).casefold()
    if key not in _GENDER_ALIASES:
        raise VocabularyError(f"gender {raw!r} is not one of {', '.join(GENDERS)}")
    return _GENDER_ALIASES[key]


def malert_group(category: str) -> str | None:
    """RedVox vulnerability type of an ALERT micro category, None when unused (`hate_*`).

    Raises VocabularyError for a category no rule covers.
    """
    cat = str(category).strip()
    for prefix, group in MALERT_PREFIXES.items():
        if cat.startswith(prefix):
            return group
    if cat.startswith(MALERT_EXCLUDED_PREFIXES):
        return None
    raise VocabularyError(
        f"M-ALERT category {category!r} matches none of the prefixes "
        f"{', '.join(MALERT_PREFIXES)} (hate_* is excluded on purpose)"
    )

"""Controlled vocabularies of the release and the normalisation into them.

The collection interface let participants type some fields freely, so the raw
registry holds `ES_ES`, `ES-ES`, `es-ES` or `Italian` for the same mother
tongue. Everything is mapped here, once, and the card says so.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator

from .errors import UserError

# Which languages a build reads and writes is its version's (`builder/versions.py`
# BuildConfig.languages); a record only checks that a language is a code.
LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}$")


def _language_code(value: str) -> str:
    if not LANGUAGE_CODE.match(value):
        raise ValueError(
            f"{value!r} is not a language code (two or three lower-case letters, e.g. en)"
        )
    return value


Lang = Annotated[str, AfterValidator(_language_code)]
# The languages of the first release (1.0.0), in the order RedVox lists languages; a
# language a later version adds is listed after them. Not the languages of a build.
LANGUAGES: tuple[str, ...] = ("en", "de", "es", "fr", "it")


def listing(phrases: Sequence[str], last: str = "and") -> str:
    """'A', 'A and B', 'A, B and C'."""
    return f" {last} ".join(", ".join(phrases).rsplit(", ", 1)) if phrases else ""


def language_order(lang: str) -> tuple[int, str]:
    """Sort key: the first release's languages in their order, then any other by code."""
    return (LANGUAGES.index(lang) if lang in LANGUAGES else len(LANGUAGES), lang)


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

# The English names (lower case) of the first release's languages (the demo voices); the
# raw SHADES headers are read through every name below (`language_named`).
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


def language_named(name: str) -> str | None:
    """The code of a language name (`English`, `italiano` -> `en`, `it`), None when unknown."""
    return _LANGUAGE_NAMES.get(" ".join(name.split()).casefold())


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


def normalize_mother_tongue(raw: str) -> str:
    """Map a free-typed mother tongue onto a BCP-47 style tag.

    `ES_ES`, `ES-ES`, `es-es` -> `es-ES`; `Italian` -> `it`; `EN-US` -> `en-US`;
    `Portuguese (Brazil)` -> `pt-BR`. A value nothing maps raises: it would be
    published as free text, unchecked, so the registry row is refused until it is
    written as a tag or its name is added here.
    """
    if raw is None:
        raise VocabularyError("mother tongue is empty")
    text = " ".join(str(raw).split())
    if not text:
        raise VocabularyError("mother tongue is empty")
    tag = _mother_tongue_tag(text)
    if tag is not None:
        return tag
    raise VocabularyError(
        f"mother tongue {raw!r} is neither a language tag (e.g. es-ES) nor a known language "
        "name; write the tag, or add the name to schemas/vocab.py"
    )


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


# How database, spreadsheet and statistics exports spell an empty cell, compared after
# `placeholder_form` (NFKC, invisible characters and whitespace removed, case folded). In a
# private registry such a cell is neither a value nor truly empty, and is refused
# (sources/registry.py), in every column.
PLACEHOLDERS = frozenset(
    {
        # pandas, R, SQL, JavaScript, Python, MySQL exports
        "null", "(null)", "<null>", "[null]", "none", "(none)", "<none>", "nan", "-nan",
        "+nan", "nat", "na", "<na>", "n/a", "n.a.", "n.a", "nil", "undefined", "undef",
        "\\n", "inf", "-inf", "+inf", "infinity", "-infinity", "1.#ind", "-1.#ind",
        "1.#qnan", "-1.#qnan", "#n/an/a", "#getting_data", "-", "--",
        # words for "nothing here"
        "unknown", "unk", "missing", "blank", "(blank)", "<blank>", "empty", "(empty)",
        "<empty>", "void", "notavailable", "notapplicable", "nodata", "novalue", "notgiven",
        "notknown", "notset", "notspecified", "notstated", "unspecified", "tbd", "tba",
        "tbc", "pending", "n/d", "n.d.", "n.d", "n.v.", "n.c.", "n.r.", "s/d",
        # the same in the languages of the collection
        "k.a.", "k.a", "keineangabe", "unbekannt", "fehlt", "leer", "nessuno", "nessuna",
        "sconosciuto", "mancante", "vuoto", "nondisponibile", "inconnu", "néant", "vide",
        "nonrenseigné", "desconocido", "ninguno", "ninguna", "vacío", "vacio", "sindatos",
        "nodisponible",
    }
)  # fmt: skip
# Spreadsheet error values in any language: #N/A, #NV, #N/D, #VALUE!, #WERT!, #¡VALOR!,
# #DIV/0!, #NAME?, #¿NOMBRE? ...
_SPREADSHEET_ERROR = re.compile(r"#(?:[¡¿]?[\w/.]+[!?]|n/?[avd])")
# A zero is how a spreadsheet formula shows an empty cell it refers to: a placeholder
# where the column holds free text that a value would count for (a consent form
# version, an ethnicity), not in a key (a number is a key) or a checked column.
_ZERO = re.compile(r"[+-]?0+(?:[.,]0+)?")
# Letters that draw nothing: the Hangul fillers, and the blank Braille pattern.
INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Zs", "Zl", "Zp", "Mn", "Me", "Cn", "Co"})


def is_invisible(char: str) -> bool:
    """Whether `char` shows nothing by itself: format characters (U+200B, U+2060, U+FEFF,
    the soft hyphen), controls, spaces, combining marks, the Hangul fillers."""
    return char in INVISIBLE_LETTERS or unicodedata.category(char) in _INVISIBLE_CATEGORIES


def placeholder_form(value: str) -> str:
    """`value` as PLACEHOLDERS are written: NFKC, without invisible characters and
    whitespace, case folded (` N/A `, `n / a`, `Ｎ／Ａ` and `N\u200b/A` are all `n/a`)."""
    text = unicodedata.normalize("NFKC", value)
    return "".join(c for c in text if not is_invisible(c) and not c.isspace()).casefold()


def placeholder_in(value: str, *, zero: bool = False) -> str | None:
    """Why the cell `value` is a placeholder rather than a value, None when it is not:
    a cell of invisible characters only (it looks empty and is not), an export's empty
    value (PLACEHOLDERS, spreadsheet errors), a cell without a letter or a digit (`—`,
    `?`, `.`), and with `zero` a zero (`0`, `0.0`)."""
    if all(is_invisible(c) for c in value):
        names = ", ".join(
            dict.fromkeys(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in value)
        )
        return f"{value!r} holds only invisible characters ({names}): it looks empty but is not"
    form = placeholder_form(value)
    if form in PLACEHOLDERS or _SPREADSHEET_ERROR.fullmatch(form):
        return (
            f"{value!r} is how some exports write an empty cell, and is neither a value nor empty"
        )
    if not any(unicodedata.category(c)[0] in "LN" and c not in INVISIBLE_LETTERS for c in form):
        return f"{value!r} has no letter or digit: it stands for an empty cell, and is not a value"
    if zero and _ZERO.fullmatch(form):
        return f"{value!r} is how a spreadsheet formula shows an empty cell, and is not a value"
    return None


# Personal data that a free-text field (ethnicity) must not carry: the answer is screened
# as written and once more after NFKC with format characters removed (fullwidth
# `＠`, superscript digits, a zero-width space inside an address). A two-digit number
# may be an age ("30s"); more digits, an e-mail address (also written `name at example
# dot com` or `name(at)example(dot)com`), a user name (`@name`), a web address or a
# domain (`t.me/name`, `name.ch`), a phone number, a postcode or a street address
# (`Hauptstraße 5`, `12, chemin des Vignes`, `C/ Mayor 3`) identify a person and are
# refused.
_AT = r"(?:\s*[\[({<]\s*at\s*[\])}>]\s*|\s+at\s+)"
_DOT = r"(?:\s*[\[({<]\s*(?:dot|punto|punkt|point)\s*[\])}>]\s*|\s+(?:dot|punto|punkt)\s+|\.)"
_GENERIC_TLDS = (
    "com|org|net|edu|gov|mil|int|info|biz|name|pro|mobi|app|dev|page|online|site|web|"
    "blog|shop|store|tech|email|social|link|club|xyz|eu|asia|swiss|berlin|paris|roma"
)
_STREET_WORDS = (
    # English
    r"street|road|avenue|boulevard|blvd|highway|postcode|post\s*code|zip\s*code|"
    r"p\.?\s*o\.?\s*box|lives?\s+at|address|"
    # Italian
    r"via|viale|v\.le|vicolo|vico|piazza|p\.zza|p\.za|piazzale|corso|c\.so|largo|strada|"
    r"contrada|località|loc\.|"
    # French
    r"rue|chemin|impasse|allée|quai|bd|boul\.|av\.|faubourg|lieu-dit|"
    # Spanish, Catalan, Portuguese
    r"avenida|avda\.?|calle|plaza|pza\.|paseo|carrer|camino|travesía|rua|travessa|praça|"
    # German, Dutch
    r"stra(?:ss|ß)e|str\.|gasse|allee|chaussee|weg|platz|straat|laan|plein|gracht"
)
# Words that are street types only next to a house number ("5 Church Close", "place du
# Marché 3").
_NUMBERED_STREET_WORDS = (
    r"st|rd|ave|dr|ct|pl|ln|lane|place|route|cours|way|drive|close|court|square|terrace|"
    r"crescent|row|hill|gardens|grove|walk|mews|parade|green|park|ring|markt|ulica|ul"
)
# German, Dutch and Scandinavian street names are compounds: Hauptstraße, Gartenweg.
_STREET_SUFFIXES = (
    r"stra(?:ss|ß)e|str\.?|gasse|weg|platz|allee|ring|damm|ufer|steig|pfad|chaussee|"
    r"graben|markt|straat|laan|plein|gracht|gade|vej|gatan|vägen|veien"
)
_PERSONAL_DATA: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an e-mail address", re.compile(r"[^\s@]+@[^\s@]+\.\w+|\w@\w")),
    ("an e-mail address", re.compile(rf"(?i)\w[\w.+-]*{_AT}[\w-]+(?:{_DOT}[\w-]+)+")),
    ("an e-mail address", re.compile(r"(?i)\w[\[({<]at[\])}>]\w")),
    ("a user name (@name)", re.compile(r"(?<![\w@])@\w")),
    (
        "a URL",
        re.compile(
            r"(?i)\b(?:https?://|ftp://|www\.)\S+"
            rf"|\b[\w-]+(?:\.[\w-]+)*\.(?:{_GENERIC_TLDS})\b"
            r"|\b[\w-]+(?:\.[\w-]+)*\.[a-z]{2}\b(?![.-]?\w)"
            r"|\b[\w-]+(?:\.[\w-]+)+/[\w.~%/?=&+-]+"
        ),
    ),
    ("a phone number", re.compile(r"\+?\d(?:[\W_]*\d){6,}")),
    (
        "a postcode",
        re.compile(r"(?i)\b(?:[a-z]{1,2}\d[a-z\d]?\s*\d[a-z]{2}|[a-z]\d[a-z]\s?\d[a-z]\d)\b"),
    ),
    ("more digits than an age", re.compile(r"\d(?:[\W_]*\d){2,}")),
    (
        "a street address",
        re.compile(
            rf"(?i)(?<!\w)(?:{_STREET_WORDS})(?!\w)"
            rf"|\w(?:stra(?:ss|ß)e)\b"
            rf"|\w(?:{_STREET_SUFFIXES})\s*\d"
            r"|(?<![\w/])c/(?:\s|o\b)"
            rf"|\b\d{{1,4}}\s*[a-z]?,?\s+(?:[\w'-]+\s+)?(?:{_NUMBERED_STREET_WORDS})\b"
            rf"|\b(?:{_NUMBERED_STREET_WORDS})\.?\s+(?:[\w'.-]+\s+){{0,3}}\d{{1,4}}\b"
        ),
    ),
    ("a house number", re.compile(r"\b\d{1,4}[a-zA-Z]?,?\s+[A-ZÀ-Ý][\w'-]+\s+[A-ZÀ-Ý]")),
)


def personal_data_in(text: str) -> str | None:
    """What kind of personal data free text `text` seems to hold (None: nothing found),
    looked for in `text` as written and after NFKC with format characters (U+200B ...)
    and the Hangul fillers removed; case is ignored."""
    normal = unicodedata.normalize("NFKC", text)
    normal = " ".join(
        "".join(
            c for c in normal if c not in INVISIBLE_LETTERS and unicodedata.category(c) != "Cf"
        ).split()
    )
    for what, pattern in _PERSONAL_DATA:
        if pattern.search(text) or pattern.search(normal):
            return what
    return None


def screen_free_text(raw: str | None, field: str) -> str | None:
    """A free-text demographic as published: whitespace collapsed, None when empty;
    VocabularyError when it holds personal data (see `personal_data_in`)."""
    text = " ".join(str(raw).split()) if raw is not None else ""
    if not text:
        return None
    found = personal_data_in(text)
    if found:
        raise VocabularyError(
            f"{field} looks like it holds {found}, which would be published as written; "
            "keep only the self-declared answer (free text is screened for e-mail addresses, "
            "user names, URLs and domains, phone numbers, postcodes, street addresses and "
            "numbers longer than an age, also in fullwidth or superscript characters)"
        )
    return text

"""The private registries: participants' self-declared demographics and their consent.

Both registries fail closed. Any row that cannot be read exactly (quoting,
cell count, encoding, an unknown answer, a bad date, an empty or duplicate
key) is a fatal problem that stops the build: a stray row may be a
misspelled withdrawal, so it is never skipped. So is a consent row whose key
is not a registered participant.

Format and columns (`read_registry_table`): a registry is a CSV file, nothing else.
JSON Lines and parquet, which the shared table reader takes for other inputs, are
refused: a JSON key spelled otherwise (`Withdrawal_Date`) or left out, and a NaN
cell, would read as a blank withdrawal date. The header must name the documented
columns exactly (ethnicity is the one optional column); any other column, an
unnamed one included, is fatal, naming it and the known columns, and a consent row
holding a value in it counts as a row with no answers.

Keys: every cell is stripped, so surrounding whitespace is not part of a key
(` demo-p01 ` is `demo-p01`); otherwise keys are compared exactly. A key must be
in Unicode normal form NFKC and made of letters, digits and `- _ . @ +` only
(`key_problem`): a space inside it, an invisible character (U+200B and the other
zero-width ones) or a look-alike dash is fatal, naming the character. A key that
matches a registered one only after folding (`fold_key`: case, whitespace,
invisible characters, and Cyrillic or Greek letters that look like Latin ones,
such as a Cyrillic `р` for `p`) is fatal, and the message names the registered key.

No kindness: the only answers are `yes` and `no` (any case) or a blank cell; a
date is YYYY-MM-DD or blank; a cell that is neither a value nor truly empty is
fatal, in every column (schemas/vocab.py `placeholder_in`): an export's empty value
(`null`, `NA`, `#N/A`, `<NA>`, `NaT`, `n.a.`, `#NV`, `undefined`, `unknown`,
`missing`, `(blank)`, ... in any case, width or spacing), a cell of invisible
characters only (U+200B, U+2060, U+FEFF, the soft hyphen, a Hangul filler), a cell
with no letter or digit (`—`, `---`, `?`, `.`, `_`), and in the free-text columns
(consent_form_version, ethnicity) a zero, which is how a spreadsheet formula shows an
empty cell. A key may be a number, `0` included.
Demographics are checked against their vocabularies (gender, age group, mother
tongue as a language tag or a known language name); the free-text ethnicity is
screened for personal data (schemas/vocab.py `screen_free_text`). A participant
row that is refused is remembered by key (`ParticipantsResult.refused`), so that
contributions of that participant can say which registry line to fix instead of
"not registered".

`read_registries` is the one reader of both registries: the build and every
release step (represent, stage, verify, push, withdraw) read them through it.

In case a caller ignores fatal problems, consent is also read deny-by-default
at the record level: a consent row whose answers or date cannot be read, or
that cannot be read as a row at all, still counts for its participant (when
its key can be made out) as a row with no answers, so that `resolve_consent`
excludes them (ambiguous); a row keyed by a variant (`fold_key`) of a registered key
counts the same way against the registered participant. Dropping the row
instead could leave an older "yes" row deciding alone, or hide a withdrawal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import re
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from redvox.schemas import ConsentRecord, Participant
from redvox.schemas.records import CONSENT_COLUMNS
from redvox.schemas.vocab import INVISIBLE_LETTERS, placeholder_in

from .problems import Problem, ReadResult, validate_row
from .tables import FORMATS, TableRead, TableRow, read_table

STOPS = "the build stops until it is fixed"
# What the table reader says about a registry row it cannot read.
_PARTICIPANT_ROW = f"{STOPS} (a row that cannot be read is never skipped)"
_CONSENT_ROW = f"{STOPS} (a consent row that cannot be read may be a withdrawal)"

PARTICIPANT_COLUMNS = ("participant_key", "gender", "age_group", "mother_tongue", "languages")
# The participants registry's one optional column; no other column is read, or allowed.
OPTIONAL_PARTICIPANT_COLUMNS = ("ethnicity",)
# The participants registry's columns in the README's order.
PARTICIPANTS_FILE_COLUMNS = (*PARTICIPANT_COLUMNS[:4], "ethnicity", PARTICIPANT_COLUMNS[4])
# Free-text columns, where a zero is a spreadsheet's empty cell and not a value.
_ZERO_IS_EMPTY = frozenset({"consent_form_version", "ethnicity"})
# The one format of the private registries: every cell is text, the header names every
# column (JSON Lines drops a misspelled or missing key, parquet has typed NaN cells).
REGISTRY_EXTENSION = ".csv"
# The README documents yes and no; `y`, `true`, `1` and the like are refused, not guessed.
_ANSWERS = {"yes": True, "no": False}
KEY_PUNCTUATION = "-_.@+"
# Letters other scripts share the look of with Latin ones, after NFKC: a key written
# with one of them is another string that reads as the same key.
_CONFUSABLES = str.maketrans(
    {
        # Cyrillic
        "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o",
        "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i",
        "ј": "j", "ԁ": "d", "һ": "h", "ӏ": "l", "ԛ": "q", "ԝ": "w", "ѡ": "w", "ү": "y",
        "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
        "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ԛ": "Q",
        "Ԝ": "W", "Ү": "Y", "Һ": "H",
        # Greek
        "α": "a", "β": "b", "γ": "y", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v",
        "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w",
        "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
        "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
        # dashes and minus signs that read as a hyphen
        "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
        "\u2015": "-", "\u2212": "-", "\ufe63": "-",
    }
)  # fmt: skip
# Format characters (U+200B, U+200C, U+200D, U+2060, U+FEFF, ...) and the Hangul fillers
# are invisible: folding drops them.
_INVISIBLE_LETTERS = INVISIBLE_LETTERS
_KEY_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nd"})  # letters, decimal digits
_LANGUAGE_SEPARATORS = re.compile(r"[;,]")


@dataclass(frozen=True)
class RefusedParticipant:
    """A participants registry row that names a key but was refused, and why."""

    file: str
    line: int
    reason: str


@dataclass
class ParticipantsResult(ReadResult[Participant]):
    """`refused`: key -> the first refused row naming it (keys with no accepted row only)."""

    refused: dict[str, RefusedParticipant] = dataclasses.field(default_factory=dict)


def read_participants(path: str | Path) -> ParticipantsResult:
    """Every registered participant; any row problem is fatal (see the module docstring)."""
    file = str(path)
    table = read_registry_table(
        path,
        PARTICIPANTS_FILE_COLUMNS,
        optional=OPTIONAL_PARTICIPANT_COLUMNS,
        what="participants registry",
        fail_closed=_PARTICIPANT_ROW,
    )
    result = ParticipantsResult([], list(table.problems), table.lines)
    refused: dict[str, RefusedParticipant] = {}
    for row in table.rejected:  # already reported by the table reader
        _remember(refused, row, file, [p for p in table.problems if p.row == row.line])
    first_line: dict[str, tuple[str, int]] = {}  # folded key -> (key, line)
    for row in table.records:
        problems = _placeholders(row, file, "", PARTICIPANTS_FILE_COLUMNS)
        problems += _key_problems(row, file, "")
        participant = None
        if not problems:
            participant, problems = validate_row(
                Participant, _participant_data(row), file, row.line
            )
        result.problems.extend(_fatal(problems, STOPS))
        if participant is None:
            _remember(refused, row, file, problems)
            continue
        key = participant.participant_key
        folded = fold_key(key)
        if folded in first_line:
            known, line = first_line[folded]
            same = "participant" if known == key else f"participant {known!r}"
            message = (
                f"{same} already registered on line {line}; {STOPS}, keep one row per participant"
            )
            if known != key:
                message += (
                    " (keys that differ only in case, spacing or look-alike letters are the "
                    "same person)"
                )
            result.problems.append(Problem(file, row.line, "participant_key", message, True))
            continue
        first_line[folded] = (key, row.line)
        result.records.append(participant)
    registered = {p.participant_key for p in result.records}
    result.refused = {k: v for k, v in sorted(refused.items()) if k not in registered}
    return result


def _remember(
    refused: dict[str, RefusedParticipant], row: TableRow, file: str, problems: list[Problem]
) -> None:
    key = (row.cells.get("participant_key") or "").strip()
    if not key or key in refused:
        return
    reason = (
        "; ".join(f"{p.field}: {p.message}" if p.field else p.message for p in problems)
        or "the row cannot be read"
    )
    refused[key] = RefusedParticipant(file, row.line, reason)


def read_registry_table(
    path: str | Path,
    known: tuple[str, ...],
    *,
    optional: tuple[str, ...] = (),
    what: str,
    fail_closed: str,
) -> TableRead:
    """The rows of a private registry, read fail-closed: CSV only, every column of `known`
    but the `optional` ones required, and any other column fatal, naming it and the known
    columns (a column the reader does not know may hold a withdrawal, spelled otherwise)."""
    path = Path(path)
    file = str(path)
    required = tuple(c for c in known if c not in optional)
    suffix = path.suffix.lower()
    if suffix != REGISTRY_EXTENSION and suffix in FORMATS:
        # Read only for what it says about the file itself (not found, empty): none of
        # its rows is used.
        table = read_table(path, required, what=what, fail_closed=fail_closed)
        message = (
            f"the {what} must be a CSV file ({REGISTRY_EXTENSION}), not {suffix}: a private "
            "registry is read as CSV only, where every cell is text and the header names "
            f"every column; {STOPS}, export it as CSV"
        )
        problems = [p for p in table.problems if p.row is None]
        return TableRead([], [Problem(file, None, None, message, fatal=True), *problems])
    table = read_table(path, required, what=what, fail_closed=fail_closed)
    unknown = [
        Problem(file, table.header_line, column, _unknown_column(column, known, what), True)
        for column in dict.fromkeys(table.columns)
        if column not in known
    ]
    table.problems[:0] = unknown
    return table


def _unknown_column(column: str, known: tuple[str, ...], what: str) -> str:
    if column:
        odd = dict.fromkeys(
            c for c in column if unicodedata.category(c)[0] not in "LN" and c not in "_- "
        )
        holds = f" (it holds {', '.join(map(_describe_char, odd))})" if odd else ""
        name = f"unknown column {column!r}{holds}"
    else:
        name = "unknown column '' (an empty header cell, e.g. after a trailing comma)"
    forms = {_column_form(k): k for k in known}
    near = difflib.get_close_matches(_column_form(column), list(forms), 1)
    hint = f" (did you mean {forms[near[0]]!r}?)" if near else ""
    return (
        f"{name}{hint}; a {what} has only the columns {', '.join(known)}, spelled exactly, "
        f"and a column the reader does not know may hold a withdrawal: {STOPS}, rename or "
        "remove it"
    )


def _column_form(name: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", name).casefold() if c.isalnum())


def _placeholders(
    row: TableRow, file: str, consequence: str, columns: tuple[str, ...]
) -> list[Problem]:
    """Fatal problems for cells that are neither a value nor truly empty: an export's
    empty value (`null`, `#N/A`, `NaT`...), a cell of invisible characters only, one of
    no letter or digit (`—`, `?`), a zero in a free-text column (`placeholder_in`).
    Only the registry's `columns` are looked at: any other is fatal already."""
    problems = []
    for column, value in row.cells.items():
        if value is None or column not in columns:
            continue
        reason = placeholder_in(value, zero=column in _ZERO_IS_EMPTY)
        if reason is not None:
            message = f"{reason}: leave the cell empty or write the value{consequence}"
            problems.append(Problem(file, row.line, column, message, fatal=True))
    return problems


def _key_problems(row: TableRow, file: str, consequence: str) -> list[Problem]:
    key = row.cells.get("participant_key")
    problem = key_problem(key) if key is not None else None
    if problem is None:
        return []
    return [Problem(file, row.line, "participant_key", problem + consequence, fatal=True)]


def key_problem(key: str) -> str | None:
    """Why `key` (a stripped cell) cannot be a participant key, None when it can: it must
    be NFKC-normalised and hold only letters, digits and `- _ . @ +`."""
    normal = unicodedata.normalize("NFKC", key)
    if normal != key:
        odd = next((c for c in key if unicodedata.normalize("NFKC", c) != c), key[0])
        return (
            f"{key!r} is not in Unicode normal form NFKC ({_describe_char(odd)}); write it "
            f"as {normal!r} if that is the key meant"
        )
    for char in key:
        if char in KEY_PUNCTUATION or (
            unicodedata.category(char) in _KEY_CATEGORIES and char not in _INVISIBLE_LETTERS
        ):
            continue
        return (
            f"{key!r} holds {_describe_char(char)}; a key is letters, digits and "
            f"{' '.join(KEY_PUNCTUATION)} only (spaces and invisible characters are refused)"
        )
    return None


def _describe_char(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed character')}"


def fold_key(key: str) -> str:
    """A key with case, whitespace, invisible characters and Cyrillic or Greek look-alike
    letters ignored: two keys alike this way are one person spelled twice, never two
    people."""
    text = unicodedata.normalize("NFKC", key).translate(_CONFUSABLES)
    kept = (
        c
        for c in text
        if not c.isspace() and unicodedata.category(c) != "Cf" and c not in _INVISIBLE_LETTERS
    )
    return "".join(kept).casefold()


def _fatal(problems: list[Problem], consequence: str) -> list[Problem]:
    return [
        dataclasses.replace(p, message=f"{p.message}; {consequence}", fatal=True) for p in problems
    ]


def _participant_data(row: TableRow) -> dict[str, object]:
    cells = row.cells
    languages = cells["languages"]
    return {
        "participant_key": cells["participant_key"],
        "gender": cells["gender"],
        "age_group": cells["age_group"],
        "mother_tongue": cells["mother_tongue"],
        "ethnicity": cells.get("ethnicity"),
        "languages": None
        if languages is None
        else tuple(
            part.strip().lower() for part in _LANGUAGE_SEPARATORS.split(languages) if part.strip()
        ),
    }


def parse_answer(raw: str | None) -> bool | None:
    """yes or no in any case; blank is None (unknown). Nothing else is guessed."""
    if raw is None:
        return None
    try:
        return _ANSWERS[raw.casefold()]
    except KeyError:
        raise ValueError(f"{raw!r} is not an answer; write yes, no or leave it blank") from None


_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def parse_date(raw: str | None) -> dt.date | None:
    """A date written YYYY-MM-DD (ASCII digits, nothing else: not 20260315 nor 2026-W11-1,
    which `date.fromisoformat` also takes); blank is None."""
    if raw is None:
        return None
    try:
        if not _DATE.fullmatch(raw):
            raise ValueError(raw)
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a date; write it as YYYY-MM-DD") from None


@dataclass
class Registries:
    """Both private registries as the build reads them: consent checked against the
    participants registry."""

    participants: ParticipantsResult
    consent: ReadResult[ConsentRecord]

    @property
    def problems(self) -> list[Problem]:
        return [*self.participants.problems, *self.consent.problems]

    def first_fatal(self) -> Problem | None:
        return next((p for p in self.problems if p.fatal), None)

    def by_participant(self) -> dict[str, list[ConsentRecord]]:
        grouped: dict[str, list[ConsentRecord]] = {}
        for record in self.consent.records:
            grouped.setdefault(record.participant_key, []).append(record)
        return grouped


def read_registries(participants: str | Path, consent: str | Path) -> Registries:
    """The one reader of the private registries, for the build and every release step."""
    people = read_participants(participants)
    return Registries(people, read_registered_consent(consent, people))


def read_registered_consent(
    path: str | Path, participants: ParticipantsResult
) -> ReadResult[ConsentRecord]:
    """The consent registry checked against `participants` as read (when it could be read
    at all: otherwise every key would be reported as unknown)."""
    return read_consent(
        path,
        participant_keys={p.participant_key for p in participants.records}
        if participants.lines
        else None,
        refused=participants.refused,
    )


def read_consent(
    path: str | Path,
    participant_keys: Collection[str] | None = None,
    refused: Mapping[str, RefusedParticipant] | None = None,
) -> ReadResult[ConsentRecord]:
    """Every consent row, several per participant allowed (`resolve_consent` decides).

    Any problem is fatal. A row that cannot be read still yields a record with no
    answers for its participant when its key can be made out. With
    `participant_keys` (the registered participants), a row naming any other key
    is fatal, and one naming a variant of a registered key (`fold_key`) also counts,
    with no answers, against that participant. `refused` (participants rows refused
    by key) lets the message name the registry row to fix.
    """
    file = str(path)
    table = read_registry_table(
        path, CONSENT_COLUMNS, what="consent registry", fail_closed=_CONSENT_ROW
    )
    result = ReadResult[ConsentRecord]([], list(table.problems), table.lines)
    unknown = [c for c in table.columns if c not in CONSENT_COLUMNS]
    rows: list[tuple[int, ConsentRecord]] = []
    reported: set[int] = set()  # lines whose key is already named by a problem
    for row in table.records:
        record, problems = _consent_record(row, file)
        result.problems.extend(problems)
        reported |= {p.row for p in problems if p.field == "participant_key"}
        if record is not None and any(row.cells.get(c) for c in unknown):
            # A value in a column the reader does not know (fatal above) may be a
            # withdrawal: the row counts as one with no answers.
            record = _no_answers(record.participant_key)
        if record is not None:
            rows.append((row.line, record))
    for row in table.rejected:  # already reported by the table reader
        if row.cells.get("participant_key"):
            rows.append((row.line, _no_answers(row.cells["participant_key"])))
    rows.sort(key=lambda pair: pair[0])
    result.records = [record for _, record in rows]
    if participant_keys is not None:
        records, problems = _check_keys(rows, set(participant_keys), file, refused or {})
        result.records += records
        result.problems += [p for p in problems if p.row not in reported]
    return result


def _no_answers(key: str) -> ConsentRecord:
    return ConsentRecord(
        participant_key=key,
        participation_consent=None,
        public_release_consent=None,
        withdrawal_date=None,
        consent_form_version=None,
    )


def _check_keys(
    rows: list[tuple[int, ConsentRecord]],
    registered: set[str],
    file: str,
    refused: Mapping[str, RefusedParticipant],
) -> tuple[list[ConsentRecord], list[Problem]]:
    """Fatal problems for keys that are not registered, and a no-answers record against
    the registered participant a variant of the key most likely means."""
    by_fold = {fold_key(key): key for key in registered}
    records, problems = [], []
    for line, record in rows:
        key = record.participant_key
        if key in registered:
            continue
        known = by_fold.get(fold_key(key))
        if key in refused:
            row = refused[key]
            message = (
                f"participant {key!r} is registered on {Path(row.file).name} line {row.line} "
                f"but that row is refused: {row.reason}; {STOPS}"
            )
        elif known is None:
            message = (
                f"{key!r} is not in the participants registry (no readable row there has "
                f"this key); {STOPS}, register the participant or fix the key"
            )
        else:
            message = _variant_message(key, known)
        if known is not None:
            records.append(_no_answers(known))
        problems.append(Problem(file, line, "participant_key", message, fatal=True))
    return records, problems


def _variant_message(key: str, known: str) -> str:
    return (
        f"{key!r} is not a registered key, but it is {known!r} once case, spaces, invisible "
        f"characters and look-alike letters are ignored (keys must match exactly); {STOPS}, "
        f"write it as {known!r}; until then {known!r} counts as without clear consent"
    )


def _consent_record(row: TableRow, file: str) -> tuple[ConsentRecord | None, list[Problem]]:
    cells = row.cells
    if cells["participant_key"] is None:
        message = f"empty; the row cannot be attached to anyone, {STOPS}: fill it in"
        return None, [Problem(file, row.line, "participant_key", message, fatal=True)]
    consequence = f"; {STOPS}, and until then the participant counts as without clear consent"
    problems = _placeholders(row, file, consequence, CONSENT_COLUMNS)
    problems += _key_problems(row, file, consequence)
    placeholder_fields = {p.field for p in problems}
    parsers = {
        "participation_consent": parse_answer,
        "public_release_consent": parse_answer,
        "withdrawal_date": parse_date,
    }
    values: dict[str, object] = {}
    for field, parse in parsers.items():
        if field in placeholder_fields:
            continue
        try:
            values[field] = parse(cells[field])
        except ValueError as exc:
            message = (
                f"{exc}; {STOPS}, and until then the participant counts as without clear consent"
            )
            problems.append(Problem(file, row.line, field, message, fatal=True))
    if problems:
        values = dict.fromkeys(parsers)
    data = {
        "participant_key": cells["participant_key"],
        "consent_form_version": None if problems else cells["consent_form_version"],
        **values,
    }
    record, errors = validate_row(ConsentRecord, data, file, row.line)
    if record is None:
        # The key is readable (checked above): the row still denies its participant.
        record = _no_answers(cells["participant_key"])
    return record, problems + _fatal(errors, _CONSENT_ROW)

"""The private registries: participants' self-declared demographics and their consent.

Both registries fail closed. Any row that cannot be read exactly (quoting,
cell count, encoding, an unknown answer, a bad date, an empty or duplicate
key) is a fatal problem that stops the build: a stray row may be a
misspelled withdrawal, so it is never skipped. So is a consent row whose key
is not a registered participant.

Keys: every cell is stripped, so surrounding whitespace is not part of a key
(` demo-p01 ` is `demo-p01`); otherwise keys are compared exactly. A key that
matches a registered one only when case and inner whitespace are ignored
(`DEMO-P01`) is fatal, and the message names the registered key.

Free-typed demographics are the exception: a mother tongue that maps onto no
known tag or name is kept as written (whitespace collapsed) with a warning, a
non-fatal problem that rejects nothing. A participant row that is refused is
remembered by key (`ParticipantsResult.refused`), so that contributions of that
participant can say which registry line to fix instead of "not registered".

In case a caller ignores fatal problems, consent is also read deny-by-default
at the record level: a consent row whose answers or date cannot be read, or
that cannot be read as a row at all, still counts for its participant (when
its key can be made out) as a row with no answers, so that `resolve_consent`
excludes them (ambiguous); a row keyed by a case variant of a registered key
counts the same way against the registered participant. Dropping the row
instead could leave an older "yes" row deciding alone, or hide a withdrawal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from redvox.schemas import ConsentRecord, Participant
from redvox.schemas.records import CONSENT_COLUMNS
from redvox.schemas.vocab import is_known_mother_tongue

from .problems import Problem, ReadResult, validate_row
from .tables import TableRow, read_table

STOPS = "the build stops until it is fixed"
# What the table reader says about a registry row it cannot read.
_PARTICIPANT_ROW = f"{STOPS} (a row that cannot be read is never skipped)"
_CONSENT_ROW = f"{STOPS} (a consent row that cannot be read may be a withdrawal)"

PARTICIPANT_COLUMNS = ("participant_key", "gender", "age_group", "mother_tongue", "languages")
_ANSWERS = {
    "yes": True, "y": True, "true": True, "1": True,
    "no": False, "n": False, "false": False, "0": False,
}  # fmt: skip
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
    """Every registered participant; any row problem is fatal (see the module docstring),
    an unrecognised mother tongue only a warning."""
    file = str(path)
    table = read_table(
        path, PARTICIPANT_COLUMNS, what="participants registry", fail_closed=_PARTICIPANT_ROW
    )
    result = ParticipantsResult([], list(table.problems), table.lines)
    refused: dict[str, RefusedParticipant] = {}
    for row in table.rejected:  # already reported by the table reader
        _remember(refused, row, file, [p for p in table.problems if p.row == row.line])
    first_line: dict[str, tuple[str, int]] = {}  # loose key -> (key, line)
    for row in table.records:
        participant, problems = validate_row(Participant, _participant_data(row), file, row.line)
        result.problems.extend(_fatal(problems, STOPS))
        if participant is None:
            _remember(refused, row, file, problems)
            continue
        result.problems.extend(_warnings(row, file))
        key = participant.participant_key
        loose = loose_key(key)
        if loose in first_line:
            known, line = first_line[loose]
            same = "participant" if known == key else f"participant {known!r}"
            message = (
                f"{same} already registered on line {line}; {STOPS}, keep one row per participant"
            )
            if known != key:
                message += " (keys that differ only in case or spacing are the same person)"
            result.problems.append(Problem(file, row.line, "participant_key", message, True))
            continue
        first_line[loose] = (key, row.line)
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


def _warnings(row: TableRow, file: str) -> list[Problem]:
    """Non-fatal problems of an accepted row: free text kept as written."""
    raw = row.cells.get("mother_tongue")
    if raw is None or is_known_mother_tongue(raw):
        return []
    kept = " ".join(raw.split())
    message = (
        f"warning: mother tongue {raw!r} is neither a language tag (e.g. pt-BR) nor a known "
        f"language name; kept as written ({kept!r}), the participant is registered"
    )
    return [Problem(file, row.line, "mother_tongue", message, warning=True)]


def loose_key(key: str) -> str:
    """A key with case and whitespace ignored: two keys alike this way are one person
    spelled twice, never two people."""
    return "".join(key.split()).casefold()


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
    """yes/no/true/false/1/0/y/n in any case; blank is None (unknown)."""
    if raw is None:
        return None
    try:
        return _ANSWERS[raw.casefold()]
    except KeyError:
        raise ValueError(f"{raw!r} is not an answer; write yes, no or leave it blank") from None


def parse_date(raw: str | None) -> dt.date | None:
    if raw is None:
        return None
    try:
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a date; write it as YYYY-MM-DD") from None


def read_consent(
    path: str | Path,
    participant_keys: Collection[str] | None = None,
    refused: Mapping[str, RefusedParticipant] | None = None,
) -> ReadResult[ConsentRecord]:
    """Every consent row, several per participant allowed (`resolve_consent` decides).

    Any problem is fatal. A row that cannot be read still yields a record with no
    answers for its participant when its key can be made out. With
    `participant_keys` (the registered participants), a row naming any other key
    is fatal, and one naming a case variant of a registered key also counts,
    with no answers, against that participant. `refused` (participants rows refused
    by key) lets the message name the registry row to fix.
    """
    file = str(path)
    table = read_table(path, CONSENT_COLUMNS, what="consent registry", fail_closed=_CONSENT_ROW)
    result = ReadResult[ConsentRecord]([], list(table.problems), table.lines)
    rows: list[tuple[int, ConsentRecord]] = []
    for row in table.records:
        record, problems = _consent_record(row, file)
        result.problems.extend(problems)
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
        result.problems += problems
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
    the registered participant a case variant most likely means."""
    by_loose = {loose_key(key): key for key in registered}
    records, problems = [], []
    for line, record in rows:
        key = record.participant_key
        if key in registered:
            continue
        known = by_loose.get(loose_key(key))
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
            message = (
                f"{key!r} is not a registered key, but {known!r} is (keys must match exactly, "
                f"case included); {STOPS}, write it as {known!r} or register {key!r}; until then "
                f"{known!r} counts as without clear consent"
            )
            records.append(_no_answers(known))
        problems.append(Problem(file, line, "participant_key", message, fatal=True))
    return records, problems


def _consent_record(row: TableRow, file: str) -> tuple[ConsentRecord | None, list[Problem]]:
    cells = row.cells
    if cells["participant_key"] is None:
        message = f"empty; the row cannot be attached to anyone, {STOPS}: fill it in"
        return None, [Problem(file, row.line, "participant_key", message, fatal=True)]
    parsers = {
        "participation_consent": parse_answer,
        "public_release_consent": parse_answer,
        "withdrawal_date": parse_date,
    }
    values: dict[str, object] = {}
    problems = []
    for field, parse in parsers.items():
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
        "consent_form_version": cells["consent_form_version"],
        **values,
    }
    record, errors = validate_row(ConsentRecord, data, file, row.line)
    if record is None:
        # The key is readable (checked above): the row still denies its participant.
        record = _no_answers(cells["participant_key"])
    return record, problems + _fatal(errors, _CONSENT_ROW)

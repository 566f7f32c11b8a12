"""The private registries: participants' self-declared demographics and their consent.

Consent is read deny-by-default: a consent row whose answers or date cannot be
read still counts for its participant, as a row with no answers, so that
`resolve_consent` excludes them (ambiguous) until the registry is fixed.
Dropping the row instead could leave an older "yes" row deciding alone, or
hide a withdrawal.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from redvox.schemas import ConsentRecord, Participant

from .problems import Problem, ReadResult, validate_row
from .tables import TableRow, read_table

PARTICIPANT_COLUMNS = ("participant_key", "gender", "age_group", "mother_tongue", "languages")
CONSENT_COLUMNS = (
    "participant_key",
    "participation_consent",
    "public_release_consent",
    "withdrawal_date",
    "consent_form_version",
)
_ANSWERS = {
    "yes": True, "y": True, "true": True, "1": True,
    "no": False, "n": False, "false": False, "0": False,
}  # fmt: skip
_LANGUAGE_SEPARATORS = re.compile(r"[;,]")


def read_participants(path: str | Path) -> ReadResult[Participant]:
    file = str(path)
    table = read_table(path, PARTICIPANT_COLUMNS, what="participants registry")
    result = ReadResult[Participant]([], list(table.problems))
    first_line: dict[str, int] = {}
    for row in table.records:
        participant, problems = validate_row(Participant, _participant_data(row), file, row.line)
        result.problems.extend(problems)
        if participant is None:
            continue
        key = participant.participant_key
        if key in first_line:
            message = (
                f"participant already registered on line {first_line[key]}; "
                "row skipped, keep one row per participant"
            )
            result.problems.append(Problem(file, row.line, "participant_key", message))
            continue
        first_line[key] = row.line
        result.records.append(participant)
    return result


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


def read_consent(path: str | Path) -> ReadResult[ConsentRecord]:
    """Every readable row, several per participant allowed (`resolve_consent` decides)."""
    file = str(path)
    table = read_table(path, CONSENT_COLUMNS, what="consent registry")
    result = ReadResult[ConsentRecord]([], list(table.problems))
    for row in table.records:
        record, problems = _consent_record(row, file)
        result.problems.extend(problems)
        if record is not None:
            result.records.append(record)
    return result


def _consent_record(row: TableRow, file: str) -> tuple[ConsentRecord | None, list[Problem]]:
    cells = row.cells
    if cells["participant_key"] is None:
        message = "empty; the row cannot be attached to anyone and is skipped, fill it in"
        return None, [Problem(file, row.line, "participant_key", message)]
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
            message = f"{exc}; until then the participant counts as without clear consent"
            problems.append(Problem(file, row.line, field, message))
    if problems:
        values = dict.fromkeys(parsers)
    data = {
        "participant_key": cells["participant_key"],
        "consent_form_version": cells["consent_form_version"],
        **values,
    }
    record, errors = validate_row(ConsentRecord, data, file, row.line)
    return record, problems + errors

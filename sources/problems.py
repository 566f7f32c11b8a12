"""What a reader found wrong with an input, and how a pydantic error becomes that.

Readers never raise on bad data: they return the records they could validate
and one `Problem` per thing a maintainer has to fix, naming the file, the line
and the column. A `fatal` problem means the whole input is unusable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    file: str
    row: int | None
    field: str | None
    message: str
    fatal: bool = False
    # A note that rejects nothing (a value kept as written): the row is used as read.
    warning: bool = False

    def __str__(self) -> str:
        where = self.file if self.row is None else f"{self.file}:{self.row}"
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


@dataclass(frozen=True)
class LineCount:
    """What a reader made of an input's data lines (the header and blank lines are not
    counted): `lines` physical lines were read and `records` rows came out of them;
    `spanned` of those lines continue a row whose quoted cell holds a line break (RFC
    4180 CSV). Each of the other lines is named by a Problem, so nothing is lost
    without a report."""

    lines: int
    records: int
    spanned: int = 0

    @property
    def not_read(self) -> int:
        return self.lines - self.records - self.spanned


@dataclass
class ReadResult(Generic[T]):
    records: list[T] = dataclasses.field(default_factory=list)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    lines: LineCount | None = None  # None when the input could not be read at all

    @property
    def fatal(self) -> bool:
        return any(p.fatal for p in self.problems)


def _describe(error: Mapping[str, Any]) -> str:
    value = error.get("input")
    # Optional fields accept None, so a None that fails is a blank required cell.
    if value is None or error["type"] == "missing":
        return "empty (blank or NaN); fill it in"
    message = str(error["msg"]).removeprefix("Value error, ")
    if isinstance(value, str | int | float | bool):
        message += f" (got {value!r})"
    return message


def validation_problems(exc: ValidationError, file: str, row: int | None) -> list[Problem]:
    """One Problem per field (the column: first part of `loc`) from its first error; later
    errors on the same field follow from it (a bad list item also makes the list too short)."""
    first: dict[str | None, dict[str, Any]] = {}
    for error in exc.errors():
        first.setdefault(str(error["loc"][0]) if error["loc"] else None, error)
    return [Problem(file, row, field, _describe(error)) for field, error in first.items()]


def validate_row(
    model: type[M], data: Mapping[str, Any], file: str, row: int | None
) -> tuple[M | None, list[Problem]]:
    """`model` built from one row, or None and the problems that prevent it."""
    try:
        return model.model_validate(dict(data)), []
    except ValidationError as exc:
        return None, validation_problems(exc, file, row)

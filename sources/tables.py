"""Loading a CSV, JSONL or parquet input into rows of text cells with line numbers.

Every reader goes through here so the same rules hold for every input:
- a cell is text or None: blank cells and the spellings tools write for a
  missing value (pandas `nan`, JSON `null`, Python `None`) are None, and
  surrounding whitespace is stripped; numbers become their text (`10330.0`,
  how pandas writes an integer column with gaps, becomes `10330`);
- header names have their whitespace collapsed (exports add stray spaces);
- line numbers are what an editor shows: the CSV header is line 1 and a
  record spanning several lines is numbered by its first line; JSONL line n is
  row n; parquet rows are numbered from 1;
- text is decoded as UTF-8 (a byte-order mark is allowed) and nothing else:
  guessing another encoding would silently corrupt names and sentences;
- the file is only read, never written.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .problems import Problem, ReadResult

FORMATS: dict[str, str] = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
}
_MISSING_SPELLINGS = {"nan", "null", "none"}


@dataclass(frozen=True)
class TableRow:
    line: int
    cells: dict[str, str | None]


def collapse_whitespace(name: str) -> str:
    return " ".join(str(name).split())


def cell_text(value: Any) -> str | None:
    """A cell as stripped text, None when it holds no value."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return str(int(value))
    text = str(value).strip()
    return None if not text or text.casefold() in _MISSING_SPELLINGS else text


def decode_utf8(data: bytes, file: str) -> tuple[str | None, Problem | None]:
    """The text of a file, or a fatal Problem naming the line of the first bad byte."""
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        message = (
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
            "re-export the file as UTF-8"
        )
        return None, Problem(file, line, None, message, fatal=True)


def read_bytes(path: Path, what: str) -> tuple[bytes | None, Problem | None]:
    """The bytes of an input file, or a fatal Problem saying why it cannot be read."""
    file = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        message = f"{what} not found; check its path in the input config"
        return None, Problem(file, None, None, message, fatal=True)
    except OSError as exc:
        return None, Problem(file, None, None, f"{what} cannot be read ({exc.strerror})", True)
    if not data.strip():
        return None, Problem(file, None, None, f"{what} is empty; export it again", True)
    return data, None


def read_table(
    path: str | Path,
    required: Sequence[str],
    *,
    what: str = "input file",
    header: Callable[[str], str] = collapse_whitespace,
) -> ReadResult[TableRow]:
    """Rows of a CSV, JSONL or parquet file (chosen by extension) with their line numbers.

    `header` maps each raw column name to the name readers use. A missing
    file, an empty one, a wrong encoding or a missing `required` column is
    fatal and yields no rows.
    """
    path = Path(path)
    file = str(path)
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        message = (
            f"{what} has an unknown extension {path.suffix!r}; use one of {', '.join(FORMATS)}"
        )
        return ReadResult([], [Problem(file, None, None, message, fatal=True)])
    data, problem = read_bytes(path, what)
    if problem:
        return ReadResult([], [problem])
    if kind == "parquet":
        result = _parquet_rows(data, file)
    else:
        text, problem = decode_utf8(data, file)
        if problem:
            return ReadResult([], [problem])
        result = _csv_rows(text, file) if kind == "csv" else _jsonl_rows(text, file)
    return _check_columns(result, file, required, header, header_line=1 if kind == "csv" else None)


def unique_items(
    table: ReadResult[TableRow],
    file: str,
    to_item: Callable[[TableRow, str], tuple[Any, list[Problem]]],
    *,
    field: str,
    advice: str,
) -> ReadResult[Any]:
    """One item per usable item id of `table`, whatever the row order: rows that repeat
    an id with the same content are one item (the repeats reported); rows that give one
    id different content are all refused, since none of them can be told to be right."""
    result = ReadResult[Any]([], list(table.problems))
    by_id: dict[str, list[tuple[int, Any]]] = {}
    for row in table.records:
        item, problems = to_item(row, file)
        result.problems.extend(problems)
        if item is not None:
            by_id.setdefault(item.item_id, []).append((row.line, item))
    for item_id, rows in by_id.items():
        first_line, item = rows[0]
        if all(other == item for _, other in rows):
            result.records.append(item)
            for line, _ in rows[1:]:
                message = f"{field} {item_id} repeats line {first_line} exactly; read once"
                result.problems.append(Problem(file, line, field, message))
            continue
        lines = [line for line, _ in rows]
        for line in lines:
            others = ", ".join(str(n) for n in lines if n != line)
            message = (
                f"{field} {item_id} is also used on line(s) {others} with other content; "
                f"none of these rows is used, {advice}"
            )
            result.problems.append(Problem(file, line, field, message))
    return result


@dataclass
class _RawTable:
    columns: list[str]
    rows: list[tuple[int, list[Any]]]  # (line, cells in column order)
    problems: list[Problem]


def _check_columns(
    raw: _RawTable,
    file: str,
    required: Sequence[str],
    header: Callable[[str], str],
    header_line: int | None,
) -> ReadResult[TableRow]:
    if any(p.fatal for p in raw.problems):
        return ReadResult([], raw.problems)
    problems = list(raw.problems)
    names = [header(c) for c in raw.columns]
    first_index: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in first_index:
            problems.append(
                Problem(file, header_line, name, "column appears twice; only the first one is read")
            )
        else:
            first_index[name] = index
    missing = [c for c in required if c not in first_index]
    for column in missing:
        message = f"required column is missing; the file has: {', '.join(names) or 'no columns'}"
        problems.append(Problem(file, header_line, column, message, fatal=True))
    if missing:
        return ReadResult([], problems)
    if not raw.rows:
        problems.append(Problem(file, None, None, "has no data rows; export it again", True))
        return ReadResult([], problems)
    rows = [
        TableRow(line, {name: _cell(cells, i) for name, i in first_index.items()})
        for line, cells in raw.rows
    ]
    return ReadResult(rows, problems)


def _cell(cells: list[Any], index: int) -> str | None:
    return cell_text(cells[index]) if index < len(cells) else None


def _csv_rows(text: str, file: str) -> _RawTable:
    reader = csv.reader(io.StringIO(text, newline=""))
    table = _RawTable([], [], [])
    try:
        table.columns = next(reader, [])
        start = reader.line_num + 1
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue
            if len(cells) > len(table.columns):
                message = (
                    f"{len(cells)} cells but the header has {len(table.columns)}; "
                    "quote cells that contain commas. Row skipped"
                )
                table.problems.append(Problem(file, line, None, message))
                continue
            table.rows.append((line, cells))
    except csv.Error as exc:
        message = f"not a readable CSV file ({exc}); export it again"
        table.problems.append(Problem(file, reader.line_num, None, message, fatal=True))
    return table


def _jsonl_rows(text: str, file: str) -> _RawTable:
    table = _RawTable([], [], [])
    objects: list[tuple[int, dict[str, Any]]] = []
    for line, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            message = f"not valid JSON ({exc.msg} at column {exc.colno}); row skipped"
            table.problems.append(Problem(file, line, None, message))
            continue
        if not isinstance(value, dict):
            message = "expected a JSON object with one key per column; row skipped"
            table.problems.append(Problem(file, line, None, message))
            continue
        objects.append((line, value))
    table.columns = list(_ordered_union(obj.keys() for _, obj in objects))
    table.rows = [(line, [obj.get(c) for c in table.columns]) for line, obj in objects]
    return table


def _ordered_union(key_lists: Iterable[Iterable[str]]) -> dict[str, None]:
    union: dict[str, None] = {}
    for keys in key_lists:
        union.update(dict.fromkeys(keys))
    return union


def _parquet_rows(data: bytes, file: str) -> _RawTable:
    import pyarrow as pa  # only parquet inputs need it
    import pyarrow.parquet as pq

    try:
        arrow = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as exc:
        problem = Problem(file, None, None, f"not a readable parquet file ({exc})", fatal=True)
        return _RawTable([], [], [problem])
    columns = list(arrow.column_names)
    rows = [(n, [record[c] for c in columns]) for n, record in enumerate(arrow.to_pylist(), 1)]
    return _RawTable(columns, rows, [])

"""Loading a CSV, JSONL or parquet input into rows of text cells with line numbers.

Every reader goes through here so the same rules hold for every input:
- a cell is text or None: blank cells and the spellings tools write for a
  missing value (pandas `nan`, JSON `null`, Python `None`) are None, and
  surrounding whitespace is stripped; in a fail-closed read (the private
  registries) those spellings stay text, so the reader refuses them where a
  value belongs instead of reading them as blank; numbers become their text (`10330.0`,
  how pandas writes an integer column with gaps, becomes `10330`);
- header names have their whitespace collapsed (exports add stray spaces);
- line numbers are what an editor shows: the CSV header is its first non-blank
  line (line 1); JSONL line n is row n; parquet rows are numbered from 1;
- CSV is read as RFC 4180 with `multiline=True` (the public text sources): a
  quoted cell may hold line breaks, so one record may span several physical
  lines; a row's line is the one it starts on. It is accepted only when its
  quotes close into a well-formed record; a quote that never closes, or closes
  into broken quoting, is reported on the line where it opens and each following
  line is read on its own, so a stray quote never swallows the lines after it.
  Without it (the private registries and the contributions manifest) a record
  is one physical line (LF, CRLF or CR) and a line break inside a quoted cell is
  refused, naming the line. In both modes a stray quote, text after a closing
  quote, or more or fewer cells than the header is reported on its line and that
  record is not a row. Every non-blank data line is in a row or named by a
  Problem, and the result counts physical lines and records (`LineCount`);
- text is decoded as UTF-8 (a byte-order mark is allowed) and nothing else:
  guessing another encoding would silently corrupt names and sentences;
- the file is only read, never written.
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .problems import LineCount, Problem, ReadResult

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
    # the physical line a multi-line CSV record ends on (None: it is one line)
    last_line: int | None = None


def collapse_whitespace(name: str) -> str:
    return " ".join(str(name).split())


def cell_text(value: Any, *, literal: bool = False) -> str | None:
    """A cell as stripped text, None when it holds no value (`literal`: only a blank
    cell holds none, `null` or `nan` stay text)."""
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
    if not text or (not literal and text.casefold() in _MISSING_SPELLINGS):
        return None
    return text


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
    fail_closed: str | None = None,
    multiline: bool = False,
) -> TableRead:
    """Rows of a CSV, JSONL or parquet file (chosen by extension) with their line numbers.

    `header` maps each raw column name to the name readers use. A missing
    file, an empty one, a wrong encoding or a missing `required` column is
    fatal and yields no rows. A line that cannot be read as one row (quoting,
    cell count) is reported and left out of `records`; its cells, as far as
    they can be made out, are in `rejected`. With `fail_closed` (the private
    registries) every problem is fatal and row messages say `fail_closed`
    instead of "row skipped". `multiline` reads CSV as RFC 4180, quoted cells
    spanning lines; without it a line break inside a cell is refused on its line.
    """
    path = Path(path)
    file = str(path)
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        message = (
            f"{what} has an unknown extension {path.suffix!r}; use one of {', '.join(FORMATS)}"
        )
        return TableRead([], [Problem(file, None, None, message, fatal=True)])
    data, problem = read_bytes(path, what)
    if problem:
        return TableRead([], [problem])
    consequence = fail_closed or "row skipped"
    if kind == "parquet":
        raw = _parquet_rows(data, file)
    else:
        text, problem = decode_utf8(data, file)
        if problem:
            return TableRead([], [problem])
        if kind == "csv":
            raw = _csv_rows(text, file, consequence, multiline=multiline)
        else:
            raw = _jsonl_rows(text, file, consequence)
    result = _check_columns(raw, file, required, header, fail_closed)
    if fail_closed:
        result.problems = [dataclasses.replace(p, fatal=True) for p in result.problems]
    return result


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
    result = ReadResult[Any]([], list(table.problems), table.lines)
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
class TableRead(ReadResult[TableRow]):
    """`records`: the rows read; `rejected`: the lines that could not be read as a row
    (each named by a problem), with whatever cells could be made out of them."""

    rejected: list[TableRow] = dataclasses.field(default_factory=list)
    # the header as readers name its columns (`header` applied), and its line; empty and
    # None when the file could not be read that far
    columns: list[str] = dataclasses.field(default_factory=list)
    header_line: int | None = None


@dataclass
class _RawTable:
    columns: list[str]
    rows: list[tuple[int, list[Any]]]  # (line, cells in column order)
    problems: list[Problem]
    header_line: int | None = None
    # the non-blank lines after the header, and every line inside a multi-line record
    data_lines: list[int] = dataclasses.field(default_factory=list)
    rejected: list[tuple[int, list[Any]]] = dataclasses.field(default_factory=list)
    # first line -> last line of each record that spans several physical lines
    spans: dict[int, int] = dataclasses.field(default_factory=dict)


def _check_columns(
    raw: _RawTable,
    file: str,
    required: Sequence[str],
    header: Callable[[str], str],
    fail_closed: str | None,
) -> TableRead:
    if any(p.fatal for p in raw.problems):
        return TableRead([], raw.problems)
    problems: list[Problem] = []  # the header's first, then the lines' in order
    names = [header(c) for c in raw.columns]
    first_index: dict[str, int] = {}
    twice = (
        f"column appears twice; keep one. {fail_closed[:1].upper()}{fail_closed[1:]}"
        if fail_closed
        else "column appears twice; only the first one is read"
    )
    for index, name in enumerate(names):
        if name in first_index:
            problems.append(Problem(file, raw.header_line, name, twice))
        else:
            first_index[name] = index
    missing = [c for c in required if c not in first_index]
    for column in missing:
        message = f"required column is missing; the file has: {', '.join(names) or 'no columns'}"
        problems.append(Problem(file, raw.header_line, column, message, fatal=True))
    if missing:
        return TableRead([], problems, columns=names, header_line=raw.header_line)
    problems += raw.problems
    if not raw.data_lines:
        problems.append(Problem(file, None, None, "has no data rows; export it again", True))
        return TableRead([], problems, columns=names, header_line=raw.header_line)

    literal = fail_closed is not None

    def row(line: int, cells: list[Any]) -> TableRow:
        cells_by_name = {name: _cell(cells, i, literal) for name, i in first_index.items()}
        return TableRow(line, cells_by_name, raw.spans.get(line))

    rows = [row(line, cells) for line, cells in raw.rows]
    problems += _unaccounted(raw, file)
    spanned = sum(raw.spans[line] - line for line, _ in raw.rows if line in raw.spans)
    return TableRead(
        rows,
        problems,
        LineCount(len(raw.data_lines), len(rows), spanned),
        [row(line, cells) for line, cells in raw.rejected],
        names,
        raw.header_line,
    )


def _unaccounted(raw: _RawTable, file: str) -> list[Problem]:
    """Defence in depth: a data line that is neither a row nor named by a problem."""
    covered = {line for line, _ in raw.rows} | {p.row for p in raw.problems}
    for first, last in raw.spans.items():
        covered.update(range(first, last + 1))
    lost = [line for line in raw.data_lines if line not in covered]
    if not lost:
        return []
    message = (
        f"{len(lost)} line(s) ({_ranges(lost)}) were neither read nor reported; "
        "this is a RedVox bug, report it and do not build from this file"
    )
    return [Problem(file, lost[0], None, message, fatal=True)]


def _ranges(lines: list[int]) -> str:
    spans: list[list[int]] = []
    for line in lines:
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ", ".join(f"line {a}" if a == b else f"lines {a}-{b}" for a, b in spans)


def _cell(cells: list[Any], index: int, literal: bool = False) -> str | None:
    return cell_text(cells[index], literal=literal) if index < len(cells) else None


# CSV. With `multiline` (RFC 4180) a quoted cell may hold line breaks, as pandas,
# spreadsheets and the Hub viewer write comment cells: the record then runs on to
# the line where its quotes close, and is accepted only if it is well-formed
# there. Without it the exports read need no line break inside a cell, so a quoted
# cell left open at the end of a line is a quoting accident (a stray `"` or a
# broken cell). Either way an accident is reported where it opens, and every
# following line is still read on its own instead of being swallowed into that
# cell as a CSV library would.

_UNCLOSED, _AFTER_QUOTE, _STRAY = "unclosed", "after closing quote", "stray"
_QUOTING_FIX = 'quote the whole cell ("...", a quote inside it doubled as "")'


def _csv_rows(text: str, file: str, consequence: str, *, multiline: bool = False) -> _RawTable:
    table = _RawTable([], [], [])
    lines, breaks = _physical_lines(text)
    spans = _csv_library_spans(text)
    header = True
    for first, last, cells, error in _csv_records(lines, breaks, multiline):
        if error is None and not any(c.strip() for c in cells):
            continue  # a blank line, or one of empty cells only: nothing to read
        if header:
            if error:
                what = _quoting_message(error[1], None, spans.get(first), len(lines), multiline)
                problem = Problem(file, first, None, f"header: {what}; fix the header row", True)
                return _RawTable([], [], [problem])
            table.columns, table.header_line, header = cells, first, False
            continue
        table.data_lines.extend(range(first, last + 1))
        if last > first:
            table.spans[first] = last
        problem = _line_problem(
            cells, error, table.columns, spans.get(first), len(lines), multiline
        )
        if problem is None:
            table.rows.append((first, cells))
            continue
        field, what, fix = problem
        opened = [start for start, end in spans.items() if start < first <= end]
        if last > first:
            what += f" (in the record on lines {first}-{last})"
        elif opened and error is not None and error[1] != _UNCLOSED:
            what += f" (it may close the quote opened on line {opened[0]})"
        elif opened and error is None:
            what += " (it may be the rest of a cell broken over several lines)"
        message = f"{what}; {fix}. {consequence[:1].upper()}{consequence[1:]}"
        table.problems.append(Problem(file, first, field, message))
        table.rejected.append((first, cells))
    return table


def _csv_records(
    lines: list[str], breaks: list[str], multiline: bool
) -> Iterator[tuple[int, int, list[str], tuple[int, str] | None]]:
    """(first line, last line, cells, first quoting error) of each CSV record."""
    # A record's quotes can only close on a line holding an odd number of them.
    odd = [n for n, line in enumerate(lines, 1) if line.count('"') % 2] if multiline else []
    number = 1
    while number <= len(lines):
        cells, error = split_csv_line(lines[number - 1])
        last = number
        if multiline and error is not None and error[1] == _UNCLOSED:
            joined = _joined_record(lines, breaks, number, odd)
            if joined is not None:
                last, cells, error = *joined, None
        yield number, last, cells, error
        number = last + 1


def _joined_record(
    lines: list[str], breaks: list[str], first: int, odd: list[int]
) -> tuple[int, list[str]] | None:
    """(last line, cells) of the well-formed record that starts on line `first` with a
    quoted cell open at its end; None when its quotes never close into one."""
    for last in odd[bisect.bisect_right(odd, first) :]:
        text = "".join(lines[n - 1] + breaks[n - 1] for n in range(first, last))
        cells, error = split_csv_line(text + lines[last - 1])
        if error is None:
            return last, cells
        if error[1] != _UNCLOSED:
            return None
    return None


def _line_problem(
    cells: list[str],
    error: tuple[int, str] | None,
    columns: list[str],
    span_end: int | None,
    last_line: int,
    multiline: bool,
) -> tuple[str | None, str, str] | None:
    """(field, what is wrong, what to do) for a line that is not one clean row."""
    width = len(columns)
    if error is not None:
        index, kind = error
        field = collapse_whitespace(columns[index]) if index < width else None
        fix = "remove the stray quote or " + _QUOTING_FIX + ("" if multiline else " on one line")
        where = None if field else index
        return field, _quoting_message(kind, where, span_end, last_line, multiline), fix
    if len(cells) > width:
        what = f"{len(cells)} cells but the header has {width}"
        return None, what, "quote cells that contain commas"
    if len(cells) < width:
        what = f"{len(cells)} cells but the header has {width}"
        return None, what, "add the missing cells (an empty cell is nothing between two commas)"
    return None


def _quoting_message(
    kind: str, index: int | None, span_end: int | None, last_line: int, multiline: bool
) -> str:
    where = "" if index is None else f" (cell {index + 1})"
    if kind == _UNCLOSED:
        what = f"a quote opens this cell{where} and does not close " + (
            "into a well-formed record" if multiline else "on this line"
        )
        if span_end is not None and span_end >= last_line:
            what += (
                f": a CSV reader would swallow the rest of the file (up to line {span_end}) "
                "into this cell; each following line is read on its own"
            )
        elif span_end is not None:
            what += (
                f": a CSV reader would join it with the lines up to {span_end} into one "
                "record; each following line is read on its own"
            )
        else:
            what += " (a line break inside a cell, or a stray quote)"
        return what
    if kind == _AFTER_QUOTE:
        return f'text after the closing quote of a quoted cell{where} (a stray ")'
    return f'a stray " inside an unquoted cell{where}'


def split_csv_line(line: str) -> tuple[list[str], tuple[int, str] | None]:
    """The cells of one physical CSV line (RFC 4180 quoting, spaces allowed around a
    quoted cell) and the first quoting error as (cell index, kind), if any. The cells
    are a best effort when there is an error."""
    cells: list[str] = []
    error: tuple[int, str] | None = None
    i, n = 0, len(line)
    while True:
        j = i
        while j < n and line[j] in " \t":
            j += 1
        if j < n and line[j] == '"':
            parts, k = [], j + 1
            while True:
                q = line.find('"', k)
                if q < 0:
                    parts.append(line[k:])
                    cells.append("".join(parts))
                    return cells, error or (len(cells) - 1, _UNCLOSED)
                parts.append(line[k:q])
                if line.startswith('"', q + 1):
                    parts.append('"')
                    k = q + 2
                    continue
                k = q + 1
                break
            m = k
            while m < n and line[m] in " \t":
                m += 1
            if m < n and line[m] != ",":
                comma = line.find(",", m)
                stop = n if comma < 0 else comma
                parts.append(line[k:stop])
                error = error or (len(cells), _AFTER_QUOTE)
                m = stop
            cells.append("".join(parts))
            if m >= n:
                return cells, error
            i = m + 1
        else:
            comma = line.find(",", i)
            cell = line[i:] if comma < 0 else line[i:comma]
            if '"' in cell:
                error = error or (len(cells), _STRAY)
            cells.append(cell)
            if comma < 0:
                return cells, error
            i = comma + 1


def _physical_lines(text: str) -> tuple[list[str], list[str]]:
    """The lines an editor shows, without their line endings (LF, CRLF or CR), and
    those endings (kept inside a multi-line cell as written)."""
    lines = io.StringIO(text, newline="").readlines()
    contents = [line.rstrip("\r\n") for line in lines]
    return contents, [line[len(content) :] for line, content in zip(lines, contents, strict=True)]


def _csv_library_spans(text: str) -> dict[int, int]:
    """first line -> last line of each record the csv module would read over several
    lines: what a quoting accident would do in any other CSV reader (for messages)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    spans: dict[int, int] = {}
    start = 1
    try:
        for _ in reader:
            if reader.line_num > start:
                spans[start] = reader.line_num
            start = reader.line_num + 1
    except csv.Error:
        pass
    return spans


def _jsonl_rows(text: str, file: str, consequence: str) -> _RawTable:
    table = _RawTable([], [], [])
    objects: list[tuple[int, dict[str, Any]]] = []
    for line, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        table.data_lines.append(line)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            message = f"not valid JSON ({exc.msg} at column {exc.colno}); {consequence}"
            table.problems.append(Problem(file, line, None, message))
            continue
        if not isinstance(value, dict):
            message = f"expected a JSON object with one key per column; {consequence}"
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
    return _RawTable(columns, rows, [], data_lines=[n for n, _ in rows])

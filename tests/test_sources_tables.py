"""Rules every reader shares: encodings, empty files, NaN, line numbers, read-only."""

import csv
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from test_sources_check import DEMO, demo_config

from redvox.builder.cli import main
from redvox.schemas import DEMO_CONFIG
from redvox.sources.registry import read_participants
from redvox.sources.tables import cell_text, read_table

HEADER = "participant_key,gender,age_group,mother_tongue,ethnicity,languages\n"


def test_utf8_with_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "participants.csv"
    path.write_bytes(("\ufeff" + HEADER + "p01,female,25-34,Français,,fr\n").encode("utf-8"))
    result = read_participants(path)
    assert result.problems == []
    assert result.records[0].mother_tongue == "fr"


def test_non_utf8_bytes_are_fatal_and_say_how_to_fix(tmp_path):
    path = tmp_path / "participants.csv"
    path.write_bytes(
        (HEADER + "p01,female,25-34,en,,en\np02,male,25-34,Français,,fr\n").encode("latin-1")
    )
    result = read_participants(path)
    assert result.fatal and result.records == []
    [problem] = result.problems
    assert problem.row == 3
    assert str(problem).startswith(f"{path}:3: not UTF-8 text (byte 0xe7")
    assert "re-export the file as UTF-8" in problem.message


EMPTY = [(b"", "is empty"), (b"\n  \n", "is empty"), (None, "has no data rows")]


@pytest.mark.parametrize(
    ("extension", "content", "says"),
    [(ext, content, says) for ext in ("csv", "jsonl", "parquet") for content, says in EMPTY
     if not (ext == "jsonl" and content is None)],  # JSONL has no header to stand alone
)  # fmt: skip
def test_empty_files_are_fatal(tmp_path, extension, content, says):
    """The shared reader's own verdict, the one every table input gets before a reader
    (the participants registry) makes all its problems fatal: a file of no rows (no bytes,
    blank lines, or a header / parquet schema alone) is a fatal problem naming the file."""
    path = tmp_path / f"participants.{extension}"
    if content is not None:
        path.write_bytes(content)
    elif extension == "parquet":
        columns = HEADER.strip().split(",")
        pq.write_table(pa.table({c: pa.array([], pa.string()) for c in columns}), path)
    else:
        path.write_text(HEADER, encoding="utf-8")
    result = read_table(path, ["participant_key"], what="participants registry")
    assert result.records == [] and result.fatal
    [problem] = [p for p in result.problems if says in p.message]
    assert problem.fatal and problem.file == str(path)
    registry = read_participants(path)
    assert registry.fatal and registry.records == []
    assert says in str(registry.problems[-1]) and str(path) in str(registry.problems[-1])


@pytest.mark.parametrize("name", ["shades", "malert", "contributions", "participants", "consent"])
def test_sources_check_refuses_an_input_of_no_rows(tmp_path, name):
    """Each table input holding its header (or, for JSONL, a parquet schema) and no row:
    `sources check` exits 1 and names that file."""
    source = DEMO / yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))[name]
    if source.suffix == ".csv":
        empty = tmp_path / source.name
        empty.write_text(source.read_text(encoding="utf-8").splitlines()[0] + "\n")
    else:
        empty = tmp_path / f"{source.stem}.parquet"
        columns = json.loads(source.read_text(encoding="utf-8").splitlines()[0])
        pq.write_table(pa.table({c: pa.array([], pa.string()) for c in columns}), empty)
    config = demo_config(tmp_path, **{name: empty})
    result = CliRunner().invoke(main, ["sources", "check", "--no-audio", "--config", str(config)])
    assert result.exit_code == 1, result.output
    assert f"{empty}: has no data rows" in result.output


def test_unknown_extension_is_fatal(tmp_path):
    path = tmp_path / "participants.xlsx"
    path.write_text(HEADER)
    result = read_participants(path)
    assert result.fatal
    assert "unknown extension '.xlsx'" in result.problems[0].message


def test_missing_values_in_any_spelling_become_none():
    for blank in (None, "", "  ", "nan", "NaN", "null", "None", float("nan")):
        assert cell_text(blank) is None
    assert cell_text(10330.0) == "10330"
    assert cell_text(2.5) == "2.5"
    assert cell_text(" x ") == "x"
    assert cell_text(True) == "true"


def test_jsonl_bad_lines_are_reported_and_the_rest_read(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1, "b": NaN}\nnot json\n\n[1, 2]\n{"a": " 2 "}\n', encoding="utf-8")
    result = read_table(path, ["a"])
    assert [(r.line, r.cells) for r in result.records] == [
        (1, {"a": "1", "b": None}),
        (5, {"a": "2", "b": None}),
    ]
    assert [(p.row, p.fatal) for p in result.problems] == [(2, False), (4, False)]
    assert "not valid JSON" in result.problems[0].message


def test_row_with_extra_cells_is_reported(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n3,4,5\n", encoding="utf-8")
    result = read_table(path, ["a"])
    assert [r.line for r in result.records] == [2]
    assert (
        result.problems[0].row == 3
        and "quote cells that contain commas" in result.problems[0].message
    )


def test_duplicate_column_is_reported_and_first_kept(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a, a ,b\n1,2,3\n", encoding="utf-8")
    result = read_table(path, ["a", "b"])
    assert result.records[0].cells == {"a": "1", "b": "3"}
    assert (result.problems[0].row, result.problems[0].field) == (1, "a")


def test_row_with_missing_cells_is_reported(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1,2,3\n4,5\n", encoding="utf-8")
    result = read_table(path, ["a"])
    assert [r.line for r in result.records] == [2]
    [problem] = result.problems
    assert (problem.row, problem.fatal) == (3, False)
    assert str(problem).startswith(f"{path}:3: 2 cells but the header has 3; add the missing")
    assert [(r.line, r.cells["a"]) for r in result.rejected] == [(3, "4")]


def test_quoted_cells_with_commas_and_doubled_quotes_read_exactly(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b,c\n"x, y", "say ""hi""" ,""\n', encoding="utf-8")
    result = read_table(path, ["a", "b", "c"])
    assert result.problems == []
    assert result.records[0].cells == {"a": "x, y", "b": 'say "hi"', "c": None}


def test_a_stray_quote_swallows_no_later_line(tmp_path):
    # The csv module would read lines 3-6 as one record (one cell holding four lines).
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,2\n3,"4\n5,6\n\n7,8\n9,10"\n11,12\n', encoding="utf-8")
    result = read_table(path, ["a", "b"])
    assert [r.line for r in result.records] == [2, 4, 6, 8]
    assert [(p.row, p.field) for p in result.problems] == [(3, "b"), (7, "b")]
    opened, closed = (p.message for p in result.problems)
    assert "a quote opens this cell and does not close on this line" in opened
    assert "up to 7 into one record" in opened and opened.endswith("Row skipped")
    assert 'a stray " inside an unquoted cell (it may close the quote opened on line 3)' in closed
    assert (result.lines.lines, result.lines.records, result.lines.not_read) == (6, 4, 2)


def test_a_quote_open_at_the_end_of_the_file_names_its_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,2\n3,"4\n5,6\n', encoding="utf-8")
    result = read_table(path, ["a", "b"])
    assert [r.line for r in result.records] == [2, 4]
    [problem] = result.problems
    assert problem.row == 3 and "swallow the rest of the file (up to line 4)" in problem.message


def test_bom_crlf_and_trailing_blank_lines_are_read_exactly(tmp_path):
    plain, windows = tmp_path / "plain.csv", tmp_path / "windows.csv"
    text = 'a,b\n1,"x, y"\n2,z\n'
    plain.write_text(text, encoding="utf-8")
    windows.write_bytes(("\ufeff" + text.replace("\n", "\r\n") + "\r\n \r\n").encode())
    expected = read_table(plain, ["a", "b"])
    result = read_table(windows, ["a", "b"])
    assert result.problems == [] and result.records == expected.records
    assert result.lines == expected.lines


def test_fail_closed_makes_every_problem_fatal_and_says_so(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,a,b\n1,2,3\n4,5\n", encoding="utf-8")
    result = read_table(path, ["a", "b"], fail_closed="the build stops")
    assert [(p.row, p.fatal) for p in result.problems] == [(1, True), (3, True)]
    assert all("The build stops" in p.message for p in result.problems)
    assert [r.line for r in result.records] == [2]


def test_jsonl_lines_are_counted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\nnot json\n\n{"a": 2}\n', encoding="utf-8")
    result = read_table(path, ["a"])
    assert (result.lines.lines, result.lines.records) == (3, 2)


# --- RFC 4180: what the public text sources read (multiline=True) ---------------


def test_quoted_cells_may_span_lines_when_multiline(tmp_path):
    path = tmp_path / "t.csv"
    text = 'a,b,c\n1,"two\nlines",x\n2,"crlf\r\ninside, and ""quotes""",y\n3,"blank\n\nline",z\n4,5,6\n'
    path.write_bytes(text.encode())
    result = read_table(path, ["a", "b", "c"], multiline=True)
    assert result.problems == []
    assert [(r.line, r.last_line, r.cells["b"]) for r in result.records] == [
        (2, 3, "two\nlines"),
        (4, 5, 'crlf\r\ninside, and "quotes"'),
        (6, 8, "blank\n\nline"),
        (9, None, "5"),
    ]
    assert (result.lines.lines, result.lines.records, result.lines.spanned) == (8, 4, 4)
    assert result.lines.not_read == 0


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("terminator", ["\n", "\r\n"])
def test_whatever_a_csv_writer_quotes_reads_back_exactly(tmp_path, seed, terminator):
    rng = random.Random(seed)
    pieces = ["a", "b c", ",", '"', '""', "\n", "\r\n", "\n\n", "x,\ny", "é", "  "]
    rows = [
        [f"k{n}"] + ["".join(rng.choices(pieces, k=rng.randint(0, 4))) for _ in range(3)]
        for n in range(30)
    ]
    path = tmp_path / "t.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator=terminator)
        writer.writerow(["key", "b", "c", "d"])
        writer.writerows(rows)
    result = read_table(path, ["key", "b", "c", "d"], multiline=True)
    assert result.problems == []
    expected = [dict(zip(["key", "b", "c", "d"], map(cell_text, row), strict=True)) for row in rows]
    assert [r.cells for r in result.records] == expected
    physical = len(path.read_text(encoding="utf-8").splitlines()) - 1
    assert (result.lines.lines, result.lines.records, result.lines.not_read) == (physical, 30, 0)


def test_a_quote_that_never_closes_swallows_no_later_line_when_multiline(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,2\n3,"4\n5,6\n7,8\n', encoding="utf-8")
    result = read_table(path, ["a", "b"], multiline=True)
    assert [r.line for r in result.records] == [2, 4, 5]
    [problem] = result.problems
    assert (problem.row, problem.field) == (3, "b")
    assert "does not close into a well-formed record" in problem.message
    assert "swallow the rest of the file (up to line 5)" in problem.message


def test_a_quote_closing_into_broken_quoting_swallows_no_later_line(tmp_path):
    # Line 3's quote would close on line 4, but `"z` after it is no RFC 4180 record.
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,2\n3,"x\ny"z,9\n5,6\n', encoding="utf-8")
    result = read_table(path, ["a", "b"], multiline=True)
    assert [r.line for r in result.records] == [2, 5]
    assert [p.row for p in result.problems] == [3, 4]
    assert result.lines.not_read == 2


def test_a_multi_line_record_with_the_wrong_cell_count_is_named_by_its_lines(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,"x\ny",extra\n2,3\n', encoding="utf-8")
    result = read_table(path, ["a", "b"], multiline=True)
    assert [r.line for r in result.records] == [4]
    [problem] = result.problems
    assert problem.row == 2 and "3 cells but the header has 2" in problem.message
    assert "lines 2-3" in problem.message and problem.message.endswith("Row skipped")
    assert [(r.line, r.last_line) for r in result.rejected] == [(2, 3)]
    assert (result.lines.lines, result.lines.records, result.lines.not_read) == (3, 1, 2)


@pytest.mark.parametrize("fail_closed", [None, "the build stops"])
def test_without_multiline_a_line_break_inside_a_cell_is_refused_on_its_lines(
    tmp_path, fail_closed
):
    # The private registries read this way: nothing spans lines there.
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,"x\ny"\n2,3\n', encoding="utf-8")
    result = read_table(path, ["a", "b"], fail_closed=fail_closed)
    assert [r.line for r in result.records] == [4]
    assert [p.row for p in result.problems] == [2, 3]
    assert "does not close on this line" in result.problems[0].message
    assert all(p.fatal for p in result.problems) == bool(fail_closed)

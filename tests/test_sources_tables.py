"""Rules every reader shares: encodings, empty files, NaN, line numbers, read-only."""

import pytest

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


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"", "is empty"), (b"\n  \n", "is empty"), (HEADER.encode(), "has no data rows")],
)
def test_empty_files_are_fatal(tmp_path, content, says):
    path = tmp_path / "participants.csv"
    path.write_bytes(content)
    result = read_participants(path)
    assert result.fatal and result.records == []
    assert says in str(result.problems[-1]) and str(path) in str(result.problems[-1])


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

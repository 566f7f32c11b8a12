"""No run of more than 10 lines is written twice outside tests/: where the logic is the
same, one piece of code serves (`duplicates`, on PATH in the maintainers' environment;
skipped where it is not installed or its output cannot be read)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MIN_LINES = 11

HEADER = re.compile(r"^(?:(\d+) pairs? of places|no duplicates) \((\d+) files? read\)")
ROW = re.compile(r"^D\d+ (\S+?):(\d+)-(\d+) ~ (\S+?):(\d+)-(\d+)(?: .*)?$")
MORE = re.compile(r"^\(\+(\d+) more pairs?\)$")


def _report() -> list[str]:
    if shutil.which("duplicates") is None:
        pytest.skip("the `duplicates` command is not on PATH")
    result = subprocess.run(
        ["duplicates", "--repo", str(ROOT), "--min-lines", str(MIN_LINES), "--most", "50"]
        + ["--seconds", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return result.stdout.splitlines()


def _pairs(lines: list[str]) -> list[tuple[str, str, str]]:
    """(first file, second file, row) per reported pair; skips on output it cannot read,
    fails where the report is cut (unread files, more pairs than --most lists)."""
    header = HEADER.match(lines[0]) if lines else None
    if header is None:
        pytest.skip(f"`duplicates` printed no header this test can read: {lines[:1]}")
    incomplete = [line for line in lines if line.startswith("incomplete:")]
    assert not incomplete, "`duplicates` did not read the whole tree:\n" + "\n".join(incomplete)
    pairs, more = [], 0
    for line in lines[1:]:
        if row := ROW.match(line):
            pairs.append((row[1], row[4], line))
        elif cut := MORE.match(line):
            more = int(cut[1])
    expected = int(header[1] or 0)
    if len(pairs) + more != expected:
        pytest.skip(f"`duplicates` reported {expected} pairs, {len(pairs) + more} rows were read")
    assert not more, f"{more} pairs past --most were not listed:\n" + "\n".join(lines)
    return pairs


def test_no_duplicate_over_10_lines_outside_tests():
    found = [
        row
        for first, second, row in _pairs(_report())
        if not (first.startswith("tests/") and second.startswith("tests/"))
    ]
    assert not found, (
        f"code written twice (runs of {MIN_LINES}+ lines); make one piece of code serve:\n"
        + "\n".join(found)
    )

"""A withdrawal on a copy of the demo corpus: registry updated after a backup, next
MAJOR version built without the participant, holdings and the declaration reported."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.builder.pseudonym import load_pseudonym_key, pseudonymize
from redvox.builder.versions import get_version
from redvox.release.hub.withdraw import WithdrawalError, record_withdrawal
from redvox.schemas import DEMO_CONFIG, InputConfig

PARTICIPANT = "demo-p01"  # consented to public release, records in English


@pytest.fixture
def corpus(tmp_path) -> Path:
    shutil.copytree(
        DEMO_CONFIG.parent, tmp_path / "demo", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tmp_path / "demo" / "config.yaml"


def _consent_rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_withdrawal_rebuilds_the_next_major_without_the_participant(demo_release, corpus, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(demo_release["version_dir"], out / "1.0.0")
    consent = corpus.parent / "consent.csv"
    before = consent.read_text()
    result = CliRunner(env={"HF_TOKEN": None}).invoke(
        main,
        ["release", "withdraw", PARTICIPANT, "--config", str(corpus), "--out", str(out),
         "--date", "2026-07-01", "--cache", str(demo_release["out"] / ".cache")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    new = f"{get_version().parts[0] + 1}.0.0"  # the next MAJOR after the latest declared
    assert f"building v{new} (the configuration of {get_version().tag})" in result.output

    rows = {r["participant_key"]: r for r in _consent_rows(consent)}
    assert rows[PARTICIPANT]["withdrawal_date"] == "2026-07-01"
    backups = list(corpus.parent.glob("consent.csv.*.bak"))
    assert len(backups) == 1 and backups[0].read_text() == before

    config = InputConfig.load(corpus)
    user_id = pseudonymize(load_pseudonym_key(config.pseudonym_key_file), PARTICIPANT)
    for dataset_set in ("public", "full"):
        shards = sorted((out / new / dataset_set / "data").glob("*/*.parquet"))
        assert shards
        ids = {
            u
            for s in shards
            for u in pq.read_table(s, columns=["user_id"]).column("user_id").to_pylist()
        }
        assert user_id not in ids
    report = result.output
    for folder in ("1.0.0/public", "1.0.0/full", "1.0.0/staged"):
        assert f"{out / folder}" in report
    assert f"{new}/" not in report.split("versions holding rows")[1].split("Purging")[0]
    assert "super_squash_history" in report and "delete every version tag" in report
    assert f'"version": "{new}"' in report and "Withdrawal of 1 participant" in report


def test_an_unknown_key_changes_nothing(corpus):
    consent = corpus.parent / "consent.csv"
    before = consent.read_text()
    with pytest.raises(WithdrawalError, match="no participant 'demo-p99'"):
        record_withdrawal(consent, "demo-p99", dt.date(2026, 7, 1), known={"demo-p01"})
    assert consent.read_text() == before and not list(corpus.parent.glob("*.bak"))


def test_an_earlier_withdrawal_date_is_kept(corpus):
    consent = corpus.parent / "consent.csv"
    withdrawn = next(r for r in _consent_rows(consent) if r["withdrawal_date"])
    record_withdrawal(consent, withdrawn["participant_key"], dt.date(2099, 1, 1), known=set())
    after = next(
        r for r in _consent_rows(consent) if r["participant_key"] == withdrawn["participant_key"]
    )
    assert after["withdrawal_date"] == withdrawn["withdrawal_date"]


BROKEN_ROWS = {
    "unclosed quote": 'demo-p05,"yes,yes,,v1.1\n',
    "extra cell": "demo-p05,yes,yes,,v1.1,withdrew by e-mail\n",
    "zero-width key": "demo-p05\u200b,yes,yes,2026-04-01,v1.1\n",
    "null date": "demo-p05,yes,yes,null,v1.1\n",
}


@pytest.mark.parametrize("broken", BROKEN_ROWS)
def test_a_refused_withdrawal_leaves_the_registry_byte_identical(corpus, tmp_path, broken):
    consent = corpus.parent / "consent.csv"
    with consent.open("a", encoding="utf-8") as fh:
        fh.write(BROKEN_ROWS[broken])
    before = hashlib.sha256(consent.read_bytes()).hexdigest()
    result = CliRunner(env={"HF_TOKEN": None}).invoke(
        main,
        ["release", "withdraw", PARTICIPANT, "--config", str(corpus), "--out",
         str(tmp_path / "out"), "--date", "2026-07-01"],
    )  # fmt: skip
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()  # one line, naming the row to fix
    assert "consent.csv:12" in line and "the withdrawal was not recorded" in line
    assert hashlib.sha256(consent.read_bytes()).hexdigest() == before
    assert not list(corpus.parent.glob("consent.csv.*")) and not (tmp_path / "out").exists()
    # Called directly, the recorder refuses the same way.
    with pytest.raises(WithdrawalError, match=r"consent.csv:12"):
        record_withdrawal(consent, PARTICIPANT, dt.date(2026, 7, 1), known={PARTICIPANT})
    assert hashlib.sha256(consent.read_bytes()).hexdigest() == before


def test_a_recorded_withdrawal_changes_only_the_participants_lines(corpus):
    consent = corpus.parent / "consent.csv"
    # CRLF line ends, a byte-order mark and a quoted cell elsewhere: all kept as they were.
    lines = consent.read_text().splitlines()
    lines[3] = lines[3].replace("demo-p03,yes", 'demo-p03,"yes"')
    consent.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    before = consent.read_bytes().split(b"\r\n")
    record_withdrawal(consent, PARTICIPANT, dt.date(2026, 7, 1), known={PARTICIPANT})
    after = consent.read_bytes().split(b"\r\n")
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [1]  # demo-p01's line, and nothing else
    assert after[1] == b"demo-p01,yes,yes,2026-07-01,v1.0"
    # A participant with no consent row gets one appended, with the same line end.
    record_withdrawal(consent, "demo-p08", dt.date(2026, 7, 2), known={"demo-p08"})
    assert consent.read_bytes().endswith(b"\r\ndemo-p08,,,2026-07-02,\r\n")


def test_a_key_variant_is_refused_and_the_registered_key_named(corpus):
    consent = corpus.parent / "consent.csv"
    before = consent.read_bytes()
    with pytest.raises(WithdrawalError, match="did you mean 'demo-p08'"):
        record_withdrawal(consent, "Demo-P08", dt.date(2026, 7, 1), known={"demo-p08"})
    assert consent.read_bytes() == before

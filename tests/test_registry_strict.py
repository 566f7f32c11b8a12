"""The private registries read nothing they were not told to read: CSV only, known
columns only, no export placeholder counted as a value, no personal data in free text.
And `release withdraw` writes a registry that the build reads exactly as intended, with
the file's permissions kept, or refuses leaving it byte-identical.

Each test breaks a copy of the demo corpus the way an export or an operator would and
checks what a maintainer notices: the build refuses naming file, line and field, a
withdrawn participant is not in the public set, or the registry is byte-identical.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import test_registry_fail_closed
import yaml
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from redvox.builder.cli import main
from redvox.builder.consent import admitted_keys, consent_states
from redvox.builder.pipeline import BuildError, BuildOptions, build_version
from redvox.builder.versions import VERSIONS
from redvox.release.hub import withdraw as withdraw_module
from redvox.release.hub.withdraw import WithdrawalError, record_withdrawal
from redvox.schemas import DEMO_CONFIG, ConsentState, InputConfig, resolve_consent
from redvox.schemas.vocab import VocabularyError, screen_free_text
from redvox.sources.inputs import load_inputs
from redvox.sources.registry import read_consent, read_participants, read_registries

V1_LANGUAGES = VERSIONS["1.0.0"].config.languages
DEMO = DEMO_CONFIG.parent
CONSENT_HEADER = (
    "participant_key,participation_consent,public_release_consent,withdrawal_date,"
    "consent_form_version"
)


corpus = test_registry_fail_closed.corpus  # the same copy of the demo's tables


def set_config(corpus: Path, **paths: Path) -> None:
    config = corpus / "config.yaml"
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    raw.update({name: str(path) for name, path in paths.items()})
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")


def inputs_of(corpus: Path):
    return load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)


def public_keys(inputs) -> set[str]:
    """Who would reach the public set if a caller ignored the fatal problems."""
    return admitted_keys(consent_states(inputs.participants, inputs.consent), "public")


def check(corpus: Path):
    return CliRunner().invoke(
        main, ["sources", "check", "--no-audio", "--config", str(corpus / "config.yaml")]
    )


def replace_line(path: Path, number: int, old: str, new: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert old in lines[number - 1], lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    path.write_bytes("".join(lines).encode("utf-8"))


def csv_line(*cells: str) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    return buffer.getvalue()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- 1. formats and columns --------------------------------------------------------


def consent_as_jsonl(corpus: Path, update: dict, drop: tuple[str, ...] = ()) -> Path:
    """The demo consent registry as JSON Lines, plus a row of demo-p03 (their withdrawal)
    with `update` applied and the keys `drop` removed."""
    with (corpus / "consent.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    path = corpus / "consent.jsonl"
    withdrawal = {k: v for k, v in {**rows[2], **update}.items() if k not in drop}
    lines = [json.dumps(row) for row in [*rows, withdrawal]]  # NaN is written as NaN
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


JSONL_WITHDRAWALS = {
    "title case key": ({"Withdrawal_Date": "2026-04-01"}, ()),
    "spaced key": ({"withdrawal date": "2026-04-01"}, ()),
    "camel case key": ({"withdrawalDate": "2026-04-01"}, ()),
    "misspelled key": ({"withdrawl_date": "2026-04-01"}, ("withdrawal_date",)),
    "zero-width key": ({"withdrawal_date\u200b": "2026-04-01"}, ()),
    "missing key": ({}, ("withdrawal_date",)),
    "NaN": ({"withdrawal_date": float("nan")}, ()),
    "a number": ({"withdrawal_date": 20260401}, ()),
    "a list": ({"withdrawal_date": ["2026-04-01"]}, ()),
}


@pytest.mark.parametrize("how", JSONL_WITHDRAWALS)
def test_a_jsonl_consent_registry_is_refused_and_publishes_nobody(corpus, how):
    path = consent_as_jsonl(corpus, *JSONL_WITHDRAWALS[how])
    set_config(corpus, consent=path)
    inputs = inputs_of(corpus)
    fatal = [p for p in inputs.problems if p.fatal]
    assert fatal and fatal[0].file == str(path)
    assert "must be a CSV file" in fatal[0].message and ".jsonl" in fatal[0].message
    assert "demo-p03" not in public_keys(inputs)  # the withdrawal is never read as absent
    assert public_keys(inputs) == set()  # nothing of a refused registry is read
    result = check(corpus)
    assert result.exit_code == 1
    assert f"{path}: the consent registry must be a CSV file" in result.output


@pytest.mark.parametrize("extension", ["jsonl", "ndjson", "parquet"])
@pytest.mark.parametrize("registry", ["participants", "consent"])
def test_a_registry_in_any_format_but_csv_is_refused(corpus, registry, extension):
    with (corpus / f"{registry}.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    path = corpus / f"{registry}.{extension}"
    if extension == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    reader = read_participants if registry == "participants" else read_consent
    result = reader(path)
    assert result.fatal and result.records == []
    assert str(result.problems[0]).startswith(f"{path}: the {registry}")
    assert "must be a CSV file" in result.problems[0].message


CONSENT_HEADER_VARIANTS = {
    "title case": "Withdrawal_Date",
    "space": "withdrawal date",
    "camel case": "withdrawalDate",
    "misspelled": "withdrawl_date",
    "zero-width space": "withdrawal_date\u200b",
}


@pytest.mark.parametrize("variant", CONSENT_HEADER_VARIANTS)
def test_a_consent_column_spelled_otherwise_is_fatal_naming_it(corpus, variant):
    name = CONSENT_HEADER_VARIANTS[variant]
    consent = corpus / "consent.csv"
    replace_line(consent, 1, "withdrawal_date", name)
    replace_line(consent, 4, "demo-p03,yes,yes,,", "demo-p03,yes,yes,2026-04-01,")
    inputs = inputs_of(corpus)
    [unknown] = [p for p in inputs.problems if p.field == name]
    assert unknown.fatal and unknown.file == str(consent) and unknown.row == 1
    assert "unknown column" in unknown.message
    assert "participant_key, participation_consent" in unknown.message  # the known ones
    assert "demo-p03" not in public_keys(inputs)
    result = check(corpus)
    assert result.exit_code == 1 and f"{consent}:1: {name}: unknown column" in result.output


@pytest.mark.parametrize("extra", ["withdrawn_on", "Withdrawal_Date", "notes", ""])
def test_an_extra_consent_column_is_fatal_and_a_value_in_it_denies(corpus, tmp_path, extra):
    consent = corpus / "consent.csv"
    lines = consent.read_text(encoding="utf-8").splitlines()
    lines[0] += f",{extra}"
    lines[1:] = [line + "," for line in lines[1:]]
    lines[3] = lines[3] + "2026-04-01"  # demo-p03 withdrew, in the extra column
    consent.write_text("\n".join(lines) + "\n", encoding="utf-8")
    inputs = inputs_of(corpus)
    [problem] = [p for p in inputs.problems if p.fatal]
    assert (problem.file, problem.row, problem.field) == (str(consent), 1, extra)
    assert "unknown column" in problem.message
    assert "withdrawal_date, consent_form_version" in problem.message
    # Even read past the fatal problem, the row with a value in it counts as no consent.
    assert "demo-p03" not in public_keys(inputs)
    assert {"demo-p01", "demo-p02"} <= public_keys(inputs)
    config = InputConfig.load(corpus / "config.yaml")
    with pytest.raises(BuildError, match=r"consent\.csv:1: "):
        build_version(VERSIONS["1.0.0"], config, BuildOptions(out=tmp_path / "out"))
    assert not (tmp_path / "out" / "1.0.0").exists()


@pytest.mark.parametrize("extra", ["email", "Ethnicity", "ethnicity_note"])
def test_an_extra_participants_column_is_fatal_naming_it(corpus, extra):
    participants = corpus / "participants.csv"
    lines = participants.read_text(encoding="utf-8").splitlines()
    lines[0] += f",{extra}"
    lines[1:] = [line + "," for line in lines[1:]]
    participants.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = read_participants(participants)
    [problem] = result.problems
    assert (problem.row, problem.field, problem.fatal) == (1, extra, True)
    assert "unknown column" in problem.message and "ethnicity, languages" in problem.message
    assert check(corpus).exit_code == 1


def test_the_optional_ethnicity_column_may_be_left_out(tmp_path):
    path = tmp_path / "participants.csv"
    path.write_text("participant_key,gender,age_group,mother_tongue,languages\np1,f,25-34,en,en\n")
    result = read_participants(path)
    assert result.problems == [] and result.records[0].ethnicity is None


# --- 2. placeholders -----------------------------------------------------------------

PLACEHOLDERS = [
    "NA", "#N/A", "<NA>", "NaT", "n.a.", "N.A.", "#NV", "undefined", "unknown", "missing",
    "(blank)", "\u2014", "\u2013", "---", "?", ".", "_", "0", "\\N", "#VALUE!", "#WERT!",
    "\u200b", "\u2060", "\ufeff", "\u00ad", "\u3164", "\u200b\u2060",
]  # fmt: skip


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_a_placeholder_form_version_is_refused_and_is_no_consent(corpus, placeholder):
    consent = corpus / "consent.csv"
    replace_line(consent, 6, "demo-p05,yes,yes,,v1.1", f"demo-p05,yes,yes,,{placeholder}")
    inputs = inputs_of(corpus)
    [problem] = [p for p in inputs.problems if p.fatal]
    assert (problem.file, problem.row, problem.field) == (str(consent), 6, "consent_form_version")
    assert "leave the cell empty or write the value" in problem.message
    assert "demo-p05" not in public_keys(inputs)
    assert check(corpus).exit_code == 1


@pytest.mark.parametrize("placeholder", [p for p in PLACEHOLDERS if p != "0"])
@pytest.mark.parametrize(
    "column, line, old, new",
    [
        ("withdrawal_date", 6, "demo-p05,yes,yes,,v1.1", "demo-p05,yes,yes,{},v1.1"),
        ("public_release_consent", 6, "demo-p05,yes,yes,,v1.1", "demo-p05,yes,{},,v1.1"),
        ("ethnicity", 2, "EN-US,White,", "EN-US,{},"),
    ],
)
def test_a_placeholder_is_refused_in_every_registry_column(
    corpus, placeholder, column, line, old, new
):
    name = "participants.csv" if column == "ethnicity" else "consent.csv"
    replace_line(corpus / name, line, old, new.format(placeholder))
    inputs = inputs_of(corpus)
    fatal = [p for p in inputs.problems if p.fatal]
    assert (fatal[0].file, fatal[0].row, fatal[0].field) == (str(corpus / name), line, column)
    if column == "ethnicity":
        assert "demo-p01" not in inputs.participants  # not published as an answer
    else:
        assert "demo-p05" not in public_keys(inputs)


@pytest.mark.parametrize("key", ["---", ".", "_", "-", "\u3164"])
def test_a_participant_key_of_no_letter_or_digit_is_refused(corpus, key):
    participants = corpus / "participants.csv"
    with participants.open("a", encoding="utf-8") as fh:
        fh.write(f"{key},female,25-34,en,,en\n")  # line 13
    result = read_participants(participants)
    assert result.problems
    for problem in result.problems:
        assert (problem.row, problem.field, problem.fatal) == (13, "participant_key", True)
    assert key not in {p.participant_key for p in result.records}


@pytest.mark.parametrize("version", ["v1.0", "2024-03", "1", "V2", "1.1-it", "A", "0.9", "v0"])
def test_a_real_form_version_is_consent(corpus, version):
    consent = corpus / "consent.csv"
    replace_line(consent, 6, "demo-p05,yes,yes,,v1.1", f"demo-p05,yes,yes,,{version}")
    inputs = inputs_of(corpus)
    assert not inputs.fatal, inputs.problems
    assert "demo-p05" in public_keys(inputs)
    assert inputs.consent["demo-p05"][0].consent_form_version == version


def test_a_number_is_still_a_key(tmp_path):
    participants = tmp_path / "participants.csv"
    participants.write_text(
        "participant_key,gender,age_group,mother_tongue,ethnicity,languages\n"
        "0,female,25-34,en,,en\n7,male,25-34,en,,en\n"
    )
    consent = tmp_path / "consent.csv"
    consent.write_text(f"{CONSENT_HEADER}\n0,yes,yes,,v1\n7,yes,no,,v1\n")
    registries = read_registries(participants, consent)
    assert registries.problems == []
    assert resolve_consent(registries.by_participant()["0"]) is ConsentState.PUBLIC


def test_the_demo_registries_still_read_without_a_problem():
    registries = read_registries(DEMO / "participants.csv", DEMO / "consent.csv")
    assert registries.problems == []
    assert len(registries.participants.records) == 11 and len(registries.consent.records) == 10


# --- 3. personal data in free text --------------------------------------------------

PERSONAL = [
    # German compound street names, other street forms
    "Hauptstraße 5", "Bahnhofstrasse 12, Zürich", "Gartenweg 3", "Marktplatz 1",
    "Mühlenstr. 8", "12, chemin des Vignes", "5 bd Voltaire", "V.le Europa 7",
    "vicolo Stretto 4", "C/ Mayor 3, Madrid", "Karl-Marx-Allee 12", "Rua Augusta 10",
    # postcodes
    "SW1A 1AA", "White, EC1A 1BB", "K1A 0B1",
    # e-mail addresses, obfuscated or not, URLs and handles
    "anna.rossi\uff20example\uff0ecom", "name at example dot com", "anna(at)gmx(dot)de",
    "anna [at] gmx [dot] de", "anna@example", "anna @ example.com", "t.me/anna_rossi",
    "anna-rossi.ch", "@anna.rossi", "White (anna\u200b@example.org)",
    # phone numbers in any digits or separators
    "\u00b3\u2074\u2077\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077", "34_71_23_45_67",
    "\uff13\uff14\uff17 \uff11\uff12\uff13 \uff14\uff15\uff16\uff17", "347\u200b123\u200b4567",
    # already refused before, still refused
    "lives at 12 Via Roma; phone 555-0199", "Black British, 221B Baker Street", "born 1987",
]  # fmt: skip
ANSWERS = [
    "White", "Black British", "Mixed: White and Asian", "Latino/a", "South Asian (Indian)",
    "Afro-Caribbean", "Italian-Moroccan", "prefer not to say", "Asiatico", "Blanc / Européen",
    "Weiß", "nordafricano", "Roma", "Sinti", "Hispanic or Latino", "East Asian; Chinese",
    "White European", "North African", "Latina", "Mixed", "Mixed, 2nd generation (30s)",
    "Latin@", "Black Caribbean", "Arab", "Kurdish", "Métis", "Pacific Islander", "Jewish",
    "Berber (Amazigh)", "half Japanese, half German", "White – Irish", "Bianco/a",
    "Deutsch-Türkisch", "Maghrébin", "Afro-Latina", "Mestizo", "Romani", "St. Lucian",
    "Norwegian", "Weiß (deutsch)", "Asian - Other", "Other: Armenian",
]  # fmt: skip


@pytest.mark.parametrize("text", PERSONAL)
def test_personal_data_in_ethnicity_is_refused_naming_the_row(corpus, text):
    participants = corpus / "participants.csv"
    replace_line(participants, 2, "EN-US,White,", "EN-US," + csv_line(text).rstrip("\n") + ",")
    result = read_participants(participants)
    [problem] = result.problems
    assert (problem.file, problem.row, problem.field, problem.fatal) == (
        str(participants),
        2,
        "ethnicity",
        True,
    )
    assert "would be published as written" in problem.message
    assert "demo-p01" in result.refused and "demo-p01" not in result.records


@pytest.mark.parametrize("text", ANSWERS)
def test_an_ethnicity_answer_is_kept_as_written(corpus, text):
    participants = corpus / "participants.csv"
    replace_line(participants, 2, "EN-US,White,", "EN-US," + csv_line(text).rstrip("\n") + ",")
    result = read_participants(participants)
    assert result.problems == []
    assert result.records[0].ethnicity == text


def test_the_screen_names_what_it_found():
    with pytest.raises(VocabularyError, match="an e-mail address"):
        screen_free_text("anna(at)gmx(dot)de", "ethnicity")
    with pytest.raises(VocabularyError, match="a postcode"):
        screen_free_text("SW1A 1AA", "ethnicity")
    with pytest.raises(VocabularyError, match="a street address"):
        screen_free_text("Hauptstraße 5", "ethnicity")


# --- 4-7. withdraw -------------------------------------------------------------------


@pytest.fixture
def demo(tmp_path) -> Path:
    """A copy of the whole demo folder; returns its config."""
    shutil.copytree(DEMO, tmp_path / "demo", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "demo" / "config.yaml"


def withdraw_cli(config: Path, out: Path, key: str = "demo-p03", date: str = "2026-07-01"):
    return CliRunner(env={"HF_TOKEN": None}).invoke(
        main,
        ["release", "withdraw", key, "--config", str(config), "--out", str(out), "--date", date],
    )


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400])
def test_a_withdrawal_keeps_the_registry_mode(demo, mode):
    consent = demo.parent / "consent.csv"
    consent.chmod(mode)
    old = os.umask(0o022)
    try:
        backup = record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known=set())
    finally:
        os.umask(old)
    assert stat.S_IMODE(consent.stat().st_mode) == mode
    assert stat.S_IMODE(backup.stat().st_mode) == mode  # the backup holds the same data
    theirs = [r for r in read_consent(consent).records if r.participant_key == "demo-p03"]
    assert resolve_consent(theirs) is ConsentState.WITHDRAWN


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_a_withdrawal_keeps_the_registry_owner_and_group(demo):
    consent = demo.parent / "consent.csv"
    os.chown(consent, 4321, 4322)
    consent.chmod(0o640)
    backup = record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known=set())
    for path in (consent, backup):
        info = path.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4321, 4322, 0o640)


def test_a_space_before_a_quoted_cell_is_kept_and_only_the_date_changes(demo):
    consent = demo.parent / "consent.csv"
    replace_line(consent, 4, "demo-p03,yes,yes,,v1.0", 'demo-p03,yes,yes,, "v1,0"')
    before = read_consent(consent)
    assert before.problems == []  # the reader accepts it
    old = consent.read_bytes()
    record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known=set())
    new = consent.read_bytes()
    assert new == old.replace(b'demo-p03,yes,yes,, "v1,0"', b'demo-p03,yes,yes,2026-07-01, "v1,0"')
    after = read_consent(consent)
    assert after.problems == []
    changed = [(a, b) for a, b in zip(before.records, after.records, strict=True) if a != b]
    [(was, now)] = changed
    assert was.participant_key == now.participant_key == "demo-p03"
    assert now.withdrawal_date == dt.date(2026, 7, 1) and now.consent_form_version == "v1,0"


def test_the_withdrawal_in_the_cli_reaches_the_next_build_with_quoted_cells(demo, tmp_path):
    """The reviewer's case end to end: withdraw, and the next build reads the registry."""
    consent = demo.parent / "consent.csv"
    replace_line(consent, 4, "demo-p03,yes,yes,,v1.0", 'demo-p03,yes,yes,, "v1,0"')
    record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known=set())
    inputs = load_inputs(InputConfig.load(demo), V1_LANGUAGES)
    assert not inputs.fatal, inputs.problems
    assert "demo-p03" not in public_keys(inputs)
    assert resolve_consent(inputs.consent["demo-p03"]) is ConsentState.WITHDRAWN


@pytest.mark.parametrize("char", ["\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\x0b", "\x0c"])
def test_a_cell_ending_in_a_separator_character_is_withdrawn_correctly(demo, char):
    consent = demo.parent / "consent.csv"
    replace_line(consent, 4, "demo-p03,yes,yes,,v1.0", f"demo-p03,yes{char},yes,,v1.0")
    before = read_consent(consent)
    assert before.problems == []  # the reader strips it: this is demo-p03's "yes"
    old = consent.read_bytes()
    record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known=set())
    expected = f"demo-p03,yes{char},yes,2026-07-01,v1.0".encode()
    assert consent.read_bytes() == old.replace(f"demo-p03,yes{char},yes,,v1.0".encode(), expected)
    after = read_consent(consent)
    assert after.problems == []
    [record] = [r for r in after.records if r.participant_key == "demo-p03"]
    assert record.withdrawal_date == dt.date(2026, 7, 1)


def test_a_jsonl_registry_is_refused_by_withdraw_in_one_line(demo, tmp_path):
    consent = consent_as_jsonl(demo.parent, {"withdrawal_date": "2026-04-01"})
    set_config(demo.parent, consent=consent)
    before = digest(consent)
    result = withdraw_cli(demo, tmp_path / "out")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    (line,) = result.output.strip().splitlines()
    assert f"{consent}: the consent registry must be a CSV file" in line
    assert "the withdrawal was not recorded" in line
    assert digest(consent) == before and not list(demo.parent.glob("consent.jsonl.*"))
    with pytest.raises(WithdrawalError, match="must be a CSV file"):
        record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known={"demo-p03"})
    assert digest(consent) == before


def test_a_rewrite_the_reader_would_read_otherwise_is_refused(demo, monkeypatch):
    """Defence in depth: whatever goes wrong composing the new registry, it is read back
    with the build's reader first, and anything but the one withdrawal is refused."""
    consent = demo.parent / "consent.csv"
    before = digest(consent)

    def broken(line: str, index: int, value: str) -> str:
        return line.replace("yes,yes", "yes,no", 1)  # demo-p03's public consent, not the date

    monkeypatch.setattr(withdraw_module, "_set_cell", broken)
    with pytest.raises(WithdrawalError) as caught:
        record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known=set())
    message = str(caught.value)
    assert f"{consent}:4" in message and "would not read back" in message
    assert "the withdrawal was not recorded" in message and "unchanged" in message
    assert digest(consent) == before and not list(demo.parent.glob("consent.csv.*"))


def test_an_added_row_is_read_back_too(demo):
    consent = demo.parent / "consent.csv"
    before = read_consent(consent)
    record_withdrawal(consent, "demo-p08", dt.date(2026, 7, 2), known={"demo-p08"})
    after = read_consent(consent)
    assert after.problems == [] and after.records[:-1] == before.records
    assert after.records[-1].participant_key == "demo-p08"
    assert resolve_consent([after.records[-1]]) is ConsentState.WITHDRAWN


@pytest.mark.parametrize("date", ["2026-W11-1", "2026-068", "20260315", "2026-03-15T00:00"])
def test_withdraw_takes_only_a_yyyy_mm_dd_date(demo, tmp_path, date):
    consent = demo.parent / "consent.csv"
    before = digest(consent)
    result = withdraw_cli(demo, tmp_path / "out", date=date)
    assert result.exit_code != 0 and "YYYY-MM-DD" in result.output
    assert "Traceback" not in result.output
    assert digest(consent) == before and not list(demo.parent.glob("consent.csv.*"))
    with pytest.raises(WithdrawalError, match="YYYY-MM-DD"):
        withdraw_module._withdrawal_date(date)


CELL_TEXT = st.text(alphabet=st.sampled_from(list('ab1 ,"\t\x1c\x85\u2028-')), max_size=6)


@st.composite
def csv_lines(draw) -> str:
    """One CSV line as exports and editors write them: cells quoted or not, spaces
    around a quoted cell."""
    parts = []
    for _ in range(5):
        text = draw(CELL_TEXT)
        if draw(st.booleans()) or any(c in text for c in ',"'):
            text = " " * draw(st.integers(0, 2)) + '"' + text.replace('"', '""') + '"'
            text += " " * draw(st.integers(0, 2))
        parts.append(text)
    return ",".join(parts)


@settings(max_examples=300, deadline=None)
@given(line=csv_lines(), index=st.integers(0, 4))
def test_setting_a_cell_changes_that_cell_only_as_the_reader_splits_it(line, index):
    from redvox.sources.tables import split_csv_line

    cells, error = split_csv_line(line)
    assume(error is None and len(cells) == 5)
    new = withdraw_module._set_cell(line, index, "2026-07-01")
    after, error = split_csv_line(new)
    assert error is None
    assert after == [*cells[:index], "2026-07-01", *cells[index + 1 :]]


def test_two_withdrawals_in_one_second_keep_both_backups(demo):
    consent = demo.parent / "consent.csv"
    original = consent.read_bytes()
    first = record_withdrawal(consent, "demo-p03", dt.date(2026, 7, 1), known=set())
    middle = consent.read_bytes()
    second = record_withdrawal(consent, "demo-p05", dt.date(2026, 7, 1), known=set())
    assert first != second
    assert first.read_bytes() == original and second.read_bytes() == middle

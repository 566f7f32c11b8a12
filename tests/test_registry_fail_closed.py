"""The private registries fail closed, and no CSV line disappears without a report.

Each test breaks a copy of the demo corpus the way a spreadsheet export does and
checks what a maintainer would see: the build stops naming the file and line,
`redvox sources check` exits 1, and every data line is a record or a problem.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.builder.consent import admitted_keys, consent_states
from redvox.builder.pipeline import BuildError, BuildOptions, build_version
from redvox.builder.versions import VERSIONS
from redvox.schemas import DEMO_CONFIG, ConsentState, InputConfig, resolve_consent
from redvox.sources.inputs import load_inputs
from redvox.sources.registry import read_consent, read_participants

V1_LANGUAGES = VERSIONS["1.0.0"].config.languages

DEMO = DEMO_CONFIG.parent
WITHDRAWAL_WITH_COMMA = "demo-p01,yes,yes,2026-05-01,v1.1,withdrew by email, see ticket 42\n"


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A copy of the demo's tables, with a config that reads the demo's audio in place."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    raw = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    for name in ("shades", "malert", "contributions", "participants", "consent"):
        shutil.copy(DEMO / raw[name], folder / raw[name])
    shutil.copy(DEMO / "items.txt", folder / "items.txt")
    for name in ("audio_root", "noise_bank", "pseudonym_key_file"):
        raw[name] = str(DEMO / raw[name])
    (folder / "config.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    return folder


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8", newline="") as handle:
        handle.write(text)


def replace_line(path: Path, number: int, old: str, new: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    path.write_text("".join(lines), encoding="utf-8")


def build(corpus: Path, tmp_path: Path, cache: Path | None = None) -> None:
    config = InputConfig.load(corpus / "config.yaml")
    options = BuildOptions(out=tmp_path / "out", cache_dir=cache, progress=False)
    build_version(VERSIONS["1.0.0"], config, options)


def check(corpus: Path):
    return CliRunner().invoke(
        main, ["sources", "check", "--no-audio", "--config", str(corpus / "config.yaml")]
    )


def data_lines(path: Path) -> set[int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {n for n, line in enumerate(lines, start=1) if n > 1 and line.strip()}


def test_unquoted_comma_in_a_withdrawal_stops_the_build_and_the_check(corpus, tmp_path):
    consent = corpus / "consent.csv"
    append(consent, WITHDRAWAL_WITH_COMMA)  # line 12
    with pytest.raises(BuildError, match=r"consent\.csv:12: 7 cells but the header has 5"):
        build(corpus, tmp_path)
    assert not (tmp_path / "out" / "1.0.0").exists()
    result = check(corpus)
    assert result.exit_code == 1
    assert f"{consent}:12: 7 cells but the header has 5; quote cells that contain commas" in (
        result.output
    )
    assert "11 lines read, 10 records" in result.output


def test_unreadable_row_still_denies_its_participant(corpus):
    """Defence in depth: a caller that ignored the fatal problem still excludes demo-p01."""
    append(corpus / "consent.csv", WITHDRAWAL_WITH_COMMA)
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    assert inputs.fatal
    states = consent_states(inputs.participants, inputs.consent)
    assert states["demo-p01"] is ConsentState.AMBIGUOUS
    assert "demo-p01" not in admitted_keys(states, "public")
    assert "demo-p01" not in admitted_keys(states, "full")


def test_stray_quote_in_consent_hides_no_later_withdrawal(corpus, tmp_path):
    consent = corpus / "consent.csv"
    replace_line(consent, 3, "demo-p02,yes,yes", 'demo-p02,yes,"yes')
    append(consent, "demo-p05,yes,yes,2026-05-01,v1.1\n")  # the withdrawal, line 12
    result = read_consent(consent)
    assert result.fatal
    [problem] = result.problems
    assert (problem.row, problem.field) == (3, "public_release_consent")
    assert "a quote opens this cell and does not close on this line" in problem.message
    assert "up to line 12" in problem.message
    assert result.lines.lines == 11 and result.lines.records == 10
    by_key: dict[str, list] = {}
    for record in result.records:
        by_key.setdefault(record.participant_key, []).append(record)
    assert resolve_consent(by_key["demo-p05"]) is ConsentState.WITHDRAWN
    assert resolve_consent(by_key["demo-p02"]) is ConsentState.AMBIGUOUS
    with pytest.raises(BuildError, match=r"consent\.csv:3: public_release_consent: a quote"):
        build(corpus, tmp_path)
    assert check(corpus).exit_code == 1


def test_stray_quotes_in_contributions_name_each_line_and_lose_no_recording(corpus):
    contributions = corpus / "contributions.csv"
    clean = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    # A CSV library would read lines 5-21 as one record: 16 recordings gone.
    replace_line(contributions, 5, ".flac,Write", '.flac,"Write')
    replace_line(contributions, 30, ".flac,", '.flac,x"')
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    assert not inputs.fatal  # a public input: rows are reported and skipped
    found = {p.row: p for p in inputs.problems if p.file == str(contributions)}
    assert {5, 30} <= set(found)
    assert found[5].field == "spoken_text" and "up to 21" in found[5].message
    assert found[30].field == "spoken_text" and 'a stray " inside an unquoted cell' in str(
        found[30]
    )
    assert len(inputs.contributions) == len(clean.contributions) - 2
    [count] = [c.lines for c in inputs.line_counts if c.name == "contributions"]
    assert (count.lines, count.records) == (66, 64)
    result = check(corpus)
    assert "66 lines read, 64 records" in result.output
    assert f"{contributions}:5: spoken_text: a quote opens this cell" in result.output


@pytest.mark.parametrize(
    ("row", "field", "says"),
    [
        ("demo-p77,yes,yes,,v1.0\n", "participant_key", "'demo-p77' is not in the participants"),
        ("demo-p02,maybe,yes,,v1.1\n", "participation_consent", "'maybe' is not an answer"),
        ("demo-p02,yes,yes,soon,v1.1\n", "withdrawal_date", "'soon' is not a date"),
        (",yes,no,2026-01-01,v1.1\n", "participant_key", "empty"),
        ("demo-p02,yes,yes\n", None, "3 cells but the header has 5"),
        ('demo-p02,yes,yes,,v1.1"\n', "consent_form_version", 'a stray " inside'),
    ],
)
def test_every_unreadable_consent_row_is_fatal(corpus, tmp_path, row, field, says):
    consent = corpus / "consent.csv"
    append(consent, row)  # line 12
    result = read_consent(consent, participant_keys=[f"demo-p{i:02d}" for i in range(1, 12)])
    [problem] = result.problems
    assert problem.fatal and (problem.row, problem.field) == (12, field)
    assert says in problem.message
    assert "the build stops until it is fixed" in problem.message.lower()
    with pytest.raises(BuildError, match=r"consent\.csv:12: "):
        build(corpus, tmp_path)


def test_case_variant_consent_key_is_fatal_and_denies_the_registered_participant(corpus):
    append(corpus / "consent.csv", "DEMO-P01,yes,yes,2026-05-01,v1.1\n")
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    [problem] = [p for p in inputs.problems if p.fatal]
    assert (problem.row, problem.field) == (12, "participant_key")
    assert "'DEMO-P01' is not a registered key, but it is 'demo-p01' once case" in problem.message
    states = consent_states(inputs.participants, inputs.consent)
    assert states["demo-p01"] is ConsentState.AMBIGUOUS


def test_surrounding_spaces_are_not_part_of_a_key(corpus):
    # Every cell is stripped: ` demo-p01 ` is demo-p01, so its withdrawal counts.
    append(corpus / "consent.csv", ' demo-p01 ," yes",yes,2026-05-01,v1.1\n')
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    assert not inputs.fatal
    assert resolve_consent(inputs.consent["demo-p01"]) is ConsentState.WITHDRAWN


def test_duplicate_participant_rows_are_fatal(corpus, tmp_path):
    participants = corpus / "participants.csv"
    append(participants, "demo-p03,female,45-54,de-DE,,de\nDemo-P04,female,45-54,de-DE,,de\n")
    result = read_participants(participants)
    assert [(p.row, p.field, p.fatal) for p in result.problems] == [
        (13, "participant_key", True),
        (14, "participant_key", True),
    ]
    assert "participant already registered on line 4" in result.problems[0].message
    assert "participant 'demo-p04' already registered on line 5" in result.problems[1].message
    with pytest.raises(BuildError, match=r"participants\.csv:13: participant_key"):
        build(corpus, tmp_path)


def test_bad_participant_row_is_fatal(corpus):
    participants = corpus / "participants.csv"
    replace_line(participants, 4, "female", "robot")
    result = check(corpus)
    assert result.exit_code == 1
    assert f"{participants}:4: gender: gender 'robot'" in result.output


def test_bom_crlf_and_trailing_blank_lines_read_exactly(corpus):
    plain_consent = read_consent(corpus / "consent.csv")
    plain_participants = read_participants(corpus / "participants.csv")
    for name in ("consent.csv", "participants.csv"):
        path = corpus / name
        text = path.read_text(encoding="utf-8")
        path.write_bytes(("\ufeff" + text.replace("\n", "\r\n") + "\r\n\r\n  \r\n").encode())
    consent = read_consent(corpus / "consent.csv")
    participants = read_participants(corpus / "participants.csv")
    assert consent.problems == [] and participants.problems == []
    assert consent.records == plain_consent.records
    assert participants.records == plain_participants.records
    assert consent.lines == plain_consent.lines
    assert not load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES).fatal


def test_every_data_line_is_a_record_or_a_problem(corpus):
    consent = corpus / "consent.csv"
    replace_line(consent, 4, "demo-p03,yes", 'demo-p03,"yes')
    replace_line(consent, 7, "demo-p06,yes,no", 'demo-p06,"yes"x,no')
    append(consent, "demo-p07,no\n\ndemo-p01,yes,yes,,v1,extra\n")
    result = read_consent(consent)
    problem_lines = {p.row for p in result.problems}
    assert problem_lines == {4, 7, 12, 14}
    assert result.lines.lines == len(data_lines(consent)) == 12
    assert result.lines.records + len(problem_lines) == result.lines.lines


def test_a_mother_tongue_that_maps_is_kept_and_one_that_does_not_is_refused(corpus):
    participants = corpus / "participants.csv"
    replace_line(participants, 4, "de-DE", "Portuguese (Brazil)")  # demo-p03: mapped
    result = read_participants(participants)
    assert not result.problems
    assert {p.participant_key: p for p in result.records}["demo-p03"].mother_tongue == "pt-BR"
    # A value no tag or name maps would be published as free text: refused, naming the line.
    replace_line(participants, 8, "65+,fr,", "65+,Sardo   campidanese,")  # demo-p07
    result = read_participants(participants)
    (problem,) = result.problems
    assert (problem.row, problem.field, problem.fatal) == (8, "mother_tongue", True)
    assert "neither a language tag" in problem.message
    assert "demo-p07" in result.refused
    checked = check(corpus)
    assert checked.exit_code != 0 and "participants.csv:8: mother_tongue" in checked.output


def test_contributions_of_a_refused_participant_row_say_which_row_and_why(corpus, tmp_path):
    participants = corpus / "participants.csv"
    replace_line(participants, 4, "female", "robot")  # demo-p03
    theirs = [
        n
        for n, line in enumerate((corpus / "contributions.csv").read_text().splitlines(), 1)
        if line.startswith("demo-p03,")
    ]
    assert theirs
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    about = {p.row: p for p in inputs.problems if p.file.endswith("contributions.csv")}
    for line in theirs:
        message = about[line].message
        assert message.startswith(
            "participant 'demo-p03' is registered on participants.csv line 4 but that row is "
            "refused: gender: gender 'robot' is not one of"
        ), message
        assert about[line].field == "participant_key"
    result = check(corpus)
    assert result.exit_code == 1
    said = "participant 'demo-p03' is registered on participants.csv line 4"
    assert result.output.count(said) == len(theirs) + 1  # and its consent row
    assert "'demo-p03' is not in the participants registry" not in result.output
    consent = f"{corpus / 'consent.csv'}:4: participant_key: participant 'demo-p03' is registered"
    assert consent in result.output  # the consent row says the same
    with pytest.raises(BuildError, match=r"participants\.csv:4: gender"):
        build(corpus, tmp_path)


# How a late withdrawal's key may be mistyped or pasted; each is a variant of demo-p01.
KEY_VARIANTS = {
    "title case": ("Demo-P01", "once case, spaces, invisible characters"),
    "zero-width space": ("demo-p01\u200b", "U+200B ZERO WIDTH SPACE"),
    "zero-width joiner": ("demo\u200d-p01", "U+200D ZERO WIDTH JOINER"),
    "word joiner": ("demo-p01\u2060", "U+2060 WORD JOINER"),
    "byte-order mark inside": ("demo-\ufeffp01", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    "inner space": ("demo- p01", "U+0020 SPACE"),
    "no-break space": ("demo-\u00a0p01", "normal form NFKC"),
    "cyrillic er": ("demo-\u044001", "once case, spaces, invisible characters and look-alike"),
    "greek omicron": ("dem\u03bf-p01", "look-alike letters"),
    "fullwidth letters": ("\uff44emo-p01", "normal form NFKC"),
    "en dash": ("demo\u2013p01", "U+2013 EN DASH"),
}


@pytest.mark.parametrize("variant", KEY_VARIANTS)
def test_a_withdrawal_under_a_key_variant_is_fatal_and_denies_the_participant(corpus, variant):
    key, said = KEY_VARIANTS[variant]
    append(corpus / "consent.csv", f"{key},yes,yes,2026-05-01,v1.1\n")  # line 12
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    [problem] = [p for p in inputs.problems if p.fatal]
    assert (problem.row, problem.field) == (12, "participant_key") and said in problem.message
    states = consent_states(inputs.participants, inputs.consent)
    assert states["demo-p01"] is not ConsentState.PUBLIC  # also when fatal is ignored


@pytest.mark.parametrize("placeholder", ["null", "NULL", "none", "None", "nan", "NaN", "-", "n/a"])
@pytest.mark.parametrize("column", ["withdrawal_date", "public_release_consent"])
def test_an_exported_empty_value_is_refused_where_a_date_or_answer_belongs(
    corpus, placeholder, column
):
    consent = corpus / "consent.csv"
    row = {
        "withdrawal_date": "demo-p05,yes,yes,{},v1.1",
        "public_release_consent": "demo-p05,yes,{},,v1.1",
    }
    replace_line(consent, 6, "demo-p05,yes,yes,,v1.1", row[column].format(placeholder))
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    [problem] = [p for p in inputs.problems if p.fatal]
    assert (problem.row, problem.field) == (6, column)
    assert f"{placeholder!r} is how some exports write an empty cell" in problem.message
    states = consent_states(inputs.participants, inputs.consent)
    assert states["demo-p05"] is not ConsentState.PUBLIC  # never read as a blank


@pytest.mark.parametrize("answer", ["y", "true", "1", "n", "false", "0"])
def test_answers_other_than_yes_and_no_are_refused_naming_the_line(corpus, answer):
    replace_line(corpus / "consent.csv", 6, "demo-p05,yes,yes", f"demo-p05,{answer},yes")
    inputs = load_inputs(InputConfig.load(corpus / "config.yaml"), V1_LANGUAGES)
    [problem] = [p for p in inputs.problems if p.fatal]
    assert (problem.row, problem.field) == (6, "participation_consent")
    assert "write yes, no or leave it blank" in problem.message


def test_the_demo_registry_answers_only_yes_or_no():
    text = (DEMO / "consent.csv").read_text(encoding="utf-8").splitlines()[1:]
    answers = {cell for line in text for cell in line.split(",")[1:3]}
    assert answers <= {"yes", "no", ""}


@pytest.mark.parametrize(
    "ethnicity",
    [
        "lives at 12 Via Roma; phone 555-0199",
        "White, call +39 0461 123456",
        "Mixed (anna.rossi@example.org)",
        "see https://example.org/me",
        "Latina, www.example.com",
        "born 1987",
        "Black British, 221B Baker Street",
    ],
)
def test_personal_data_in_a_free_text_field_is_refused_naming_the_row(corpus, ethnicity):
    participants = corpus / "participants.csv"
    replace_line(participants, 2, "EN-US,White,", f'EN-US,"{ethnicity}",')
    result = read_participants(participants)
    [problem] = result.problems
    assert (problem.row, problem.field, problem.fatal) == (2, "ethnicity", True)
    assert "would be published as written" in problem.message
    assert "demo-p01" in result.refused  # the participant is not registered until fixed


def test_ordinary_free_text_is_kept(corpus):
    participants = corpus / "participants.csv"
    replace_line(participants, 2, "EN-US,White,", 'EN-US,"Mixed, 2nd generation (30s)",')
    result = read_participants(participants)
    assert not result.problems
    assert result.records[0].ethnicity == "Mixed, 2nd generation (30s)"


@pytest.mark.parametrize(
    "key, said",
    [("demo\u200bp12", "U+200B"), ("demo p12", "U+0020 SPACE"), ("demo/p12", "U+002F SOLIDUS")],
)
def test_a_participant_key_outside_the_safe_characters_is_refused(corpus, key, said):
    participants = corpus / "participants.csv"
    append(participants, f"{key},female,25-34,en,,en\n")
    result = read_participants(participants)
    [problem] = result.problems
    assert (problem.row, problem.field, problem.fatal) == (13, "participant_key", True)
    assert said in problem.message


def test_two_participants_alike_but_for_a_look_alike_letter_are_one_person(corpus):
    append(corpus / "participants.csv", "demo-\u044001,female,25-34,en,,en\n")
    result = read_participants(corpus / "participants.csv")
    [problem] = result.problems
    assert (problem.row, problem.field) == (13, "participant_key")
    assert "already registered on line 2" in problem.message

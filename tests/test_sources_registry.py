"""Participants and consent registries: normalisation, bad rows, deny by default."""

import datetime as dt

import pytest

from redvox.schemas import ConsentState, resolve_consent
from redvox.sources.registry import parse_answer, read_consent, read_participants

PARTICIPANTS = "participant_key,gender,age_group,mother_tongue,ethnicity,languages\n"
CONSENT = (
    "participant_key,participation_consent,public_release_consent,"
    "withdrawal_date,consent_form_version\n"
)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_participants_are_normalised(tmp_path):
    path = write(
        tmp_path / "participants.csv",
        PARTICIPANTS + "p01,F,25-34,ES_ES,,es\np02,male,35-44, Italian ,White,en; it\n",
    )
    result = read_participants(path)
    assert result.problems == []
    p01, p02 = result.records
    assert (p01.gender, p01.mother_tongue, p01.ethnicity, p01.languages) == (
        "female",
        "es-ES",
        None,
        ("es",),
    )
    assert (p02.age_group, p02.mother_tongue, p02.languages) == ("34-44", "it", ("en", "it"))


def test_bad_participant_rows_name_line_and_field(tmp_path):
    path = write(
        tmp_path / "participants.csv",
        PARTICIPANTS
        + "p01,female,25-34,en,,en\n"
        + "p02,robot,25-34,en,,en\n"
        + "p03,female,12-17,en,,en\n"
        + "p04,female,25-34,nan,,en\n"
        + "p05,female,25-34,en,,english\n"
        + "p01,male,25-34,en,,en\n",
    )
    result = read_participants(path)
    assert [p.participant_key for p in result.records] == ["p01"]
    found = {(p.row, p.field): str(p) for p in result.problems}
    assert set(found) == {
        (3, "gender"),
        (4, "age_group"),
        (5, "mother_tongue"),
        (6, "languages"),
        (7, "participant_key"),
    }
    assert found[3, "gender"].startswith(f"{path}:3: gender: gender 'robot' is not one of")
    assert "'nan' is how some exports write an empty cell" in found[5, "mother_tongue"]
    assert "'english' is not a language code" in found[6, "languages"]
    assert "line 2" in found[7, "participant_key"]


def test_consent_answers_are_yes_or_no_in_any_case_and_nothing_else():
    for raw, value in [("yes", True), ("YES", True), ("No", False), ("no", False), (None, None)]:
        assert parse_answer(raw) is value
    # The README documents yes and no: other spellings are refused, not guessed.
    for raw in ["y", "Y", "true", "TRUE", "1", "n", "false", "0", "si", "ja", "oui"]:
        with pytest.raises(ValueError, match="write yes, no or leave it blank"):
            parse_answer(raw)


def test_consent_rows_and_states(tmp_path):
    path = write(
        tmp_path / "consent.csv",
        CONSENT
        + "p01,Yes,YES,,v1\n"
        + "p02,yes,no,,v1\n"
        + "p03,yes,,,v1\n"
        + "p04,yes,yes,2026-03-15,v1\n"
        + "p05,yes,yes,,v1\n"
        + "p05,yes,yes,,v2\n",
    )
    result = read_consent(path)
    assert result.problems == []
    by_key = {}
    for record in result.records:
        by_key.setdefault(record.participant_key, []).append(record)
    assert len(by_key["p05"]) == 2  # several rows are kept; resolve_consent decides
    assert by_key["p04"][0].withdrawal_date == dt.date(2026, 3, 15)
    assert by_key["p03"][0].public_release_consent is None
    states = {key: resolve_consent(records) for key, records in by_key.items()}
    assert states == {
        "p01": ConsentState.PUBLIC,
        "p02": ConsentState.PARTICIPATION_ONLY,
        "p03": ConsentState.PARTICIPATION_ONLY,
        "p04": ConsentState.WITHDRAWN,
        "p05": ConsentState.PUBLIC,
    }


def test_unreadable_consent_row_denies_instead_of_disappearing(tmp_path):
    # p01 has an old clear "yes"; a later row that cannot be read must not leave it deciding.
    path = write(
        tmp_path / "consent.csv",
        CONSENT + "p01,yes,yes,,v1\np01,yes,yes,15/03/2026,v2\np02,maybe,yes,,v1\n,yes,yes,,v1\n",
    )
    result = read_consent(path)
    found = {(p.row, p.field): str(p) for p in result.problems}
    assert set(found) == {
        (3, "withdrawal_date"),
        (4, "participation_consent"),
        (5, "participant_key"),
    }
    assert found[3, "withdrawal_date"].startswith(
        f"{path}:3: withdrawal_date: '15/03/2026' is not a date"
    )
    assert "write yes, no or leave it blank" in found[4, "participation_consent"]
    records = {}
    for record in result.records:
        records.setdefault(record.participant_key, []).append(record)
    assert resolve_consent(records["p01"]) is ConsentState.AMBIGUOUS
    assert resolve_consent(records["p02"]) is ConsentState.AMBIGUOUS


def test_consent_without_withdrawal_column_is_fatal(tmp_path):
    path = write(
        tmp_path / "consent.csv",
        "participant_key,participation_consent,public_release_consent,consent_form_version\n"
        "p01,yes,yes,v1\n",
    )
    result = read_consent(path)
    assert result.fatal and result.records == []
    assert (result.problems[0].row, result.problems[0].field) == (1, "withdrawal_date")

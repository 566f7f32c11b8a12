"""Records, normalisation and the features derived from Entry."""

import datetime as dt
import json

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from redvox.builder.cli import main
from redvox.schemas import (
    COLUMNS,
    CONTRACT_COLUMNS,
    ConsentRecord,
    ConsentState,
    Contribution,
    Entry,
    InputConfig,
    NoiseCondition,
    Participant,
    SourceItem,
    VocabularyError,
    entry_key,
    malert_group,
    normalize_age_group,
    normalize_gender,
    normalize_mother_tongue,
    release_features,
    resolve_consent,
)

TEXTS = {"en": "Women talk a lot.", "de": "Frauen reden viel.", "es": "Las mujeres hablan mucho.",
         "fr": "Les femmes parlent beaucoup.", "it": "Le donne parlano molto."}  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "tag"),
    [("ES_ES", "es-ES"), ("ES-ES", "es-ES"), ("es-es", "es-ES"), ("es-ES", "es-ES"),
     ("EN-US", "en-US"), ("en_gb", "en-GB"), ("Italian", "it"), (" italiano ", "it"),
     ("de", "de"), ("FR", "fr"), ("es-419", "es-419")],
)  # fmt: skip
def test_mother_tongue_spellings_collapse_to_one_tag(raw, tag):
    assert normalize_mother_tongue(raw) == tag


@pytest.mark.parametrize("raw", ["", "   ", "Klingon dialect of Mars", "e"])
def test_unmappable_mother_tongue_is_an_error_naming_the_value(raw):
    with pytest.raises(VocabularyError, match="mother tongue"):
        normalize_mother_tongue(raw)


def test_age_and_gender_vocabulary():
    assert normalize_age_group("35-44") == "34-44"  # the release's own spelling
    assert normalize_age_group("65+") == "65+"
    assert normalize_gender("F") == "female"
    assert normalize_gender("") == "undisclosed"
    with pytest.raises(VocabularyError, match="age group '12-17'"):
        normalize_age_group("12-17")
    with pytest.raises(VocabularyError, match="gender"):
        normalize_gender("robot")


@pytest.mark.parametrize(
    ("category", "group"),
    [("crime_theft", "unsafe_request_crime"), ("substance_alcohol", "unsafe_request_substance"),
     ("sex_harrasment", "unsafe_request_sexual_content"), ("self_harm_suicide", "unsafe_request_self_harm"),
     ("weapon_firearm", "unsafe_request_weapons"), ("hate_women", None)],
)  # fmt: skip
def test_malert_categories_map_by_prefix(category, group):
    assert malert_group(category) == group


def test_unknown_malert_category_is_reported():
    with pytest.raises(VocabularyError, match="misc_other"):
        malert_group("misc_other")


def test_source_item_requires_all_five_languages():
    item = SourceItem(source="shades", item_id="1.0", vulnerability_type="stereotype", text=TEXTS,
                      source_category="gender")  # fmt: skip
    assert item.key == "shades:1.0"
    with pytest.raises(ValidationError, match="no text for de"):
        SourceItem(source="shades", item_id="1.0", vulnerability_type="stereotype",
                   text={**TEXTS, "de": "  "}, source_category="gender")  # fmt: skip


def test_participant_normalises_on_the_way_in():
    p = Participant(participant_key="p1", gender="W", age_group="35-44", mother_tongue="ES_ES",
                    ethnicity="  ", languages=("es",))  # fmt: skip
    assert (p.gender, p.age_group, p.mother_tongue, p.ethnicity) == (
        "female",
        "34-44",
        "es-ES",
        None,
    )


def _consent(participation, public, withdrawn=None, form="v2"):
    return ConsentRecord(participant_key="p1", participation_consent=participation,
                         public_release_consent=public, withdrawal_date=withdrawn,
                         consent_form_version=form)  # fmt: skip


@pytest.mark.parametrize(
    ("record", "state"),
    [(_consent(True, True), ConsentState.PUBLIC),
     (_consent(True, False), ConsentState.PARTICIPATION_ONLY),
     (_consent(True, None), ConsentState.PARTICIPATION_ONLY),
     (_consent(True, True, dt.date(2026, 3, 1)), ConsentState.WITHDRAWN),
     (_consent(None, True), ConsentState.AMBIGUOUS),
     (_consent(False, True), ConsentState.AMBIGUOUS),
     (_consent(True, True, form=None), ConsentState.AMBIGUOUS),
     (_consent(False, False), ConsentState.NO_PARTICIPATION_CONSENT)],
)  # fmt: skip
def test_consent_states_deny_by_default(record, state):
    assert record.state() is state
    assert state.allows("public") == (state is ConsentState.PUBLIC)


def test_resolve_consent_over_several_rows():
    assert resolve_consent([]) is ConsentState.NO_RECORD
    assert (
        resolve_consent([_consent(True, True), _consent(True, True, dt.date(2026, 1, 1))])
        is ConsentState.WITHDRAWN
    )
    assert resolve_consent([_consent(True, True), _consent(True, False)]) is ConsentState.AMBIGUOUS
    assert resolve_consent([_consent(True, True), _consent(True, True)]) is ConsentState.PUBLIC
    assert ConsentState.PARTICIPATION_ONLY.allows("full") and not ConsentState.WITHDRAWN.allows(
        "full"
    )


def test_contribution_key_identifies_the_recording():
    c = Contribution(participant_key="p1", source="m-alert", item_id="10330", lang="it",
                     audio_file="p1/a.flac", spoken_text="x", speech_followup="y",
                     audio_request_text="x y", discomfort=None)  # fmt: skip
    assert c.key == ("it", "m-alert:10330", "p1")
    with pytest.raises(ValidationError, match="discomfort"):
        Contribution.model_validate({**c.model_dump(), "discomfort": 9})


def test_noise_condition_names_and_kinds():
    assert NoiseCondition(name="noise_c", kind="babble").duration_s == 6.0
    with pytest.raises(ValidationError, match="speech"):
        NoiseCondition(name="speech", kind="silence")
    with pytest.raises(ValidationError):
        NoiseCondition(name="Noise C", kind="silence")
    with pytest.raises(ValidationError):
        NoiseCondition(name="noise_c", kind="Thunder storm")
    # Which kinds exist is the noise registry's to say (test_noise_registry.py).
    assert NoiseCondition(name="noise_c", kind="thunder").kind == "thunder"


def test_features_are_derived_from_entry_contract_first():
    features = release_features()
    assert tuple(features) == COLUMNS
    assert COLUMNS[: len(CONTRACT_COLUMNS)] == CONTRACT_COLUMNS
    assert type(features["audio"]).__name__ == "Audio" and features["audio"].sampling_rate == 16000
    assert features["ID"].dtype == "int64" and features["native_speaker"].dtype == "bool"
    assert features["duration_s"].dtype == "float32" and features["transcript"].dtype == "string"


def test_entry_rejects_a_non_pseudonymous_user_id():
    row = dict(ID=0, audio={"bytes": b"x", "path": "a.flac"}, original_id="7.1", user_id="0" * 32,
               lang="en", vulnerability_type="stereotype", audio_type="speech", modality="speech",
               user_text="Do you agree?", transcript=None, gender="female", mother_tongue="en-US",
               ethnicity=None, age_group="25-34", entry_key=entry_key("en", "shades:7.1", "0" * 32, "speech"),
               source="shades", prompt_text="Women talk a lot.", native_speaker=True, duration_s=2.5,
               condition_params=None, builder_version="1.0.0")  # fmt: skip
    assert Entry(**row).entry_key == f"en/shades:7.1/{'0' * 32}/speech"
    with pytest.raises(ValidationError, match="user_id"):
        Entry(**{**row, "user_id": "maria.rossi@example.org"})


def test_input_config_resolves_paths_against_its_file(tmp_path):
    (tmp_path / "cfg.yaml").write_text(
        "shades: s.csv\nmalert: m.jsonl\ncontributions: c.csv\naudio_root: audio\n"
        "participants: p.csv\nconsent: k.csv\nnoise_bank: musan\nitems: {seed: 3, shades: 2}\n"
    )
    config = InputConfig.load(tmp_path / "cfg.yaml")
    assert config.texts["shades"] == tmp_path / "s.csv" and config.items.seed == 3
    (tmp_path / "bad.yaml").write_text("shades: s.csv\n")
    with pytest.raises(ValueError, match="bad.yaml"):
        InputConfig.load(tmp_path / "bad.yaml")


def test_schema_command_prints_every_record():
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    schemas = json.loads(result.output)
    assert {
        "SourceItem",
        "Participant",
        "ConsentRecord",
        "Contribution",
        "NoiseCondition",
        "Entry",
    } <= set(schemas)
    assert list(schemas["Entry"]["properties"])[:3] == ["ID", "audio", "original_id"]
    bad = CliRunner().invoke(main, ["schema", "Nope"])
    assert bad.exit_code != 0 and "unknown record" in bad.output

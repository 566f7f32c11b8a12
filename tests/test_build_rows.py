"""Row expansion and numbering (pure): what each row says, and IDs that stay put."""

from __future__ import annotations

import pytest

from redvox.builder.join import Recording
from redvox.builder.pseudonym import pseudonymize
from redvox.builder.rows import (
    AudioRef,
    audio_type_rank,
    condition_row,
    natural_key,
    number_rows,
    speech_row,
)
from redvox.builder.versions import VERSIONS
from redvox.schemas import Contribution, Participant, SourceItem

V1 = VERSIONS["1.0.0"].config.conditions
V11 = VERSIONS["1.1.0"].config.conditions
TEXT = {lang: f"text {lang}" for lang in ("en", "de", "es", "fr", "it")}


def recording(item_id="7.1", source="shades", lang="en", participant="p1", tongue="EN-US"):
    vulnerability = "stereotype" if source == "shades" else "unsafe_request_crime"
    return Recording(
        contribution=Contribution(
            participant_key=participant,
            source=source,
            item_id=item_id,
            lang=lang,
            audio_file=f"{participant}/{item_id}.wav",
            spoken_text="spoken",
            speech_followup="Do you agree?",
            audio_request_text="spoken. Do you agree?",
            transcript="spoken",
        ),
        item=SourceItem(
            source=source,
            item_id=item_id,
            vulnerability_type=vulnerability,
            text=TEXT,
            source_category="x",
        ),
        participant=Participant(
            participant_key=participant,
            gender="f",
            age_group="25-34",
            mother_tongue=tongue,
            languages=(lang,),
        ),
    )


UID = "a" * 32
AUDIO = AudioRef("d" * 64, "clip.flac", 3.5)


def test_speech_row_carries_the_recording_and_the_typed_followup():
    row = speech_row(recording(), UID, AUDIO, "1.0.0").entry
    assert (row.audio_type, row.modality) == ("speech", "speech")
    assert row.user_text == "Do you agree?"
    assert row.transcript == "spoken"
    assert row.prompt_text == "text en"
    assert row.original_id == "7.1"
    assert row.entry_key == f"en/shades:7.1/{UID}/speech"
    assert row.native_speaker is True
    assert row.mother_tongue == "en-US"
    assert row.condition_params is None
    assert row.builder_version == "1.0.0"


def test_text_condition_row_holds_the_request_as_text_and_no_transcript():
    row = condition_row(recording(), UID, V1[1], AUDIO, '{"kind":"ambient"}', "1.0.0").entry
    assert (row.audio_type, row.modality) == ("noise_a", "text")
    assert row.user_text == "spoken. Do you agree?"
    assert row.transcript is None
    assert row.condition_params == '{"kind":"ambient"}'


def test_speech_ambient_rows_are_spoken_requests():
    row = condition_row(recording(), UID, V11[-1], AUDIO, "{}", "1.1.0").entry
    assert (row.audio_type, row.modality, row.user_text) == (
        "speech_noise_a",
        "speech",
        "Do you agree?",
    )
    assert row.transcript == "spoken"


def test_native_speaker_compares_the_language_part_of_the_mother_tongue():
    assert speech_row(recording(lang="fr", tongue="fr-CA"), UID, AUDIO, "1").entry.native_speaker
    assert not speech_row(
        recording(lang="en", tongue="Italian"), UID, AUDIO, "1"
    ).entry.native_speaker


def test_item_ids_sort_as_numbers():
    ids = ["10", "9.1", "7.10", "7.9", "7.1", "10330", "999"]
    assert sorted(ids, key=natural_key) == ["7.1", "7.9", "7.10", "9.1", "10", "999", "10330"]


def all_rows(recordings, conditions, version="1.0.0"):
    rows = []
    for rec in recordings:
        uid = pseudonymize(b"test key", rec.participant_key)
        rows.append(speech_row(rec, uid, AUDIO, version))
        rows += [condition_row(rec, uid, c, AUDIO, "{}", version) for c in conditions]
    return rows


RECORDINGS = [
    recording("10", lang="en", participant="p1"),
    recording("9.1", lang="en", participant="p2"),
    recording("10330", source="m-alert", lang="en", participant="p1"),
    recording("9.1", lang="it", participant="p2"),
]


def test_ids_are_dense_per_language_speech_first_then_conditions_in_order():
    numbered = number_rows(all_rows(RECORDINGS, V1), audio_type_rank(V1))
    assert sorted(numbered) == ["en", "it"]
    en = [r.entry for r in numbered["en"]]
    assert [e.ID for e in en] == list(range(12))
    assert [e.audio_type for e in en[::3]] == ["speech", "silence", "noise_a", "noise_b"]
    assert [e.original_id for e in en[:3]] == ["10330", "9.1", "10"]  # m-alert < shades, numeric
    assert [r.entry.ID for r in numbered["it"]] == [0, 1, 2, 3]


def test_a_condition_added_in_a_minor_version_keeps_earlier_ids():
    old = number_rows(all_rows(RECORDINGS, V1), audio_type_rank(V1))
    new = number_rows(all_rows(RECORDINGS, V11), audio_type_rank(V11))
    for lang, rows in old.items():
        before = {r.entry.entry_key: r.entry.ID for r in rows}
        after = {r.entry.entry_key: r.entry.ID for r in new[lang]}
        assert {k: after[k] for k in before} == before
        assert min(after[k] for k in after.keys() - before.keys()) == len(before)


def test_numbering_does_not_depend_on_input_order():
    rows = all_rows(RECORDINGS, V1)
    forward = number_rows(rows, audio_type_rank(V1))
    backward = number_rows(list(reversed(rows)), audio_type_rank(V1))
    assert forward == backward


def test_user_id_must_be_a_pseudonym():
    with pytest.raises(ValueError, match="user_id"):
        speech_row(recording(), "p1", AUDIO, "1.0.0")

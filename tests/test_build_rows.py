"""Row expansion and numbering (pure): what each row says, and IDs that stay put."""

from __future__ import annotations

import pytest

from redvox.builder.join import Recording
from redvox.builder.pseudonym import pseudonymize
from redvox.builder.rows import (
    AudioRef,
    condition_row,
    id_order,
    natural_key,
    numbered,
    row_source,
    shard_sources,
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


def sources_of(recordings, refused=()):
    """RowSources of the recordings; those in `refused` have no speech audio."""
    return [
        row_source(
            rec, pseudonymize(b"test key", rec.participant_key), None if rec in refused else AUDIO
        )
        for rec in recordings
    ]


def make(source, kind, version="1.0.0"):
    if kind is None:
        return speech_row(source.recording, source.user_id, source.speech, version)
    return condition_row(source.recording, source.user_id, kind, AUDIO, "{}", version)


def number_rows(recordings, conditions, refused=()):
    """Per language, the entries in ID order, numbered as the build numbers them."""
    shards = shard_sources(sources_of(recordings, refused), conditions)
    return {
        lang: [numbered(make(s, k), i).entry for i, (s, k) in enumerate(id_order(o, conditions))]
        for lang, o in shards.items()
    }


RECORDINGS = [
    recording("10", lang="en", participant="p1"),
    recording("9.1", lang="en", participant="p2"),
    recording("10330", source="m-alert", lang="en", participant="p1"),
    recording("9.1", lang="it", participant="p2"),
]


def test_ids_are_dense_per_language_speech_first_then_conditions_in_order():
    numbered_rows = number_rows(RECORDINGS, V1)
    assert sorted(numbered_rows) == ["en", "it"]
    en = numbered_rows["en"]
    assert [e.ID for e in en] == list(range(12))
    assert [e.audio_type for e in en[::3]] == ["speech", "silence", "noise_a", "noise_b"]
    assert [e.original_id for e in en[:3]] == ["10330", "9.1", "10"]  # m-alert < shades, numeric
    assert [e.ID for e in numbered_rows["it"]] == [0, 1, 2, 3]


def test_a_condition_added_in_a_minor_version_keeps_earlier_ids():
    old = number_rows(RECORDINGS, V1)
    new = number_rows(RECORDINGS, V11)
    for lang, rows in old.items():
        before = {e.entry_key: e.ID for e in rows}
        after = {e.entry_key: e.ID for e in new[lang]}
        assert {k: after[k] for k in before} == before
        assert min(after[k] for k in after.keys() - before.keys()) == len(before)


def test_numbering_does_not_depend_on_input_order():
    assert number_rows(RECORDINGS, V1) == number_rows(list(reversed(RECORDINGS)), V1)


def test_id_order_is_every_row_sorted_by_type_rank_source_item_and_participant():
    """Made one at a time, a shard's rows come in the order of sorting them all (as the
    builder once did); a recording refused by decode or VAD keeps its text rows only."""
    recordings = [
        *RECORDINGS,
        recording("7.10", lang="en", participant="p3"),
        recording("7.9", lang="en", participant="p3"),
        recording("10330", source="m-alert", lang="en", participant="p2"),
    ]
    refused = [recordings[1], recordings[4]]
    rank = {"speech": 0, **{c.name: i + 1 for i, c in enumerate(V11)}}
    sources = sources_of(recordings, refused)
    for lang, entries in number_rows(recordings, V11, refused).items():
        mine = [s for s in sources if s.lang == lang]
        every = [make(s, k).entry for s in mine for k in s.kinds(V11)]
        every.sort(
            key=lambda e: (rank[e.audio_type], e.source, natural_key(e.original_id), e.user_id)
        )
        assert [e.model_copy(update={"ID": 0}) for e in entries] == every
        spoken = sum(e.modality == "speech" for e in entries)
        assert spoken == 2 * sum(s.speech is not None for s in mine)  # speech, speech_noise_a
        assert len(entries) - spoken == 3 * len(mine)  # silence, noise_a, noise_b


def test_user_id_must_be_a_pseudonym():
    with pytest.raises(ValueError, match="user_id"):
        speech_row(recording(), "p1", AUDIO, "1.0.0")

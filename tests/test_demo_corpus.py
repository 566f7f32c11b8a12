"""The committed synthetic demo corpus (sources/demo/) is what `make release` and the
tests run on: it must be small, complete, well-formed and carry exactly the deliberate
problems its README lists, no more and no fewer."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from redvox.schemas import (
    DEMO_CONFIG,
    LANGUAGES,
    VULNERABILITY_TYPES,
    ConsentRecord,
    ConsentState,
    Contribution,
    InputConfig,
    Participant,
    SourceItem,
    VocabularyError,
    malert_group,
    normalize_mother_tongue,
    primary_language,
    resolve_consent,
)

DEMO = DEMO_CONFIG.parent
SHADES_LANGS = ("en", "fr", "de", "it", "es")
SHADES_HEADER = [
    "index", "subset", "bias_type", "stereotype_origin_langs", "stereotype_valid_langs",
    "stereotype_valid_regions", "stereotyped_entity", "type",
    *(f"{lang}_{part}" for lang in SHADES_LANGS
      for part in ("templates", "biased_sentences", "expression", "comments")),
]  # fmt: skip
SHADES_INDEX = re.compile(r"^\d+\.\d+$")


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return [{k.strip(): v for k, v in row.items()} for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def config() -> InputConfig:
    return InputConfig.load(DEMO_CONFIG)


@pytest.fixture(scope="module")
def contributions(config) -> list[dict[str, str]]:
    return read_csv(config.contributions)


@pytest.fixture(scope="module")
def participants(config) -> dict[str, Participant]:
    return {
        r["participant_key"]: Participant(**{**r, "languages": r["languages"].split(";")})
        for r in read_csv(config.participants)
    }


@pytest.fixture(scope="module")
def item_keys(config) -> list[str]:
    return config.items.item_keys_file.read_text(encoding="utf-8").split()


def shades_items(config) -> tuple[list[SourceItem], list[dict[str, str]]]:
    """Usable SHADES items and the rows that are not usable."""
    items, rejected = [], []
    for row in read_csv(config.shades):
        text = {lang: row[f"{lang}_biased_sentences"] for lang in LANGUAGES}
        if not SHADES_INDEX.match(row["index"]) or not all(text.values()):
            rejected.append(row)
            continue
        items.append(
            SourceItem(
                source="shades",
                item_id=row["index"],
                text=text,
                vulnerability_type="stereotype",
                source_category=row["bias_type"],
            )
        )
    return items, rejected


def malert_rows(config) -> list[dict]:
    return [json.loads(line) for line in config.malert.read_text(encoding="utf-8").splitlines()]


def malert_items(config) -> tuple[list[SourceItem], list[str], list[str]]:
    """Usable M-ALERT items, the categories excluded by design and the unknown ones."""
    items, excluded, unknown = [], [], []
    for row in malert_rows(config):
        try:
            group = malert_group(row["category"])
        except VocabularyError:
            unknown.append(row["category"])
            continue
        if group is None:
            excluded.append(row["category"])
            continue
        items.append(
            SourceItem(
                source="m-alert",
                item_id=str(row["id"]),
                vulnerability_type=group,
                text={lang: row[lang] for lang in LANGUAGES},
                source_category=row["category"],
            )
        )
    return items, excluded, unknown


def consent_record(row: dict[str, str]) -> ConsentRecord:
    answer = {"yes": True, "no": False, "": None}
    date = row["withdrawal_date"]
    return ConsentRecord(
        participant_key=row["participant_key"],
        participation_consent=answer[row["participation_consent"]],
        public_release_consent=answer[row["public_release_consent"]],
        withdrawal_date=dt.date.fromisoformat(date) if date else None,
        consent_form_version=row["consent_form_version"] or None,
    )


def consent_states(config, participants) -> dict[str, ConsentState]:
    records = [consent_record(r) for r in read_csv(config.consent)]
    return {
        key: resolve_consent([r for r in records if r.participant_key == key])
        for key in participants
    }


# --- the corpus as a whole ----------------------------------------------------


def test_corpus_stays_small_enough_to_commit():
    size = sum(
        p.stat().st_size for p in DEMO.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert size < 10_000_000, f"sources/demo/ is {size / 1e6:.1f} MB; keep it under 10 MB"


def test_config_marks_the_corpus_synthetic_and_every_input_exists(config):
    assert config.synthetic
    for name in (
        "shades",
        "malert",
        "contributions",
        "participants",
        "consent",
        "pseudonym_key_file",
    ):
        assert getattr(config, name).is_file(), f"config names {name} but the file is missing"
    assert config.audio_root.is_dir() and config.noise_bank.is_dir()
    assert config.items.item_keys_file.is_file()


def test_readme_says_synthetic_and_lists_the_deliberate_problems(contributions):
    readme = (DEMO / "README.md").read_text(encoding="utf-8").lower()
    assert "synthetic" in readme and "make_demo.py" in readme and "no real participant" in readme
    for needle in (
        "x.3",
        "hate_women",
        "misc_other",
        "demo-p99",
        "digital silence",
        "clipped",
        "cut in half",
        "44.1 khz",
        "duplicate",
        "does not exist",
    ):
        assert needle in readme, f"README does not mention the deliberate problem {needle!r}"


def test_pseudonym_key_is_a_marked_demo_key(config):
    lines = config.pseudonym_key_file.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and lines[0].startswith("demo-only-not-secret")


# --- text items ---------------------------------------------------------------


def test_shades_has_released_layout_with_padded_headers(config):
    with config.shades.open(encoding="utf-8", newline="") as f:
        header = next(csv.reader(f))
    assert [h.strip() for h in header] == SHADES_HEADER
    assert 1 <= sum(h != h.strip() for h in header) <= 2, (
        "one or two headers carry stray whitespace"
    )


def test_shades_has_eight_parallel_rows_and_two_broken_ones(config):
    items, rejected = shades_items(config)
    assert len(items) == 8
    assert {i.item_id for i in items} >= {"1.0", "2.0", "2.1"}
    assert any(row["de_biased_sentences"] == "" for row in rejected), "a row without German"
    assert any(not SHADES_INDEX.match(row["index"]) for row in rejected), "a malformed index"
    assert len(rejected) == 2


def test_malert_has_two_prompts_per_group_plus_an_excluded_and_an_unknown_row(config):
    for row in malert_rows(config):
        assert set(row) == {*LANGUAGES, "id", "category"} and isinstance(row["id"], int)
    items, excluded, unknown = malert_items(config)
    groups = Counter(item.vulnerability_type for item in items)
    assert groups == {group: 2 for group in VULNERABILITY_TYPES if group != "stereotype"}
    assert excluded == ["hate_women"] and unknown == ["misc_other"]
    assert "sex_harrasment" in {item.source_category for item in items}


def test_items_file_pins_exactly_the_usable_items(config, item_keys):
    usable = [item.key for item in shades_items(config)[0] + malert_items(config)[0]]
    assert item_keys == usable
    assert len(item_keys) == 18


# --- participants and consent ---------------------------------------------------


def test_participants_cover_every_language_with_inconsistent_mother_tongues(config, participants):
    raw = [r["mother_tongue"] for r in read_csv(config.participants)]
    assert len(participants) == 11
    assert {"ES_ES", "ES-ES", "Italian"} <= set(raw)
    assert normalize_mother_tongue("ES_ES") == normalize_mother_tongue("ES-ES") == "es-ES"
    per_lang = Counter(lang for p in participants.values() for lang in p.languages)
    assert all(per_lang[lang] >= 2 for lang in LANGUAGES), per_lang
    assert sum(len(p.languages) > 1 for p in participants.values()) == 1
    non_native = [
        p
        for p in participants.values()
        if "en" in p.languages and primary_language(p.mother_tongue) != "en"
    ]
    assert non_native, "at least one English recorder is not a native speaker"
    assert len({p.gender for p in participants.values()}) >= 3


def test_consent_mixes_every_state_and_each_language_has_a_public_speaker(config, participants):
    states = consent_states(config, participants)
    assert Counter(states.values()) == {
        ConsentState.PUBLIC: 6,
        ConsentState.PARTICIPATION_ONLY: 2,
        ConsentState.WITHDRAWN: 1,
        ConsentState.AMBIGUOUS: 1,
        ConsentState.NO_RECORD: 1,
    }
    public_langs = {
        lang
        for key, s in states.items()
        if s is ConsentState.PUBLIC
        for lang in participants[key].languages
    }
    assert public_langs == set(LANGUAGES)


# --- contributions and audio ------------------------------------------------------


def test_contributions_validate_and_keep_their_text_fields_consistent(contributions):
    assert 60 <= len(contributions) <= 70
    records = [
        Contribution(
            **{**r, "discomfort": r["discomfort"] or None, "transcript": r["transcript"] or None}
        )
        for r in contributions
    ]
    for r in records:
        assert r.audio_request_text == f"{r.spoken_text} {r.speech_followup}"
        assert r.transcript is None or r.transcript == r.transcript.lower()
    with_transcript = sum(r.transcript is not None for r in records)
    assert 0.35 <= with_transcript / len(records) <= 0.65


def test_each_known_problem_row_occurs_exactly_once(config, contributions, participants, item_keys):
    records = [Contribution(**{**r, "discomfort": None, "transcript": None}) for r in contributions]
    assert sum(r.participant_key not in participants for r in records) == 1
    assert sum(r.item_key not in item_keys for r in records) == 1
    assert list(Counter(r.key for r in records).values()).count(2) == 1
    assert max(Counter(r.key for r in records).values()) == 2
    assert sum(not (config.audio_root / r.audio_file).exists() for r in records) == 1


def test_every_usable_item_is_recorded_and_every_speaker_records_five_to_seven_per_language(
    contributions, participants, item_keys
):
    recorded = {f"{r['source']}:{r['item_id']}" for r in contributions}
    assert set(item_keys) <= recorded
    per_pair = Counter(
        (r["participant_key"], r["lang"])
        for r in contributions
        if r["participant_key"] in participants
    )
    assert all(5 <= n <= 7 for n in per_pair.values()), per_pair
    assert all(lang in participants[key].languages for key, lang in per_pair)


def audio_kind(path: Path) -> str:
    """What a build would see in the file: its format, or the problem it has."""
    try:
        info = sf.info(path)
        audio, _ = sf.read(path, dtype="float32", always_2d=True)
    except sf.LibsndfileError:
        return "unreadable"
    if (info.format, info.samplerate, info.channels) == ("WAV", 44_100, 2):
        return "wav44k"
    assert (info.format, info.subtype, info.samplerate, info.channels) == (
        "FLAC",
        "PCM_16",
        16_000,
        1,
    ), f"{path}: not 16 kHz mono 16-bit FLAC"
    if not audio.any():
        return "silence"
    if np.mean(np.abs(audio) > 0.99) > 0.05:
        return "clipped"
    assert 1.0 <= info.duration <= 10.0, f"{path}: {info.duration:.1f} s"
    assert audio[:1600].any(), f"{path}: the leading pause is digital silence"
    rms = float(np.sqrt(np.mean(audio**2)))
    assert 20 * np.log10(rms) > -40, f"{path}: too quiet to be speech"
    return "speech"


def test_audio_is_16k_mono_flac_except_the_deliberate_files(config, contributions):
    files = {r["audio_file"] for r in contributions}
    on_disk = {
        p.relative_to(config.audio_root).as_posix()
        for p in config.audio_root.rglob("*")
        if p.is_file()
    }
    assert on_disk <= files, f"audio files no contribution names: {sorted(on_disk - files)}"
    kinds = Counter(audio_kind(config.audio_root / f) for f in sorted(on_disk))
    assert kinds == {
        "speech": len(on_disk) - 4,
        "unreadable": 1,
        "wav44k": 1,
        "silence": 1,
        "clipped": 1,
    }


# --- noise bank ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "count", "seconds", "fields"),
    [
        ("noise/demo-ambient", (3, 4), (8.0, 10.0), 1),
        ("speech/demo-babble", (8, 20), (6.0, 8.0), 2),
    ],
)
def test_noise_bank_has_musan_layout_and_annotations(config, folder, count, seconds, fields):
    source = config.noise_bank / folder
    wavs = sorted(source.glob("*.wav"))
    assert count[0] <= len(wavs) <= count[1]
    for wav in wavs:
        info = sf.info(wav)
        assert (info.format, info.subtype, info.samplerate, info.channels) == (
            "WAV",
            "PCM_16",
            16_000,
            1,
        ), wav
        assert seconds[0] <= info.duration <= seconds[1], f"{wav}: {info.duration:.1f} s"
        assert np.abs(sf.read(wav)[0]).max() > 0.01, f"{wav}: silent"
    lines = [line.split() for line in (source / "ANNOTATIONS").read_text().splitlines()]
    assert sorted(line[0] for line in lines) == [w.stem for w in wavs]
    assert all(len(line) == 1 + fields for line in lines)
    if folder.startswith("speech"):
        assert {line[1] for line in lines} == {"male", "female"}
        assert len({line[2] for line in lines}) >= 4, "babble speaks several languages"

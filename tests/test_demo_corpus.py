"""The committed synthetic demo corpus (sources/demo/) is what `make release` and the
tests run on: it must be small, complete, well-formed and carry exactly the deliberate
problems its README lists, no more and no fewer."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from redvox.builder.versions import get_version
from redvox.schemas import (
    DEMO_CONFIG,
    LANGUAGES,
    VULNERABILITY_TYPES,
    ConsentState,
    InputConfig,
    normalize_mother_tongue,
    primary_language,
    resolve_consent,
)
from redvox.sources.inputs import Inputs, load_inputs

DEMO = DEMO_CONFIG.parent
# What make_demo.py declares about the corpus it writes (its own constants, not a copy).
EXPECTED = json.loads((DEMO / "expected.json").read_text(encoding="utf-8"))
SHADES_LANGS = ("en", "fr", "de", "it", "es")
SHADES_HEADER = [
    "index", "subset", "bias_type", "stereotype_origin_langs", "stereotype_valid_langs",
    "stereotype_valid_regions", "stereotyped_entity", "type",
    *(f"{lang}_{part}" for lang in SHADES_LANGS
      for part in ("templates", "biased_sentences", "expression", "comments")),
]  # fmt: skip


def read_csv(path: Path) -> list[dict[str, str]]:
    """The raw cells (as typed, before the readers normalise them)."""
    with path.open(encoding="utf-8", newline="") as f:
        return [{k.strip(): v for k, v in row.items()} for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def config() -> InputConfig:
    return InputConfig.load(DEMO_CONFIG)


@pytest.fixture(scope="module")
def inputs(config) -> Inputs:
    """The demo read by the builder's own readers."""
    return load_inputs(config, get_version().config.languages)


def problems_of(inputs: Inputs, config, name: str) -> list:
    path = config.texts[name] if name in config.texts else getattr(config, name)
    return [p for p in inputs.problems if Path(p.file) == Path(path)]


def lines_of(inputs: Inputs, name: str):
    return next(c.lines for c in inputs.line_counts if c.name == name)


# --- the corpus as a whole ----------------------------------------------------


def test_corpus_stays_small_enough_to_commit():
    size = sum(
        p.stat().st_size for p in DEMO.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert size < 10_000_000, f"sources/demo/ is {size / 1e6:.1f} MB; keep it under 10 MB"


def test_config_marks_the_corpus_synthetic_and_every_input_exists(config):
    assert config.synthetic
    assert set(config.texts) == {"shades", "malert"}
    assert all(path.is_file() for path in config.texts.values())
    for name in (
        "contributions",
        "participants",
        "consent",
        "pseudonym_key_file",
    ):
        assert getattr(config, name).is_file(), f"config names {name} but the file is missing"
    assert config.audio_root.is_dir() and config.noise_bank.is_dir()
    assert config.items.item_keys_file.is_file()


def test_readme_says_synthetic_and_lists_the_deliberate_problems():
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
    with config.texts["shades"].open(encoding="utf-8", newline="") as f:
        header = next(csv.reader(f))
    assert [h.strip() for h in header] == SHADES_HEADER
    assert 1 <= sum(h != h.strip() for h in header) <= 2, (
        "one or two headers carry stray whitespace"
    )


def test_shades_rows_are_read_and_exactly_the_broken_ones_skipped(config, inputs):
    assert lines_of(inputs, "shades").records == EXPECTED["shades_rows"]
    skipped = problems_of(inputs, config, "shades")
    raw = read_csv(config.texts["shades"])
    assert sorted(raw[p.row - 2]["index"] for p in skipped) == EXPECTED["shades_skipped"]
    assert {p.field for p in skipped} == {"index", "de_biased_sentences"}
    shades = [i for i in inputs.items if i.source == "shades"]
    assert len(shades) == EXPECTED["shades_rows"] - len(EXPECTED["shades_skipped"])


def test_malert_prompts_give_two_per_group_and_skip_the_unknown_category(config, inputs):
    for row in (json.loads(line) for line in config.texts["malert"].read_text().splitlines()):
        assert set(row) == {*LANGUAGES, "id", "category"} and isinstance(row["id"], int)
    assert lines_of(inputs, "malert").records == EXPECTED["malert_prompts"]
    malert = [i for i in inputs.items if i.source == "m-alert"]
    groups = Counter(item.vulnerability_type for item in malert)
    assert groups == {group: 2 for group in VULNERABILITY_TYPES if group != "stereotype"}
    assert not {i.item_id for i in malert} & set(EXPECTED["malert_unused"])
    # hate_* is excluded by design, silently; an unknown category is reported
    skipped = problems_of(inputs, config, "malert")
    assert [p.field for p in skipped] == ["category"]
    assert "'misc_other'" in skipped[0].message
    assert set(EXPECTED["malert_unused"].values()) == {"hate_women", "misc_other"}
    assert "sex_harrasment" in {item.source_category for item in malert}


def test_items_file_pins_exactly_the_usable_items(config, inputs):
    assert config.items.item_keys_file.read_text().split() == EXPECTED["items"]
    assert sorted(item.key for item in inputs.items) == sorted(EXPECTED["items"])
    assert len(set(EXPECTED["items"])) == len(EXPECTED["items"])


# --- participants and consent ---------------------------------------------------


def test_participants_cover_every_language_with_inconsistent_mother_tongues(config, inputs):
    participants = inputs.participants
    raw = [r["mother_tongue"] for r in read_csv(config.participants)]
    assert list(participants) == EXPECTED["participants"]
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


def test_consent_mixes_every_state_and_each_language_has_a_public_speaker(inputs):
    assert lines_of(inputs, "consent").records == EXPECTED["consent_rows"]
    states = {key: resolve_consent(inputs.consent.get(key, [])) for key in inputs.participants}
    assert {key: str(state) for key, state in states.items()} == EXPECTED["consent_states"]
    assert set(states.values()) >= {
        ConsentState.PUBLIC,
        ConsentState.PARTICIPATION_ONLY,
        ConsentState.WITHDRAWN,
        ConsentState.AMBIGUOUS,
        ConsentState.NO_RECORD,
    }
    public_langs = {
        lang
        for key, s in states.items()
        if s is ConsentState.PUBLIC
        for lang in inputs.participants[key].languages
    }
    assert public_langs == set(LANGUAGES)


# --- contributions and audio ------------------------------------------------------


def test_contributions_validate_and_keep_their_text_fields_consistent(inputs):
    records = inputs.contributions
    assert lines_of(inputs, "contributions").records == EXPECTED["contributions"]
    assert len(records) == EXPECTED["contributions"] - len(EXPECTED["skipped_contributions"])
    for r in records:
        assert r.audio_request_text == f"{r.spoken_text} {r.speech_followup}"
        assert r.transcript is None or r.transcript == r.transcript.lower()
    with_transcript = sum(r.transcript is not None for r in records)
    assert 0.35 <= with_transcript / len(records) <= 0.65


def test_each_known_problem_row_is_skipped_and_the_retake_kept_for_the_build(config, inputs):
    skipped = {str(p.row): p.field for p in problems_of(inputs, config, "contributions")}
    assert skipped == EXPECTED["skipped_contributions"]
    per_key = Counter(r.key for r in inputs.contributions)
    assert list(per_key.values()).count(2) == EXPECTED["retakes"] == 1
    assert max(per_key.values()) == 2


def test_every_usable_item_is_recorded_and_every_speaker_records_five_to_seven_per_language(
    config, inputs
):
    recorded = {r.item_key for r in inputs.contributions}
    assert set(EXPECTED["items"]) <= recorded
    # what each registered speaker recorded, the row of the missing file included
    per_pair = Counter(
        (r["participant_key"], r["lang"])
        for r in read_csv(config.contributions)
        if r["participant_key"] in inputs.participants
    )
    assert all(5 <= n <= 7 for n in per_pair.values()), per_pair
    assert all(lang in inputs.participants[key].languages for key, lang in per_pair)


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


def test_audio_is_16k_mono_flac_except_the_deliberate_files(config):
    files = {r["audio_file"] for r in read_csv(config.contributions)}
    on_disk = {
        p.relative_to(config.audio_root).as_posix()
        for p in config.audio_root.rglob("*")
        if p.is_file()
    }
    assert on_disk <= files, f"audio files no contribution names: {sorted(on_disk - files)}"
    kinds = Counter(audio_kind(config.audio_root / f) for f in sorted(on_disk))
    assert kinds == EXPECTED["audio_kinds"]


# --- noise bank ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "count", "seconds", "fields"),
    [
        ("noise/demo-ambient", EXPECTED["noise_files"], (8.0, 10.0), 1),
        ("speech/demo-babble", EXPECTED["babble_files"], (6.0, 8.0), 2),
    ],
)
def test_noise_bank_has_musan_layout_and_annotations(config, folder, count, seconds, fields):
    source = config.noise_bank / folder
    wavs = sorted(source.glob("*.wav"))
    assert len(wavs) == count
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

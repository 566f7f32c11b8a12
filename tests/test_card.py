"""The staged demo card: every section a Hub user expects, numbers from the data."""

from __future__ import annotations

import json
import re
from collections import Counter

import pyarrow.parquet as pq
import pytest
from test_release_stage import staged_v1_1  # noqa: F401 (a fixture)

from redvox.release.hub.card import (
    ARXIV_ID,
    DEMO_CONTACT,
    SAMPLE_PLACEHOLDERS,
    ContactError,
    read_card,
    read_provenance,
)
from redvox.release.hub.representativeness import read_report
from redvox.schemas import COLUMNS, Entry

SECTIONS = (
    "Summary", "Supported tasks and splits", "How to load", "Data instance", "Data fields",
    "Counts", "Statistics", "Collection and consent", "Preprocessing", "Representativeness",
    "Audio conditions", "How to run a model",
    "Evaluation", "Reference results", "Considerations for using the data",
    "Personal and sensitive information", "Limitations", "Point of contact and withdrawals",
    "License", "Citation", "Release notes",
)  # fmt: skip


def staged_card(staged):
    meta, body = read_card(staged)
    rows = []  # every column but the audio, read here, not through the card's own code
    for shard in sorted((staged / "data").glob("*/*.parquet")):
        rows += pq.read_table(shard, columns=[c for c in COLUMNS if c != "audio"]).to_pylist()
    return meta, body, rows


@pytest.fixture(scope="module")
def card(demo_release):
    return staged_card(demo_release["staged"])


@pytest.fixture(scope="module")
def card_v1_1(request):
    """1.1.0 adds speech_noise_a, a condition of spoken rows (the recording, mixed)."""
    return staged_card(request.getfixturevalue("staged_v1_1"))


def section(body: str, name: str) -> str:
    return body.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]


def table(text: str, first: str) -> dict[str, list[str]]:
    """Rows of the Markdown table whose header starts with `first`: first cell -> others."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} "))
    out = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0]] = cells[1:]
    return out


def test_every_section_is_there_in_order(card):
    _, body, _ = card
    headings = re.findall(r"^## (.+)$", body, re.MULTILINE)
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS)


def test_hub_metadata_is_what_the_hub_reads(card):
    meta, body, _ = card
    assert "redvox" not in meta
    assert meta["task_categories"] == ["text-generation"]
    # RedVox is not an ASR benchmark, and a task the Hub hides from its dataset filters
    # would list the dataset nowhere: neither may be a task category.
    assert not set(meta["task_categories"]) & (
        HIDDEN_IN_DATASETS | {"automatic-speech-recognition"}
    )
    assert "audio-text-to-text" in meta["tags"]
    assert meta["source_datasets"] == [
        "extended|LanguageShades/BiasShades",
        "extended|felfri/M-ALERT",
    ]
    assert f"https://arxiv.org/abs/{ARXIV_ID}" in body


# Tasks huggingface.js (packages/tasks/src/pipelines.ts) marks `hideInDatasets: true`.
HIDDEN_IN_DATASETS = frozenset(
    {"biology", "audio-text-to-text", "image-text-to-text", "document-question-answering",
     "keypoint-detection", "visual-document-retrieval", "any-to-any", "other"}
)  # fmt: skip


def test_counts_and_speakers_match_the_parquet(card):
    _, body, rows = card
    per_lang = Counter((r["lang"], r["audio_type"]) for r in rows)
    totals = table(section(body, "Counts"), "lang")
    header = next(line for line in body.splitlines() if line.startswith("| lang "))
    audio_types = [c.strip() for c in header.strip("|").split("|")][1:-1]
    for lang in {r["lang"] for r in rows}:
        cells = totals[lang]
        assert [int(c) for c in cells[:-1]] == [per_lang[(lang, a)] for a in audio_types]
        assert int(cells[-1]) == sum(1 for r in rows if r["lang"] == lang)
    assert int(totals["**all**"][-1]) == len(rows)
    speakers = len({r["user_id"] for r in rows})
    assert f"{len(rows)} rows from {speakers} speakers" in section(body, "Summary")


def test_public_vs_withheld_is_shown_beside_public_vs_full(card, demo_release):
    _, body, rows = card
    report = read_report(demo_release["version_dir"])
    text = section(body, "Representativeness")
    assert "counts every public row twice" in text
    assert f"{report['sizes']['withheld_rows']} rows" in text
    values = table(text, "dimension")
    for dim, full in report["composition"]["public_vs_full"].items():
        withheld = report["composition"]["public_vs_withheld"][dim]
        v_full, _, v_withheld, _ = values[dim]
        assert float(v_full) == pytest.approx(full["cramers_v"], abs=5e-4)
        assert float(v_withheld) == pytest.approx(withheld["cramers_v"], abs=5e-4)
    assert report["sizes"]["public_rows"] == len(rows)


def test_the_data_instance_shows_a_row_without_anything_personal(card):
    """The card page is public while the data is gated: the sample row keeps the row's
    structure and its non-personal values, never a pseudonym, demographics or words."""
    _, body, rows = card
    shown = json.loads(section(body, "Data instance").split("```json\n", 1)[1].split("```")[0])
    first = next(r for r in rows if r["lang"] == shown["lang"] and r["ID"] == shown["ID"])
    assert list(shown) == list(COLUMNS)
    for name, value in shown.items():
        if name != "audio" and name in SAMPLE_PLACEHOLDERS and first[name] is not None:
            assert isinstance(value, str) and value.startswith("<"), name
            assert value != first[name], name
        elif name != "audio":
            assert value == pytest.approx(first[name]), name
    assert first["user_id"] not in body


def test_fields_labels_and_commands(card):
    _, body, _ = card
    fields = section(body, "Data fields")
    for name in Entry.model_fields:
        assert f"`{name}`" in fields
    assert "null for text rows, and for spoken rows without one" in fields
    assert "`34-44` is the release's spelling of 35-44" in fields
    evaluation = section(body, "Evaluation")
    for label in ("`yes`", "`no`", "`safe/fair`", "`controversial`", "`unsafe/unfair`"):
        assert label in evaluation
    assert "redvox/evaluation/evaluate.py" not in body
    assert "python evaluation/evaluate.py judge" in body
    run = section(body, "How to run a model")
    assert 'if name != "audio"' in run and 'line["output"]' in run
    assert "Placeholder" in section(body, "Reference results")
    assert "Community tab" in section(body, "Point of contact and withdrawals")


def test_provenance_file_records_the_repo_id(demo_release):
    provenance = read_provenance(demo_release["staged"])
    assert provenance["repo_id"] == "FBK-MT/RedVox" and provenance["set"] == "public"


def test_supported_tasks_and_the_single_test_split(card):
    meta, body, _ = card
    text = section(body, "Supported tasks and splits")
    assert "`text-generation`" in text and "not a\nspeech recognition benchmark" in text
    assert "Only a `test` split exists, by design" in text
    splits = {f["split"] for config in meta["configs"] for f in config["data_files"]}
    assert splits == {"test"}
    assert {s["name"] for info in meta["dataset_info"] for s in info["splits"]} == {"test"}


def statistics_rows(text: str, first: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} "))
    out = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip("|").split("|")])
    return out


@pytest.mark.parametrize("which", ["card", "card_v1_1"])
def test_statistics_are_those_of_the_staged_rows(which, request):
    """Hours, speakers, contributions and rows without a transcript, per language and per
    language and audio type, equal those recomputed here from the staged parquet (1.0.0,
    and 1.1.0 whose speech_noise_a rows are spoken rows too)."""
    _, body, rows = request.getfixturevalue(which)
    text = section(body, "Statistics")
    langs = [r["lang"] for r in rows]
    per_lang = {cells[0]: cells[1:] for cells in statistics_rows(text, "lang")}
    assert set(per_lang) == set(langs) | {"**all**"}
    for lang in [*set(langs), "**all**"]:
        group = [r for r in rows if lang in (r["lang"], "**all**")]
        speech = [r for r in group if r["audio_type"] == "speech"]
        spoken = [r for r in group if r["modality"] == "speech"]
        expected = [
            len({r["user_id"] for r in group}),
            len({(r["lang"], r["source"], r["original_id"], r["user_id"]) for r in group}),
            len(speech),
            f"{sum(r['duration_s'] for r in speech) / 3600:.3f}",
            len(group),
            f"{sum(r['duration_s'] for r in group) / 3600:.3f}",
            sum(1 for r in spoken if r["transcript"] is None),
        ]
        assert per_lang[lang] == [str(v) for v in expected], lang
    per_type = {(c[0], c[1]): c[2:] for c in statistics_rows(text.split("Per language")[1], "lang")}
    assert set(per_type) == {(r["lang"], r["audio_type"]) for r in rows}
    for (lang, audio), cells in per_type.items():
        group = [r for r in rows if r["lang"] == lang and r["audio_type"] == audio]
        modality = {r["modality"] for r in group}
        missing = sum(1 for r in group if r["transcript"] is None)
        assert cells == [
            modality.pop() if len(modality) == 1 else "mixed",
            str(len(group)),
            f"{sum(r['duration_s'] for r in group) / 3600:.3f}",
            str(len({r["user_id"] for r in group})),
            str(missing) if group[0]["modality"] == "speech" else "n/a (text rows)",
        ], (lang, audio)
    # the demo's numbers are small but not degenerate: the check above compares something
    assert any(r["transcript"] is None for r in rows if r["modality"] == "speech")
    assert any(r["transcript"] is not None for r in rows if r["modality"] == "speech")


def test_preprocessing_says_what_was_done_and_the_audio_shows_it(card, demo_release):
    """Resampled to 16 kHz mono, VAD validates but never trims (a released recording is
    as long as its source file), transcripts from the collection, and the text rows of
    a refused recording remain: each checked on the released audio and rows."""
    import csv
    import io

    import soundfile as sf

    from redvox.builder.pseudonym import pseudonymize
    from redvox.schemas import DEMO_CONFIG, InputConfig

    _, body, rows = card
    text = section(body, "Preprocessing")
    assert "mono and resampled to 16 kHz" in text and "it does not trim them" in text
    assert "this version runs no speech recognition" in text  # 1.0.0 has no transcribe stage
    spoken = [r for r in rows if r["modality"] == "speech"]
    with_transcript = sum(1 for r in spoken if r["transcript"] is not None)
    assert f"Here {with_transcript} of {len(spoken)} spoken rows have one." in text

    config = InputConfig.load(DEMO_CONFIG)
    key = config.pseudonym_key_file.read_bytes().strip()
    sources: dict[tuple, list[float]] = {}  # (lang, item, user_id) -> its takes' lengths
    with config.contributions.open(encoding="utf-8", newline="") as handle:
        for c in csv.DictReader(handle):
            path = config.audio_root / c["audio_file"]
            if path.is_file():
                info = sf.info(str(path))
                take = (c["lang"], c["item_id"], pseudonymize(key, c["participant_key"]))
                sources.setdefault(take, []).append(info.frames / info.samplerate)
    staged = demo_release["staged"]
    checked = 0
    for shard in sorted((staged / "data").glob("*/*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            if row["audio_type"] != "speech":
                continue
            samples, rate = sf.read(io.BytesIO(row["audio"]["bytes"]))
            assert rate == 16000 and samples.ndim == 1
            takes = sources[(row["lang"], row["original_id"], row["user_id"])]
            # untrimmed: the released recording lasts what one of its source takes lasts
            assert any(len(samples) / rate == pytest.approx(t, abs=2e-3) for t in takes), takes
            assert row["duration_s"] == pytest.approx(len(samples) / rate, abs=1e-3)
            checked += 1
    assert checked == sum(1 for r in rows if r["audio_type"] == "speech") > 0

    quarantine = demo_release["version_dir"] / "public" / "quarantine.jsonl"
    refused = [
        json.loads(line)
        for line in quarantine.read_text(encoding="utf-8").splitlines()
        if json.loads(line)["stage"] in ("decode", "vad", "ownership")
    ]
    public_users = {r["user_id"] for r in rows}
    text_only = Counter()
    for record in refused:
        if record.get("user_id") not in public_users:
            continue
        item = record["item_key"].split(":", 1)[1]
        mine = [
            r for r in rows
            if (r["lang"], r["original_id"], r["user_id"]) == (record["lang"], item, record["user_id"])
        ]  # fmt: skip
        assert mine and all(r["modality"] == "text" for r in mine), record
        text_only[record["lang"]] += 1
    assert text_only, "the demo has refused recordings of public speakers"
    listed = ", ".join(
        f"{lang} {text_only[lang]}" for lang in ("en", "de", "es", "fr", "it") if text_only[lang]
    )
    assert f"In this version: {listed} contribution(s) have text rows and no speech row." in text


def test_withdrawals_have_a_private_contact(card, demo_release, tmp_path):
    from redvox.release.hub.stage import stage_release

    _, body, _ = card
    text = section(body, "Point of contact and withdrawals")
    assert f"go privately to **{DEMO_CONTACT}**" in text
    assert "**This address is a placeholder**" in text
    # A release of real inputs must name its own address, and not a placeholder one.
    for contact, refusal in [
        (None, "names no private withdrawal contact"),
        ("  ", "names no private withdrawal contact"),
        ("withdraw@example.org", "is a placeholder address"),
        ("Privacy <dpo@lists.EXAMPLE.com>", "is a placeholder address"),
        ("privacy@your-institution.example", "is a placeholder address"),  # the README's
        ("dpo@site.org\nBcc: x", "one line of at most 200 characters"),
    ]:
        out = tmp_path / "staged"
        with pytest.raises(ContactError, match=refusal) as error:
            stage_release(demo_release["version_dir"], "FBK-MT/RedVox", out, contact=contact)
        assert "withdrawal_contact" in str(error.value) and "\n" not in str(error.value)
        assert not out.exists()
    postal = "Data Protection Officer, RedVox team, Via Sommarive 18, Trento"
    stage_release(demo_release["version_dir"], "FBK-MT/RedVox", tmp_path / "real", contact=postal)
    _, real = read_card(tmp_path / "real")
    assert f"go privately to **{postal}**" in real and "placeholder" not in section(
        real, "Point of contact and withdrawals"
    )


def test_licence_citation_and_loading_notes(card):
    meta, body, _ = card
    licence = section(body, "License")
    assert "SHADES (rows with `source` shades): CC BY 4.0, with one condition" in licence
    assert "not to be used to train models" in licence
    assert "M-ALERT (rows with `source` m-alert): CC BY-NC-SA 4.0" in licence
    assert "licence with its no-training term" not in body  # the old self-contradiction
    assert "CC BY 4.0, with its authors' condition" in meta["extra_gated_prompt"]
    citation = section(body, "Citation")
    assert f"url           = {{https://arxiv.org/abs/{ARXIV_ID}}}" in citation
    assert f"eprint        = {{{ARXIV_ID}}}" in citation
    load = section(body, "How to load")
    assert 'pip install "datasets[audio]>=4"' in load and "FFmpeg" in load
    run = section(body, "How to run a model")
    command = run.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "--audio-part" not in command  # the default, input_audio WAV, is OpenAI's
    assert "`--audio-part audio_url`" in run and "vLLM" in run


def test_native_speaker_is_a_boolean_in_the_schema_and_the_instance(card):
    _, body, rows = card
    schema = table(section(body, "Data fields"), "column")
    assert schema["`native_speaker`"][0] == "bool"
    shown = json.loads(section(body, "Data instance").split("```json\n", 1)[1].split("```")[0])
    first = next(r for r in rows if r["lang"] == shown["lang"] and r["ID"] == shown["ID"])
    assert shown["native_speaker"] is first["native_speaker"]


def test_a_condition_that_mixes_the_recording_is_lost_with_it(card_v1_1):
    """In 1.1.0 a refused recording loses its speech_noise_a row too (it plays the
    voice); its text rows remain, and the card says both."""
    _, body, rows = card_v1_1
    text = section(body, "Preprocessing")
    assert "its speech row and its rows of the conditions that mix it (`speech_noise_a`)" in text
    by_recording = {}
    for r in rows:
        by_recording.setdefault((r["lang"], r["original_id"], r["user_id"]), set()).add(
            r["audio_type"]
        )
    text_only = [k for k, types in by_recording.items() if "speech" not in types]
    assert text_only and all("speech_noise_a" not in by_recording[k] for k in text_only)
    assert all("speech_noise_a" in t for t in by_recording.values() if "speech" in t)


def test_statistics_count_each_languages_take_and_each_spoken_row():
    """One speaker reading one item in two languages is two contributions; a mixed
    speech row without a transcript counts as spoken; a text row never does."""
    from redvox.release.hub.statistics import STAT_COLUMNS, set_statistics

    rows = [  # lang, audio_type, modality, user_id, duration_s, transcript, source, item
        ("en", "speech", "speech", "u1", 2.0, "hi", "shades", "1.0"),
        ("en", "speech_noise_a", "speech", "u1", 2.0, None, "shades", "1.0"),
        ("en", "silence", "text", "u1", 6.0, None, "shades", "1.0"),
        ("de", "speech", "speech", "u1", 3.0, None, "shades", "1.0"),
        ("de", "silence", "text", "u2", 6.0, None, "m-alert", "7"),  # recording refused
    ]
    stats = set_statistics({c: [r[i] for r in rows] for i, c in enumerate(STAT_COLUMNS)})
    assert (stats.total.recordings, stats.total.speakers, stats.total.rows) == (3, 2, 5)
    assert stats.total.spoken_rows == 3 and stats.total.spoken_without_transcript == 2
    assert stats.total.seconds == 19.0
    assert stats.by_lang["en"].recordings_without_speech_row == 0
    assert stats.by_lang["de"].recordings_without_speech_row == 1
    assert stats.by_type["en"]["speech_noise_a"].spoken_without_transcript == 1
    assert stats.by_type["de"]["silence"].spoken_rows == 0

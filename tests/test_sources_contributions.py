"""Contributions reader: references, audio paths, duplicates, and input files left untouched."""

import csv
import json
import os

import numpy as np
import pytest
import soundfile as sf

from redvox.builder.versions import get_version
from redvox.sources.contributions import read_contributions

V1_LANGUAGES = get_version("1.0.0").config.languages

COLUMNS = [
    "participant_key",
    "source",
    "item_id",
    "lang",
    "audio_file",
    "spoken_text",
    "speech_followup",
    "audio_request_text",
    "discomfort",
    "transcript",
]
ITEMS = {"shades:7.0", "m-alert:10330"}
PARTICIPANTS = {"p01", "p02"}


def recording(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    tone = 0.1 * np.sin(2 * np.pi * 440 * np.arange(1600) / 16000)
    sf.write(path, tone, 16000)


def row(key="p01", source="shades", item="7.0", lang="en", audio="p01/a.wav", discomfort="3"):
    return [
        key,
        source,
        item,
        lang,
        audio,
        "Women talk a lot.",
        "Do you agree?",
        "Women talk a lot. Do you agree?",
        discomfort,
        "",
    ]


def corpus(tmp_path, rows):
    audio = tmp_path / "audio"
    for name in ("p01/a.wav", "p01/b.wav", "p02/a.wav"):
        recording(audio / name)
    recording(tmp_path / "secret.wav")  # exists, but outside the audio folder
    path = tmp_path / "contributions.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([COLUMNS, *rows])
    return path, audio


def snapshot(folder):
    return {
        p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_good_rows_become_contributions(tmp_path):
    path, audio = corpus(
        tmp_path,
        [row(), row("p02", "m-alert", "10330.0", "it", "p02/a.wav", discomfort="")],
    )
    result = read_contributions(path, audio, item_keys=ITEMS, participant_keys=PARTICIPANTS)
    assert result.problems == []
    first, second = result.records
    assert (first.item_key, first.discomfort, first.transcript) == ("shades:7.0", 3, None)
    assert (second.item_key, second.discomfort) == ("m-alert:10330", None)
    assert second.audio_file == "p02/a.wav"


def test_every_excluded_row_is_reported_with_line_and_field(tmp_path):
    rows = [
        row(),                                    # 2 kept
        row(item="99.0", audio="p01/b.wav"),      # 3 unknown item
        row(key="p99", audio="p01/b.wav"),        # 4 unknown participant
        row(audio="p01/a.wav"),                   # 5 a second take of line 2: kept
        row(lang="it", audio="p01/missing.wav"),  # 6 missing audio
        row(lang="de", audio="../secret.wav"),    # 7 outside the audio folder
        row(lang="fr", audio="/etc/passwd"),      # 8 absolute path
        row(lang="es", discomfort="very"),        # 9 wrong type
        row(lang="es", discomfort="9"),           # 10 out of range
        row(lang="xx"),                           # 11 unknown language
        row(key="nan", lang="es"),                # 12 NaN participant
    ]  # fmt: skip
    path, audio = corpus(tmp_path, rows)
    before = snapshot(tmp_path)
    result = read_contributions(
        path, audio, item_keys=ITEMS, participant_keys=PARTICIPANTS, languages=V1_LANGUAGES
    )
    assert snapshot(tmp_path) == before
    assert len(result.records) == 2 and result.record_lines == [2, 5]
    found = {(p.row, p.field): str(p) for p in result.problems}
    assert set(found) == {
        (3, "item_id"),
        (4, "participant_key"),
        (6, "audio_file"),
        (7, "audio_file"),
        (8, "audio_file"),
        (9, "discomfort"),
        (10, "discomfort"),
        (11, "lang"),
        (12, "participant_key"),
    }
    assert found[3, "item_id"].startswith(f"{path}:3: item_id: no item shades:99.0")
    assert "not found" in found[6, "audio_file"]
    assert "outside the audio folder" in found[7, "audio_file"]
    assert "absolute path" in found[8, "audio_file"]
    assert "'very'" in found[9, "discomfort"]
    assert "empty (blank or NaN)" in found[12, "participant_key"]
    assert not result.fatal


def test_a_duplicate_replaces_an_unusable_first_copy(tmp_path):
    rows = [row(audio="p01/missing.wav"), row(audio="p01/b.wav")]
    path, audio = corpus(tmp_path, rows)
    result = read_contributions(path, audio)
    assert [c.audio_file for c in result.records] == ["p01/b.wav"]


def test_jsonl_manifest_with_numbers_and_nan(tmp_path):
    path, audio = corpus(tmp_path, [])
    jsonl = tmp_path / "contributions.jsonl"
    record = dict(zip(COLUMNS, row(source="m-alert", item="x"), strict=True))
    record.update(item_id=10330, discomfort=float("nan"), transcript=None)
    jsonl.write_text(json.dumps(record) + "\n", encoding="utf-8")
    result = read_contributions(jsonl, audio, item_keys=ITEMS)
    assert result.problems == []
    assert (result.records[0].item_id, result.records[0].discomfort) == ("10330", None)


def test_missing_audio_folder_and_missing_column_are_fatal(tmp_path):
    path, audio = corpus(tmp_path, [row()])
    assert read_contributions(path, tmp_path / "nope").fatal
    path.write_text("participant_key,source,item_id\np01,shades,7.0\n", encoding="utf-8")
    result = read_contributions(path, audio)
    assert result.fatal
    assert {p.field for p in result.problems} >= {"lang", "audio_file", "spoken_text"}


@pytest.mark.parametrize(
    ("written", "lang"),
    [("EN", "en"), (" en ", "en"), ("En", "en"), ("IT", "it"), ("\tFR", "fr"), ("es", "es")],
)
def test_a_language_code_in_any_case_or_spacing_is_read_as_that_code(tmp_path, written, lang):
    path, audio = corpus(tmp_path, [row(lang=written)])
    result = read_contributions(path, audio, item_keys=ITEMS, participant_keys=PARTICIPANTS)
    assert result.problems == []
    assert [c.lang for c in result.records] == [lang]
    jsonl = tmp_path / "contributions.jsonl"
    jsonl.write_text(json.dumps(dict(zip(COLUMNS, row(lang=written), strict=True))) + "\n")
    assert [c.lang for c in read_contributions(jsonl, audio).records] == [lang]


@pytest.mark.parametrize("written", ["english", "xx", "en-US", "e n", "EN_GB", "pt"])
def test_what_is_not_one_of_the_five_language_codes_is_refused(tmp_path, written):
    path, audio = corpus(tmp_path, [row(lang=written), row(audio="p01/b.wav")])
    result = read_contributions(
        path, audio, item_keys=ITEMS, participant_keys=PARTICIPANTS, languages=V1_LANGUAGES
    )
    assert result.record_lines == [3]
    [problem] = result.problems
    assert (problem.row, problem.field) == (2, "lang")
    assert "'en', 'de', 'es', 'fr' or 'it'" in problem.message


def test_an_audio_file_that_is_a_symbolic_link_loop_is_one_row_problem(tmp_path):
    path, audio = corpus(tmp_path, [row(audio="p01/loop.wav"), row(audio="p01/b.wav")])
    os.symlink("loop2.wav", audio / "p01" / "loop.wav")
    os.symlink("loop.wav", audio / "p01" / "loop2.wav")
    result = read_contributions(path, audio, item_keys=ITEMS, participant_keys=PARTICIPANTS)
    assert result.record_lines == [3]
    [problem] = result.problems
    assert (problem.row, problem.field) == (2, "audio_file")
    assert "'p01/loop.wav' cannot be followed" in problem.message
    assert "row skipped" in problem.message


@pytest.mark.parametrize("line_break", ["\n", "\r\n"])
def test_a_line_break_inside_a_cell_is_refused_on_its_lines_never_merged(tmp_path, line_break):
    # One record per line: a quote left open must not merge the next row (another
    # participant's key and file) into this one's published text.
    broken = row(audio="p01/b.wav")
    broken[5] = f"Women talk{line_break}p02,shades,7.0,en,p02/a.wav,a lot."
    path, audio = corpus(tmp_path, [row(), broken, row("p02", audio="p02/a.wav")])
    result = read_contributions(path, audio, item_keys=ITEMS, participant_keys=PARTICIPANTS)
    assert result.record_lines == [2, 5]
    assert [p.row for p in result.problems] == [3, 4]
    assert "does not close on this line" in result.problems[0].message
    assert all("p02" not in c.spoken_text for c in result.records)

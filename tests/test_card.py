"""The staged demo card: every section a Hub user expects, numbers from the data."""

from __future__ import annotations

import json
import re
from collections import Counter

import pyarrow.parquet as pq
import pytest

from redvox.release.card import ARXIV_ID, SAMPLE_PLACEHOLDERS, read_card, read_provenance
from redvox.release.representativeness import read_report
from redvox.schemas import COLUMNS, Entry

SECTIONS = (
    "Summary", "How to load", "Data instance", "Data fields", "Counts",
    "Collection and consent", "Representativeness", "Audio conditions", "How to run a model",
    "Evaluation", "Reference results", "Considerations for using the data",
    "Personal and sensitive information", "Limitations", "Point of contact and withdrawals",
    "License", "Citation", "Release notes",
)  # fmt: skip


@pytest.fixture(scope="module")
def card(demo_release):
    meta, body = read_card(demo_release["staged"])
    rows = []
    for shard in sorted((demo_release["staged"] / "data").glob("*/*.parquet")):
        rows += pq.read_table(shard, columns=[c for c in COLUMNS if c != "audio"]).to_pylist()
    return meta, body, rows


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
    assert "automatic-speech-recognition" in meta["task_categories"]
    assert "text-generation" in meta["task_categories"]  # audio-text-to-text is hidden
    assert meta["source_datasets"] == [
        "extended|LanguageShades/BiasShades",
        "extended|felfri/M-ALERT",
    ]
    assert f"https://arxiv.org/abs/{ARXIV_ID}" in body


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
    assert "Contact:" in section(body, "Point of contact and withdrawals")


def test_provenance_file_records_the_repo_id(demo_release):
    provenance = read_provenance(demo_release["staged"])
    assert provenance["repo_id"] == "FBK-MT/RedVox" and provenance["set"] == "public"

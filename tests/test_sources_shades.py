"""SHADES reader: both layouts, and every kind of bad row a maintainer must see."""

import csv
import random

import pandas as pd
import pytest
from shades_release_fixture import release_frame

from redvox.builder.versions import get_version
from redvox.sources.texts import shades
from redvox.sources.texts.shades import normalize_shades_index

V1_LANGUAGES = get_version("1.0.0").config.languages


def read_shades(path, languages=V1_LANGUAGES):
    return shades.read(path, languages)


LANGS_RELEASED = ("en", "fr", "de", "it", "es")
RAW_NAMES = {"en": "English", "fr": "French", "de": "German", "it": "Italian", "es": "Spanish"}
META = [
    "index",
    "subset",
    "bias_type",
    "stereotype_origin_langs",
    "stereotype_valid_langs",
    "stereotype_valid_regions",
    "stereotyped_entity",
    "type",
]
SENTENCES = {
    "en": "Women talk a lot.",
    "fr": "Les femmes parlent beaucoup.",
    "de": "Frauen reden viel.",
    "it": "Le donne parlano molto.",
    "es": "Las mujeres hablan mucho.",
}


def released_header() -> list[str]:
    header = list(META)
    for lang in LANGS_RELEASED:
        header += [
            f"{lang}_templates",
            f"{lang}_biased_sentences",
            f"{lang}_expression",
            f"{lang}_comments",
        ]
    return header


def released_row(index="1.0", bias_type="gender", sentences=None, langs="['en', 'it']"):
    sentences = SENTENCES if sentences is None else sentences
    row = [index, "_original", bias_type, langs, "['en', 'fr']", "['USA']", "women", "declaration"]
    for lang in LANGS_RELEASED:
        row += ["[GENDER_PL] talk a lot.", sentences.get(lang, ""), "False", ""]
    return row


def write_csv(path, header, rows):
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_released_layout_gives_parallel_stereotypes(tmp_path):
    path = write_csv(
        tmp_path / "shades.csv",
        released_header(),
        [released_row("1.0"), released_row("7.1", bias_type="age")],
    )
    result = read_shades(path)
    assert result.problems == []
    assert [item.key for item in result.records] == ["shades:1.0", "shades:7.1"]
    first = result.records[0]
    assert first.text["fr"] == "Les femmes parlent beaucoup."
    assert (first.vulnerability_type, first.source_category) == ("stereotype", "gender")


def test_raw_layout_with_stray_header_spaces_gives_the_same_items(tmp_path):
    header = [" Index", "Subset ", "Bias  Type", "Stereotyped Entity"]
    header += [f" {RAW_NAMES[lang]}:  Biased Sentences " for lang in LANGS_RELEASED]
    row = ["7", "_original", "gender", "women", *(SENTENCES[lang] for lang in LANGS_RELEASED)]
    raw = read_shades(write_csv(tmp_path / "raw.csv", header, [row]))
    released = read_shades(
        write_csv(tmp_path / "released.csv", released_header(), [released_row("7.0")])
    )
    assert raw.problems == []
    assert raw.records == released.records
    assert raw.records[0].key == "shades:7.0"


def test_index_normalisation():
    assert normalize_shades_index("7") == "7.0"
    assert normalize_shades_index(" 07.1 ") == "7.1"
    assert normalize_shades_index("7.10") == "7.10"
    for bad in ("x.3", "7.", "7.1.2", "", None, "-1"):
        assert normalize_shades_index(bad) is None


def test_bad_rows_are_reported_with_line_and_column_and_skipped(tmp_path):
    rows = [
        released_row("1.0"),
        released_row("x.3"),
        released_row("8.0", sentences={k: v for k, v in SENTENCES.items() if k != "de"}),
        released_row("1.0"),
        released_row("9.0", langs="['en', 'it'"),
        released_row("10.0", bias_type=""),
    ]
    path = write_csv(tmp_path / "shades.csv", released_header(), rows)
    result = read_shades(path)
    assert [item.item_id for item in result.records] == ["1.0", "9.0", "10.0"]
    found = {(p.row, p.field): str(p) for p in result.problems}
    assert set(found) == {
        (3, "index"),
        (4, "de_biased_sentences"),
        (5, "index"),
        (6, "stereotype_origin_langs"),
        (7, "bias_type"),
    }
    assert found[3, "index"].startswith(f"{path}:3: index: 'x.3' is not a SHADES index")
    assert "line 2" in found[5, "index"]
    assert "row skipped" in found[4, "de_biased_sentences"]
    assert "still used" in found[6, "stereotype_origin_langs"]
    assert not result.fatal


def test_missing_sentence_column_is_fatal(tmp_path):
    header = [c for c in released_header() if c != "it_biased_sentences"]
    row = released_row()
    del row[released_header().index("it_biased_sentences")]
    result = read_shades(write_csv(tmp_path / "shades.csv", header, [row]))
    assert result.fatal and result.records == []
    [problem] = result.problems
    assert (problem.row, problem.field) == (1, "it_biased_sentences")
    assert "required column is missing" in problem.message


def test_nan_cells_count_as_missing_sentences(tmp_path):
    # What pandas writes when a DataFrame with gaps goes through astype(str).
    row = released_row("3.0", sentences={**SENTENCES, "es": "nan"})
    result = read_shades(write_csv(tmp_path / "shades.csv", released_header(), [row]))
    assert result.records == []
    assert [(p.row, p.field) for p in result.problems] == [(2, "es_biased_sentences")]


def test_multi_line_cell_is_one_record_and_later_rows_keep_editor_line_numbers(tmp_path):
    first = released_row("1.0", sentences={**SENTENCES, "en": "Women\ntalk a lot."})
    path = write_csv(tmp_path / "shades.csv", released_header(), [first, released_row("y")])
    result = read_shades(path)
    # RFC 4180: the quoted cell spans lines 2-3; the next row starts on line 4.
    assert [item.text["en"] for item in result.records] == ["Women\ntalk a lot."]
    assert [(p.row, p.field) for p in result.problems] == [(4, "index")]
    assert (result.lines.lines, result.lines.records, result.lines.spanned) == (3, 2, 1)


def test_missing_file_is_fatal(tmp_path):
    result = read_shades(tmp_path / "nope.csv")
    assert result.fatal
    assert "not found" in str(result.problems[0]) and "nope.csv" in str(result.problems[0])


def variant_rows(scheme: str) -> list[list[str]]:
    """Stereotypes 1 and 2 with variants, in one numbering scheme: `lettered` repeats
    the original's index and letters the subset (1.0 _original, 1.0 a, 1.0 b);
    `numbered` gives a variant its own index, and that variant has a lettered rewrite
    of its own (1.0 _original, 1.1 _original, 1.1 a), as the released file does."""
    rows = []
    for number, entity in ((1, "women"), (2, "old people")):
        if scheme == "lettered":
            pairs = [(f"{number}.0", subset) for subset in ("_original", "a", "b")]
        else:
            pairs = [(f"{number}.0", "_original"), (f"{number}.1", "_original")]
            pairs.append((f"{number}.1", "a"))
        for index, subset in pairs:
            sentences = {lang: f"{entity} {index} {subset} {lang}" for lang in LANGS_RELEASED}
            row = released_row(index, sentences=sentences)
            row[1] = subset
            rows.append(row)
    return rows


def key_to_text(result) -> dict[str, dict[str, str]]:
    return {item.key: dict(item.text) for item in result.records}


@pytest.mark.parametrize("scheme", ["lettered", "numbered"])
def test_both_numbering_schemes_key_every_parallel_row_whatever_the_order(tmp_path, scheme):
    rows = variant_rows(scheme)
    forward = read_shades(write_csv(tmp_path / "a.csv", released_header(), rows))
    shuffled = list(rows)
    random.Random(7).shuffle(shuffled)
    backward = read_shades(write_csv(tmp_path / "b.csv", released_header(), shuffled[::-1]))
    assert forward.problems == [] and backward.problems == []
    assert len(forward.records) == 6  # no parallel row lost to a shared index
    assert key_to_text(forward) == key_to_text(backward)
    expected = (
        ["shades:1.0", "shades:1.0-a", "shades:1.0-b", "shades:2.0", "shades:2.0-a", "shades:2.0-b"]
        if scheme == "lettered"
        else [
            "shades:1.0",
            "shades:1.1",
            "shades:1.1-a",
            "shades:2.0",
            "shades:2.1",
            "shades:2.1-a",
        ]
    )
    assert sorted(key_to_text(forward)) == expected
    index, subset = ("1.0", "a") if scheme == "lettered" else ("1.1", "_original")
    assert key_to_text(forward)[expected[1]]["en"] == f"women {index} {subset} en"
    # parquet gives the same items as the CSV
    frame = pd.DataFrame(rows, columns=released_header())
    frame.to_parquet(tmp_path / "shades.parquet")
    assert key_to_text(read_shades(tmp_path / "shades.parquet")) == key_to_text(forward)


def test_one_key_with_two_different_sentences_is_refused_whatever_the_order(tmp_path):
    rows = variant_rows("lettered")
    rows[5][1] = "a"  # stereotype 2's rewrite b now claims subset a too
    for order in (rows, rows[::-1]):
        result = read_shades(write_csv(tmp_path / "s.csv", released_header(), order))
        keys = set(key_to_text(result))
        assert "shades:2.0-a" not in keys and "shades:2.0-b" not in keys
        assert len(keys) == 4
        assert sum("2.0-a is also used" in p.message for p in result.problems) == 2


@pytest.mark.parametrize(
    ("index", "subset", "key"),
    [
        ("7.1", "_original", "shades:7.1"),
        ("7.1", None, "shades:7.1"),
        ("7.1", "_ORIGINAL", "shades:7.1"),
        ("7.1", "a", "shades:7.1-a"),
        ("7.1", "B", "shades:7.1-b"),
        ("07.1", "a", "shades:7.1-a"),
        ("7", "a", "shades:7.0-a"),
        ("7.0", "c", "shades:7.0-c"),
        ("7.10", "a", "shades:7.10-a"),
        ("12.2", "_original", "shades:12.2"),
    ],
)
def test_the_key_is_the_pair_index_subset_whatever_the_index_or_the_other_rows(
    tmp_path, index, subset, key
):
    alone = released_row(index)
    alone[1] = subset or ""
    # The same row next to an original of the same index and a rewrite of another:
    # its key must not change with what else the file holds.
    other = released_row(index, sentences={lang: f"other {lang}" for lang in LANGS_RELEASED})
    unrelated = released_row("99.0", sentences={lang: f"far {lang}" for lang in LANGS_RELEASED})
    unrelated[1] = "a"
    rows = [[alone], [unrelated, alone]]
    if subset not in (None, "_original", "_ORIGINAL"):
        rows.append([other, alone, unrelated])
    for n, table in enumerate(rows):
        result = read_shades(write_csv(tmp_path / f"s{n}.csv", released_header(), table))
        assert result.problems == []
        assert key_to_text(result)[key] == dict(SENTENCES)


@pytest.mark.parametrize("export", ["parquet", "csv", "csv-crlf"])
def test_the_released_layout_yields_every_parallel_row(tmp_path, export):
    frame, expected = release_frame()
    if export == "parquet":
        path = tmp_path / "shades.parquet"
        frame.to_parquet(path)
    else:
        path = tmp_path / "shades.csv"
        frame.to_csv(path, index=False, lineterminator="\r\n" if export == "csv-crlf" else "\n")
    result = read_shades(path)
    assert len(expected) == 719
    assert key_to_text(result) == expected  # every parallel row, keyed by its pair
    assert len(result.records) == len(expected)
    # Only the 9 rows lacking one of the five sentences are reported, each on the line
    # where its record starts (an editor's line, multi-line cells counted).
    missing = [p for p in result.problems if p.field and p.field.endswith("_biased_sentences")]
    assert len(missing) == len(result.problems) == 728 - 719
    assert result.lines.records == 728
    if export != "parquet":
        lines = path.read_text(encoding="utf-8").splitlines()
        assert result.lines.lines == len(lines) - 1 > 728
        assert result.lines.not_read == 0
        sentences = frame[[f"{lang}_biased_sentences" for lang in LANGS_RELEASED]]
        gaps = frame[sentences.isna().any(axis=1)]
        not_parallel = set(zip(gaps["index"], gaps["subset"], strict=True))
        assert {tuple(lines[p.row - 1].split(",")[:2]) for p in missing} == not_parallel


@pytest.fixture(scope="module")
def release_export() -> tuple[str, dict[str, dict[str, str]]]:
    """The generated release as pandas writes it to CSV, and its parallel rows."""
    frame, expected = release_frame()
    return frame.to_csv(index=False), expected


@pytest.mark.parametrize("seed", range(10))
def test_a_quote_added_or_lost_anywhere_in_the_export_never_changes_an_item(
    tmp_path, release_export, seed
):
    """Whatever one stray or missing `"` does to the RFC 4180 reading, every item read
    has its own five sentences: what is damaged is reported, never silently merged."""
    text, expected = release_export
    path = tmp_path / "shades.csv"
    rng = random.Random(seed)
    if seed % 2:
        at = rng.randrange(text.index("\n"), len(text))
        damaged = text[:at] + '"' + text[at:]
    else:
        at = rng.choice([i for i, c in enumerate(text) if c == '"'])
        damaged = text[:at] + text[at + 1 :]
    path.write_text(damaged, encoding="utf-8")
    result = read_shades(path)
    read = key_to_text(result)
    assert all(expected.get(key) == text for key, text in read.items())
    assert not result.fatal  # every line is a row or named by a problem
    lost = len(expected) - len(read)
    assert lost <= sum("row skipped" in p.message.lower() for p in result.problems)

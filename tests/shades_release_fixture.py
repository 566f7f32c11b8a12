"""A synthetic SHADES file with the features of the released one (`LanguageShades/BiasShades`).

What the released file has, and this one copies (with made-up, mild sentences):
- 728 rows in 16 languages, 719 of them parallel in en, fr, de, it, es;
- 285 distinct indices: contrastive rewrites repeat their original's `index` and
  are told apart by `subset` (`_original`, then `a`, `b`); numbered variants
  (`7.1`, `7.2`) have lettered rewrites too, so (`index`, `subset`) is what is unique;
- `bias_type` a list literal (`['gender']`); the list columns `[]` on contrastive rows;
- `{lang}_expression` boolean; some `{lang}_comments` columns entirely null;
- comment cells holding line breaks (LF and CRLF), commas and quotes.

`release_frame()` gives the table and, for every parallel row, the key RedVox must
give it and its five sentences, so a test compares what was read by content.
"""

from __future__ import annotations

import pandas as pd

LANGS = ("en", "fr", "de", "it", "es")
OTHER_LANGS = ("ar", "bn", "hi", "mr", "nl", "pl", "pt_br", "ro", "ru", "zh", "uz")
ROWS, PARALLEL, INDICES = 728, 719, 285
# (stereotype count with `N.0`, with `N.1`, with `N.2`): 200 + 65 + 20 = 285 indices
NUMBERED = (200, 65, 20)
NULL_COMMENTS = ("it_comments", "zh_comments", "uz_comments")
BIAS_TYPES = ("gender", "age", "nationality", "regional-person", "physical-appearance")
LIST_COLUMNS = ("stereotype_origin_langs", "stereotype_valid_langs", "stereotype_valid_regions")
WORDS = {"en": "likes", "fr": "aime", "de": "mag", "it": "ama", "es": "quiere"}


def indices() -> list[str]:
    out = []
    for fraction, count in enumerate(NUMBERED):
        out += [f"{n}.{fraction}" for n in range(1, count + 1)]
    return out


def rewrites_per_index() -> list[int]:
    """How many lettered rewrites each index has: 1 or 2 (3 for a few), 443 in all."""
    counts = [1] * INDICES
    for j in range(ROWS - INDICES - sum(counts)):
        counts[(j * 7) % INDICES] += 1
    counts[0] += 1  # one original with three rewrites ...
    counts[1] -= 1  # ... and one with a single one
    return counts


def sentence(lang: str, index: str, subset: str) -> str:
    # Commas and quotes inside a few sentences, so the CSV export has to quote them.
    name = f"Group {index}{'' if subset == '_original' else subset}"
    if index.endswith(".2"):
        return f'{name} {WORDS[lang]} "quiet" tea, they say ({lang}).'
    return f"{name} {WORDS[lang]} tea ({lang})."


def comment(lang: str, row: int) -> str | None:
    if f"{lang}_comments" in NULL_COMMENTS or row % 5:
        return None
    if row % 3 == 0:
        return f"Checked by annotator {row}.\nSecond line, with a comma."
    if row % 3 == 1:
        return f'Note {row}: "literal" wording.\r\nKept as is.\n\nThird paragraph.'
    return f"Single-line note {row}."


def release_frame() -> tuple[pd.DataFrame, dict[str, dict[str, str]]]:
    """The table, and key -> {lang: sentence} of its parallel rows."""
    rows: list[dict] = []
    for index, rewrites in zip(indices(), rewrites_per_index(), strict=True):
        for subset in ("_original", *"abcd"[:rewrites]):
            rows.append(_row(len(rows), index, subset))
    # 9 rows lose one of the five sentences (null in parquet, empty in CSV), both
    # originals and rewrites: only parallel rows are items.
    for k, position in enumerate(range(13, ROWS, ROWS // (ROWS - PARALLEL))):
        if k < ROWS - PARALLEL:
            rows[position][f"{LANGS[k % len(LANGS)]}_biased_sentences"] = None
    expected = {
        _key(row["index"], row["subset"]): {lang: row[f"{lang}_biased_sentences"] for lang in LANGS}
        for row in rows
        if all(row[f"{lang}_biased_sentences"] for lang in LANGS)
    }
    frame = pd.DataFrame(rows)
    assert len(frame) == ROWS and frame["index"].nunique() == INDICES
    assert not frame.duplicated(["index", "subset"]).any() and len(expected) == PARALLEL
    return frame, expected


def _key(index: str, subset: str) -> str:
    return f"shades:{index}" if subset == "_original" else f"shades:{index}-{subset}"


def _row(number: int, index: str, subset: str) -> dict:
    original = subset == "_original"
    row = {
        "index": index,
        "subset": subset,
        "bias_type": f"['{BIAS_TYPES[number % len(BIAS_TYPES)]}']",
        "stereotype_origin_langs": "['en', 'fr']" if original else "[]",
        "stereotype_valid_langs": "['en', 'fr', 'de', 'it', 'es']" if original else "[]",
        "stereotype_valid_regions": "['USA', 'FRA']" if original else "[]",
        "stereotyped_entity": f"group {index}",
        "type": "declaration",
    }
    for lang in (*LANGS, *OTHER_LANGS):
        known = lang in LANGS
        row[f"{lang}_templates"] = f"[GROUP_PL] {WORDS['en']} tea." if lang == "en" else None
        row[f"{lang}_biased_sentences"] = (
            sentence(lang, index, subset) if known else (None if number % 4 else f"{lang} text")
        )
        row[f"{lang}_expression"] = number % 11 == 0
        row[f"{lang}_comments"] = comment(lang, number)
    return row

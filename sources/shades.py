"""SHADES stereotypes (`LanguageShades/BiasShades`) into SourceItems.

Two layouts are read: the released CSV (`index, subset, bias_type, ...,
{lang}_biased_sentences, ...`) and the raw spreadsheet export (`Index, Bias
Type, ..., English: Biased Sentences, ...`, often with stray spaces). Both are
mapped onto the released column names, so the rest of the reader sees one
layout.

Item ids: the released layout writes `1.0` for an original stereotype and
`7.1` for a variant of item 7; the raw sheet may write the original as a bare
`7`. A bare integer is therefore read as `<n>.0` and a leading zero dropped,
so both layouts give the same `shades:7.0` key; the fraction is kept as
written (`7.10` and `7.1` are different variants).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from redvox.schemas import LANGUAGES, SourceItem

from .problems import Problem, ReadResult, validate_row
from .tables import TableRow, collapse_whitespace, read_table, unique_items

_LANGUAGE_NAMES = {
    "english": "en",
    "german": "de",
    "spanish": "es",
    "french": "fr",
    "italian": "it",
}
SENTENCE_COLUMNS = {lang: f"{lang}_biased_sentences" for lang in LANGUAGES}
REQUIRED_COLUMNS = ("index", "bias_type", *SENTENCE_COLUMNS.values())
# Python-literal list columns: RedVox does not use them, but a broken one
# usually means the row was damaged by an export, so it is reported.
LIST_COLUMNS = ("stereotype_origin_langs", "stereotype_valid_langs", "stereotype_valid_regions")
_INDEX = re.compile(r"^(\d+)(?:\.(\d+))?$")


def shades_column(raw: str) -> str:
    """Released column name of a header of either layout: 'English: Biased Sentences' ->
    'en_biased_sentences', ' Bias Type ' -> 'bias_type'."""
    text = collapse_whitespace(raw).casefold()
    language, colon, rest = text.partition(":")
    if colon and language.strip() in _LANGUAGE_NAMES:
        return f"{_LANGUAGE_NAMES[language.strip()]}_{_snake(rest)}"
    return _snake(text)


def _snake(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def normalize_shades_index(raw: str | None) -> str | None:
    """'7' -> '7.0', '07.1' -> '7.1'; None for anything that is not an index."""
    match = _INDEX.match(raw.strip()) if raw else None
    if not match:
        return None
    return f"{int(match[1])}.{match[2] or '0'}"


def read_shades(path: str | Path) -> ReadResult[SourceItem]:
    file = str(path)
    table = read_table(path, REQUIRED_COLUMNS, what="SHADES file", header=shades_column)
    return unique_items(
        table, file, _item, field="index", advice="give each stereotype its own index"
    )


def _item(row: TableRow, file: str) -> tuple[SourceItem | None, list[Problem]]:
    cells = row.cells
    item_id = normalize_shades_index(cells["index"])
    if item_id is None:
        message = f"{cells['index']!r} is not a SHADES index like 7.1; row skipped, fix the index"
        return None, [Problem(file, row.line, "index", message)]
    problems = _list_problems(row, file)
    missing = [lang for lang, column in SENTENCE_COLUMNS.items() if not cells[column]]
    if missing:
        message = (
            f"no biased sentence in {', '.join(missing)}: only stereotypes parallel across "
            f"{', '.join(LANGUAGES)} are used; row skipped"
        )
        field = ", ".join(SENTENCE_COLUMNS[lang] for lang in missing)
        return None, [*problems, Problem(file, row.line, field, message)]
    if not cells["bias_type"]:
        message = "empty; the stereotype is kept without a category, fill it in"
        problems.append(Problem(file, row.line, "bias_type", message))
    data = {
        "source": "shades",
        "item_id": item_id,
        "vulnerability_type": "stereotype",
        "text": {lang: cells[column] for lang, column in SENTENCE_COLUMNS.items()},
        "source_category": cells["bias_type"] or "",
    }
    item, errors = validate_row(SourceItem, data, file, row.line)
    return item, problems + errors


def _list_problems(row: TableRow, file: str) -> list[Problem]:
    problems = []
    for column in LIST_COLUMNS:
        value = row.cells.get(column)
        # The raw sheet writes plain text ("en, fr"); only bracketed cells are literals.
        if not value or not value.startswith("["):
            continue
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = None
        if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
            message = (
                f"{value[:60]!r} is not a Python list of strings like ['en', 'fr']; "
                "the row is still used (RedVox does not read this column), fix it at the source"
            )
            problems.append(Problem(file, row.line, column, message))
    return problems

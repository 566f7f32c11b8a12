"""SHADES stereotypes (`LanguageShades/BiasShades`) into SourceItems: a text source
(sources/texts/source.py).

Two layouts are read: the released CSV (`index, subset, bias_type, ...,
{lang}_biased_sentences, ...`) and the raw spreadsheet export (`Index, Bias
Type, ..., English: Biased Sentences, ...`, often with stray spaces). Both are
mapped onto the released column names, so the rest of the reader sees one
layout. Parquet and JSONL are read too; a CSV is read as RFC 4180, so the comment
cells that hold line breaks (written by pandas, spreadsheets and the Hub viewer
as quoted multi-line cells) do not cost their rows.

Item ids. The pair (`index`, `subset`) is what is unique in the released file, so
it is the id, whatever the index looks like: `shades:<index>` for the row whose
subset is `_original` (or blank), `shades:<index>-<subset>` for any other subset.
Both numbering styles occur and need nothing else:
- lettered: the contrastive rewrites of a stereotype repeat its index and are
  told apart by `subset` (`1.0` `_original`, `1.0` `a`, ...): `1.0`, `1.0-a`;
- numbered: `7.1`, `7.2` are variants of stereotype 7 with indices of their own,
  and they have lettered rewrites too (`7.1` `_original`, `7.1` `a`): `7.1`, `7.1-a`.
The id depends only on the row's own cells, never on row order or on the other
rows. The raw sheet may write the original as a bare `7`: a bare integer is read as
`<n>.0` and a leading zero dropped, so both layouts give the same `shades:7.0` key;
the fraction is kept as written (`7.10` and `7.1` are different variants). Two rows
with the same id and different sentences are both refused: which one a key
means must not depend on which comes first.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

from redvox.schemas import ItemSelection, SourceItem
from redvox.schemas.vocab import language_named

from ..problems import Problem, ReadResult, validate_row
from ..tables import TableRow, collapse_whitespace, read_table, unique_items
from .source import Stratum, language_columns

NAME = "shades"
INPUT = "shades"
TITLE = "SHADES"
CONTENT = "stereotypes"
HUB_ID = "LanguageShades/BiasShades"
LICENSE = "CC BY 4.0"
TERMS = (
    "CC BY 4.0, with one condition its authors add: the texts are not to be used to train "
    "models. Credit SHADES, and do not train on its texts."
)
MET_BY = "its no-training term covers SHADES' condition"
GATE_TERMS = "SHADES (CC BY 4.0, with its authors' condition that it not be used to train models)"
AGREEMENT_TERMS = "SHADES (CC BY 4.0, no training use)"
REQUIRED = True
POSITION = 0
STEREOTYPE = "stereotype"
# Python-literal list columns: RedVox does not use them, but a broken one
# usually means the row was damaged by an export, so it is reported.
LIST_COLUMNS = ("stereotype_origin_langs", "stereotype_valid_langs", "stereotype_valid_regions")
_INDEX = re.compile(r"^(\d+)(?:\.(\d+))?(?:-([a-z]+))?$", re.IGNORECASE)
# `subset` of the row a variant rewrites; a blank subset means the same.
ORIGINAL_SUBSET = "_original"
_SUBSET = re.compile(r"^[a-z]+$", re.IGNORECASE)


def shades_column(raw: str) -> str:
    """Released column name of a header of either layout: 'English: Biased Sentences' ->
    'en_biased_sentences', ' Bias Type ' -> 'bias_type'."""
    text = collapse_whitespace(raw).casefold()
    language, colon, rest = text.partition(":")
    code = language_named(language.strip()) if colon else None
    if code is not None:
        return f"{code}_{_snake(rest)}"
    return _snake(text)


def _snake(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def normalize_shades_index(raw: str | None) -> str | None:
    """'7' -> '7.0', '07.1' -> '7.1', '1.0-A' -> '1.0-a'; None for anything else."""
    match = _INDEX.match(raw.strip()) if raw else None
    if not match:
        return None
    subset = f"-{match[3].lower()}" if match[3] else ""
    return f"{int(match[1])}.{match[2] or '0'}{subset}"


def sentence_columns(languages: Sequence[str]) -> dict[str, str]:
    return {lang: f"{lang}_biased_sentences" for lang in languages}


def normalize_id(raw: str | None) -> str | None:
    """A contribution's `item_id` as this reader writes it (`7` -> `7.0`)."""
    return normalize_shades_index(raw)


def read(path: str | Path, languages: Sequence[str]) -> ReadResult[SourceItem]:
    """The stereotypes of the file parallel across `languages`."""
    file = str(path)
    columns = sentence_columns(languages)
    required = ("index", "bias_type", *columns.values())
    table = read_table(path, required, what="SHADES file", header=shades_column, multiline=True)
    return unique_items(
        language_columns(table, columns, "SHADES file", file),
        file,
        lambda row, file: _item(row, file, columns),
        field="index",
        advice="give each row its own (index, subset) pair",
    )


def strata(selection: ItemSelection) -> list[Stratum]:
    """`selection.shades` stereotypes, drawn from the SHADES items alone."""
    return [Stratum(STEREOTYPE, STEREOTYPE, selection.shades, "shades")]


def shades_item_id(index: str | None, subset: str | None) -> str | None:
    """The item id of a row: its index for the `_original` (or a blank) subset, else
    `<index>-<subset>`; None when the index or the subset is not one SHADES writes."""
    number = normalize_shades_index(index)
    if number is None or "-" in number:
        return None
    if subset is None or subset.casefold() == ORIGINAL_SUBSET:
        return number
    if not _SUBSET.match(subset):
        return None
    return f"{number}-{subset.lower()}"


def _item(
    row: TableRow, file: str, columns: dict[str, str]
) -> tuple[SourceItem | None, list[Problem]]:
    cells = row.cells
    item_id = shades_item_id(cells["index"], cells.get("subset"))
    if item_id is None:
        if normalize_shades_index(cells["index"]) is None or "-" in (cells["index"] or ""):
            message = (
                f"{cells['index']!r} is not a SHADES index like 7.1; row skipped, fix the index"
            )
            return None, [Problem(file, row.line, "index", message)]
        message = (
            f"{cells['subset']!r} is not a subset SHADES writes ({ORIGINAL_SUBSET} or a letter "
            "such as a); row skipped, fix the subset"
        )
        return None, [Problem(file, row.line, "subset", message)]
    problems = _list_problems(row, file)
    missing = [lang for lang, column in columns.items() if not cells[column]]
    if missing:
        message = (
            f"no biased sentence in {', '.join(missing)}: only stereotypes parallel across "
            f"{', '.join(columns)} are used; row skipped"
        )
        field = ", ".join(columns[lang] for lang in missing)
        return None, [*problems, Problem(file, row.line, field, message)]
    if not cells["bias_type"]:
        message = "empty; the stereotype is kept without a category, fill it in"
        problems.append(Problem(file, row.line, "bias_type", message))
    data = {
        "source": NAME,
        "item_id": item_id,
        "vulnerability_type": STEREOTYPE,
        "text": {lang: cells[column] for lang, column in columns.items()},
        "source_category": _category(cells["bias_type"]),
    }
    item, errors = validate_row(SourceItem, data, file, row.line)
    return item, problems + errors


def _category(raw: str | None) -> str:
    """`bias_type` as text: the released file writes a list literal (`['gender']`)."""
    if raw and raw.startswith("["):
        try:
            parsed = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return raw
        if isinstance(parsed, list) and all(isinstance(v, str) for v in parsed):
            return ", ".join(parsed)
    return raw or ""


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

"""A toy text source for tests: riddle-like requests in a CSV of `id` and one column
per language, all of them `unsafe_request_crime`.

It implements sources/texts/source.py TextSourceModule and nothing else: registering
it (`redvox.sources.texts.register_text_source`) and naming its file in an input config
(`texts: {toy: toy.csv}`) is all a build needs to read, select, join and release its
items, and all the card needs to credit it.
"""

from __future__ import annotations

import re

from redvox.schemas import SourceItem
from redvox.sources.problems import Problem, validate_row
from redvox.sources.tables import read_table, unique_items
from redvox.sources.texts.source import Stratum, language_columns

NAME = "toy"
INPUT = "toy"
TITLE = "Toy Texts"
CONTENT = "toy sentences"
HUB_ID = "redvox-tests/toy-texts"
LICENSE = "CC0 1.0"
TERMS = "CC0 1.0, no conditions. Nothing to credit."
MET_BY = None
GATE_TERMS = "Toy Texts (CC0 1.0)"
AGREEMENT_TERMS = "Toy Texts (CC0 1.0)"
REQUIRED = False
POSITION = 9
GROUP = "unsafe_request_crime"
_ID = re.compile(r"^t(\d+)$", re.IGNORECASE)


def normalize_id(raw):
    """'T07' -> 't7'."""
    match = _ID.match(raw.strip()) if raw else None
    return f"t{int(match[1])}" if match else None


def read(path, languages):
    file = str(path)
    table = read_table(path, ("id", *languages), what="toy file")
    columns = {lang: lang for lang in languages}

    def item(row, file):
        item_id = normalize_id(row.cells["id"])
        if item_id is None:
            return None, [Problem(file, row.line, "id", "not a toy id like t1; row skipped")]
        data = {
            "source": NAME,
            "item_id": item_id,
            "vulnerability_type": GROUP,
            "text": {lang: row.cells[lang] for lang in languages},
            "source_category": "toy",
        }
        return validate_row(SourceItem, data, file, row.line)

    return unique_items(
        language_columns(table, columns, "toy file", file), file, item, field="id", advice="one id"
    )


def strata(selection):
    """Every toy item, in a stratum of its own (never pooled with M-ALERT's crime group)."""
    return [Stratum(f"{NAME}:{GROUP}", GROUP, None)]

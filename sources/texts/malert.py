"""M-ALERT safety prompts (`felfri/M-ALERT`) into SourceItems: a text source
(sources/texts/source.py).

Parquet, CSV (RFC 4180: a quoted cell may span lines) or JSONL, chosen by
extension, with columns `id, category` and one per language the build declares
(`en, de, es, fr, it` for 1.0.0). The ALERT micro category decides the RedVox group
(`redvox.schemas.malert_group`); `hate_*` prompts are not used by RedVox and are
left out without a report, since the released file holds thousands of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from redvox.schemas import ItemSelection, SourceItem, VocabularyError, malert_group
from redvox.schemas.vocab import MALERT_PREFIXES

from ..problems import Problem, ReadResult, validate_row
from ..tables import TableRow, read_table, unique_items
from .source import Stratum, language_columns

NAME = "m-alert"
INPUT = "malert"
TITLE = "M-ALERT"
CONTENT = "harmful requests"
HUB_ID = "felfri/M-ALERT"
LICENSE = "CC BY-NC-SA 4.0"
TERMS = (
    "CC BY-NC-SA 4.0. Credit M-ALERT, make no commercial use of its texts, and share "
    "adaptations of them under the same licence."
)
MET_BY = "its research-only term keeps M-ALERT's texts non-commercial"
GATE_TERMS = "M-ALERT (CC BY-NC-SA 4.0)"
AGREEMENT_TERMS = "M-ALERT (CC BY-NC-SA 4.0)"
REQUIRED = True
POSITION = 1
# `10330.0` is how an integer column with a gap comes out of a spreadsheet or pandas.
_INTEGER = re.compile(r"^(\d+)(?:\.0+)?$")


def normalize_malert_id(raw: str | None) -> str | None:
    """'10330', '010330', '10330.0' -> '10330'; None for anything that is not a whole number."""
    match = _INTEGER.match(raw) if raw else None
    return str(int(match[1])) if match else None


def normalize_id(raw: str | None) -> str | None:
    """A contribution's `item_id` as this reader writes it (`10330.0` -> `10330`)."""
    return normalize_malert_id(raw)


def read(path: str | Path, languages: Sequence[str]) -> ReadResult[SourceItem]:
    """The prompts of the file parallel across `languages` (a column each)."""
    file = str(path)
    table = read_table(path, (*languages, "id", "category"), what="M-ALERT file", multiline=True)
    columns = {lang: lang for lang in languages}
    return unique_items(
        language_columns(table, columns, "M-ALERT file", file),
        file,
        lambda row, file: _item(row, file, tuple(languages)),
        field="id",
        advice="give each prompt its own id",
    )


def strata(selection: ItemSelection) -> list[Stratum]:
    """`selection.per_group` prompts from each RedVox group, drawn per group."""
    return [
        Stratum(group, group, selection.per_group, "per_group")
        for group in MALERT_PREFIXES.values()
    ]


def _item(
    row: TableRow, file: str, languages: tuple[str, ...]
) -> tuple[SourceItem | None, list[Problem]]:
    cells = row.cells
    item_id = normalize_malert_id(cells["id"])
    if item_id is None:
        what = "empty" if cells["id"] is None else f"{cells['id']!r} is not a whole number"
        return None, [Problem(file, row.line, "id", f"{what}; row skipped, fix the id")]
    if cells["category"] is None:
        return None, [Problem(file, row.line, "category", "empty; row skipped, fill it in")]
    try:
        group = malert_group(cells["category"])
    except VocabularyError as exc:
        return None, [Problem(file, row.line, "category", f"{exc}; row skipped")]
    if group is None:
        return None, []
    missing = [lang for lang in languages if not cells[lang]]
    if missing:
        message = (
            "empty: only prompts parallel across "
            f"{', '.join(languages)} are used; row skipped, fill it in"
        )
        return None, [Problem(file, row.line, ", ".join(missing), message)]
    data = {
        "source": NAME,
        "item_id": item_id,
        "vulnerability_type": group,
        "text": {lang: cells[lang] for lang in languages},
        "source_category": cells["category"],
    }
    return validate_row(SourceItem, data, file, row.line)

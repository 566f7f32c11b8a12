"""M-ALERT safety prompts (`felfri/M-ALERT`) into SourceItems.

Parquet, CSV (RFC 4180: a quoted cell may span lines) or JSONL, chosen by
extension, with columns `en, de, es, fr, it, id, category`. The ALERT micro category decides the RedVox group
(`redvox.schemas.malert_group`); `hate_*` prompts are not used by RedVox and are
left out without a report, since the released file holds thousands of them.
"""

from __future__ import annotations

import re
from pathlib import Path

from redvox.schemas import LANGUAGES, SourceItem, VocabularyError, malert_group

from .problems import Problem, ReadResult, validate_row
from .tables import TableRow, read_table, unique_items

REQUIRED_COLUMNS = (*LANGUAGES, "id", "category")
# `10330.0` is how an integer column with a gap comes out of a spreadsheet or pandas.
_INTEGER = re.compile(r"^(\d+)(?:\.0+)?$")


def normalize_malert_id(raw: str | None) -> str | None:
    """'10330', '010330', '10330.0' -> '10330'; None for anything that is not a whole number."""
    match = _INTEGER.match(raw) if raw else None
    return str(int(match[1])) if match else None


def read_malert(path: str | Path) -> ReadResult[SourceItem]:
    file = str(path)
    table = read_table(path, REQUIRED_COLUMNS, what="M-ALERT file", multiline=True)
    return unique_items(table, file, _item, field="id", advice="give each prompt its own id")


def _item(row: TableRow, file: str) -> tuple[SourceItem | None, list[Problem]]:
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
    missing = [lang for lang in LANGUAGES if not cells[lang]]
    if missing:
        message = (
            "empty: only prompts parallel across "
            f"{', '.join(LANGUAGES)} are used; row skipped, fill it in"
        )
        return None, [Problem(file, row.line, ", ".join(missing), message)]
    data = {
        "source": "m-alert",
        "item_id": item_id,
        "vulnerability_type": group,
        "text": {lang: cells[lang] for lang in LANGUAGES},
        "source_category": cells["category"],
    }
    return validate_row(SourceItem, data, file, row.line)

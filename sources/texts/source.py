"""The contract every text-source module (shades.py, malert.py, ...) implements.

A text source is a module, registered in `redvox.sources.texts.TEXTS` by its `NAME`:
every module of this package that declares `NAME` is registered when
`redvox.sources.texts` is imported, so adding a source is adding its file (a source
defined elsewhere, e.g. a test's, is added with `register_text_source`). Nothing else
lists the sources: the input config's keys, the inputs a build hashes, the item-id
maps of the contributions reader, the selection's strata, the card's source datasets
and licences all come from the registry.

A reader reads the languages of the build it serves (`read(path, languages)`): a file
without a column for a language no version being built declares is no problem, and a
missing column for a declared one is one fatal problem naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from redvox.schemas import ItemSelection, SourceItem

from ..problems import Problem, ReadResult


@dataclass(frozen=True)
class Stratum:
    """One part of a source's seeded draw (`sources/selection.py`): its items of
    `vulnerability_type`, ranked by a keyed hash of (seed, `name`, key), the first
    `wanted` taken (None: all of them). `field` names the config's `items` field a
    shortfall is reported on."""

    name: str
    vulnerability_type: str
    wanted: int | None
    field: str | None = None


@runtime_checkable
class TextSourceModule(Protocol):
    # The source's name: SourceItem.source and Contribution.source, the prefix of its
    # item keys (`shades:7.1`) and the rows' `source` column. Part of the release.
    NAME: str
    # Its key in the input config (`texts: {INPUT: path}`), the manifest's input name.
    INPUT: str
    # How the card and messages name it ("SHADES").
    TITLE: str
    # What its texts are, as the card's summary says it ("stereotypes").
    CONTENT: str
    # The Hub dataset the texts come from, for the card's `source_datasets`.
    HUB_ID: str
    # Its licence (an SPDX-style name) and what the card says about it: the conditions
    # (`TERMS`, completing "<TITLE> (rows with `source` NAME): "), how RedVox's own
    # terms meet them (`MET_BY`, None when nothing needs saying), and the short form the
    # access form's prompt (`GATE_TERMS`) and its agreement box (`AGREEMENT_TERMS`) use.
    LICENSE: str
    TERMS: str
    MET_BY: str | None
    GATE_TERMS: str
    AGREEMENT_TERMS: str
    # True: a build's input config must name this source (the benchmark is defined by it).
    REQUIRED: bool
    # Where the card, the tables and the input lists place it (then by NAME).
    POSITION: int

    def normalize_id(self, raw: str | None) -> str | None:
        """An item id as the reader writes it (`7` -> `7.0`), None when it is not one;
        the contributions reader maps its `item_id` cells through it, so keys match."""

    def read(self, path: str | Path, languages: Sequence[str]) -> ReadResult[SourceItem]:
        """The items of the file with their text in each of `languages` (only rows
        parallel across all of them), and one Problem per thing to fix."""

    def strata(self, selection: ItemSelection) -> Sequence[Stratum]:
        """The selection rule: how the seeded draw takes this source's items."""


def language_columns(
    table: ReadResult, columns: dict[str, str], what: str, file: str
) -> ReadResult:
    """`table` with a missing column of a language the build declares explained: which
    language, and what to do (the table reader only says the column is missing)."""
    by_column = {column: lang for lang, column in columns.items()}
    explained = []
    for problem in table.problems:
        lang = by_column.get(problem.field or "") if problem.fatal else None
        if lang is None:
            explained.append(problem)
            continue
        message = (
            f"required column is missing: the version being built declares language {lang} "
            f"({', '.join(columns)}); add the {lang} texts to the {what}, or build a "
            "version without it"
        )
        explained.append(Problem(file, problem.row, problem.field, message, fatal=True))
    table.problems[:] = explained
    return table

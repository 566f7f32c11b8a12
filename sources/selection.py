"""Which items a build uses: an explicit list of keys, or a seeded stratified draw.

The draw follows each text source's selection rule (its `strata`,
sources/texts/source.py): SHADES takes `selection.shades` stereotypes and M-ALERT
`selection.per_group` prompts from each of its groups. A stratum pools only its own
source's items; within it, each item is ranked by a hash of (seed, stratum, item
key) alone and the first ones are taken. An item's
rank therefore never depends on which other items are in the pool, so the
sources can change under a draw without reshuffling it: fixing an unusable
SHADES row, or losing one, changes at most one drawn key (one in, one out),
where a generator drawing positions over the sorted pool changed a fifth of
them. The order of the input files does not matter either, and a change in one
stratum leaves the others as they were. `redvox sources select` writes a draw
out so that a version can pin it (`item_keys_file`) once it is published.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from redvox.schemas import ItemSelection, SourceItem
from redvox.schemas.layout import keyed_hash

from .problems import Problem, ReadResult
from .tables import decode_utf8, read_bytes
from .texts import Stratum, text_sources

# (source name, stratum) pairs: the selection rules of the sources a build reads.
Strata = Sequence[tuple[str, Stratum]]

SELECTION_LABEL = "items"  # where a problem of the selection itself points: the config's items


def all_strata(selection: ItemSelection) -> list[tuple[str, Stratum]]:
    """The strata of every registered source (a config names its own: texts.strata)."""
    return [(m.NAME, stratum) for m in text_sources() for stratum in m.strata(selection)]


def select_items(
    items: Sequence[SourceItem], selection: ItemSelection, strata: Strata | None = None
) -> ReadResult[SourceItem]:
    """The selected items sorted by key, and what could not be honoured. `strata`: the
    rules of the sources read (default: every registered source's)."""
    if selection.item_keys is not None:
        keys = [
            (f"{SELECTION_LABEL}.item_keys", n, key) for n, key in enumerate(selection.item_keys, 1)
        ]
        return pinned_items(items, keys)
    if selection.item_keys_file is not None:
        listed = read_item_keys(selection.item_keys_file)
        if listed.fatal:
            return ReadResult([], listed.problems)
        pinned = pinned_items(items, listed.records)
        return ReadResult(pinned.records, listed.problems + pinned.problems)
    return drawn_items(items, selection, strata)


def read_item_keys(path: str | Path) -> ReadResult[tuple[str, int, str]]:
    """(file, line, key) for each key of a key file: one per line, '#' starts a comment."""
    file = str(path)
    data, problem = read_bytes(Path(path), "item key file")
    text, problem = (None, problem) if problem else decode_utf8(data, file)
    if problem:
        return ReadResult([], [problem])
    keys = []
    for line, raw in enumerate(text.splitlines(), 1):
        key = raw.split("#", 1)[0].strip()
        if key:
            keys.append((file, line, key))
    if not keys:
        message = "lists no item keys; write one key per line, e.g. shades:7.1"
        return ReadResult([], [Problem(file, None, None, message, fatal=True)])
    return ReadResult(keys, [])


def pinned_items(
    items: Sequence[SourceItem], keys: Sequence[tuple[str, int, str]]
) -> ReadResult[SourceItem]:
    by_key = {item.key: item for item in items}
    result = ReadResult[SourceItem]([], [])
    seen: dict[str, int] = {}
    for file, line, key in keys:
        if key in seen:
            message = f"{key} already listed on line {seen[key]}; it is used once"
            result.problems.append(Problem(file, line, None, message))
        elif key not in by_key:
            message = (
                f"no usable item {key} in the SHADES/M-ALERT files (see their problems), "
                f"but {_pinned_by(file)} pins it; fix its source row or remove the key"
            )
            result.problems.append(Problem(file, line, None, message))
        else:
            result.records.append(by_key[key])
        seen.setdefault(key, line)
    result.records.sort(key=lambda item: item.key)
    return result


def draw_rank(seed: int, stratum: str, key: str) -> tuple[bytes, str]:
    """An item's place in its stratum's draw: a function of its own key only (the key
    breaks the, in practice impossible, tie of two equal hashes)."""
    return keyed_hash(seed, stratum, key), key


def _pinned_by(file: str) -> str:
    if file == f"{SELECTION_LABEL}.item_keys":
        # A build uses the version's own item_keys when it has some, else the config's.
        return "items.item_keys (of the version built, else of the input config)"
    return f"the item key file {file} (items.item_keys_file)"


def drawn_items(
    items: Sequence[SourceItem], selection: ItemSelection, strata: Strata | None = None
) -> ReadResult[SourceItem]:
    result = ReadResult[SourceItem]([], [])
    for source, stratum in all_strata(selection) if strata is None else strata:
        pool = sorted(
            (
                item
                for item in items
                if item.source == source and item.vulnerability_type == stratum.vulnerability_type
            ),
            key=lambda i: i.key,
        )
        wanted = len(pool) if stratum.wanted is None else stratum.wanted
        if len(pool) < wanted:
            message = (
                f"only {len(pool)} {stratum.name} items are usable but {wanted} were asked; "
                f"all {len(pool)} are used"
            )
            result.problems.append(Problem(SELECTION_LABEL, None, stratum.field, message))
            result.records.extend(pool)
            continue
        ranked = sorted(pool, key=lambda item: draw_rank(selection.seed, stratum.name, item.key))
        result.records.extend(ranked[:wanted])
    result.records.sort(key=lambda item: item.key)
    return result

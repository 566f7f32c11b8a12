"""Which items a build uses: an explicit list of keys, or a seeded stratified draw.

The draw takes `selection.shades` SHADES stereotypes and `selection.per_group`
prompts from each M-ALERT group. Each stratum draws from its own generator,
seeded by (seed, stratum name), over its items sorted by key: the result does
not depend on the order of the input files, and a change in one stratum (a
SHADES row fixed) leaves the draw of the others as it was.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from redvox.schemas import VULNERABILITY_TYPES, ItemSelection, SourceItem

from .problems import Problem, ReadResult
from .tables import decode_utf8, read_bytes

SELECTION_LABEL = "items"  # where a problem of the selection itself points: the config's items


def select_items(items: Sequence[SourceItem], selection: ItemSelection) -> ReadResult[SourceItem]:
    """The selected items sorted by key, and what could not be honoured."""
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
    return drawn_items(items, selection)


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
                f"no usable item {key} in the SHADES/M-ALERT files (see their problems); "
                "fix or remove the key"
            )
            result.problems.append(Problem(file, line, None, message))
        else:
            result.records.append(by_key[key])
        seen.setdefault(key, line)
    result.records.sort(key=lambda item: item.key)
    return result


def drawn_items(items: Sequence[SourceItem], selection: ItemSelection) -> ReadResult[SourceItem]:
    result = ReadResult[SourceItem]([], [])
    for stratum in VULNERABILITY_TYPES:
        wanted = selection.shades if stratum == "stereotype" else selection.per_group
        pool = sorted(
            (item for item in items if item.vulnerability_type == stratum), key=lambda i: i.key
        )
        if len(pool) < wanted:
            message = (
                f"only {len(pool)} {stratum} items are usable but {wanted} were asked; "
                f"all {len(pool)} are used"
            )
            field = "shades" if stratum == "stereotype" else "per_group"
            result.problems.append(Problem(SELECTION_LABEL, None, field, message))
            result.records.extend(pool)
            continue
        rng = np.random.default_rng([selection.seed % 2**64, zlib.crc32(stratum.encode())])
        chosen = rng.choice(len(pool), size=wanted, replace=False)
        result.records.extend(pool[i] for i in chosen)
    result.records.sort(key=lambda item: item.key)
    return result

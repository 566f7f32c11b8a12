"""The only thing a job gives back: the report's taxonomy tables (overall, per language,
per audio type, per vulnerability type) on the full build beside the same tables on the
public build, with every cell of too few rows or speakers suppressed. Nothing per row:
no outputs, transcripts, speaker ids or audio."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from redvox.release.evaluation.redvox_eval.intervals import Bootstrap
from redvox.release.evaluation.redvox_eval.labels import CLASSES, UNLABELLED
from redvox.release.evaluation.redvox_eval.metrics import prepare_rows, share_cell
from redvox.release.evaluation.redvox_eval.outputs import find_output_files, load_outputs
from redvox.schemas.vocab import SETS

DIMENSIONS = ("lang", "audio_type", "vulnerability_type")
SIDES = SETS  # full beside public


def entry_keys(build_side: Path) -> set[str]:
    """The `entry_key` of every row of a built set (OUT/<version>/public)."""
    keys: set[str] = set()
    for shard in sorted((build_side / "data").rglob("*.parquet")):
        if not shard.name.startswith("."):
            keys.update(pq.read_table(shard, columns=["entry_key"])["entry_key"].to_pylist())
    return keys


def suppressed(reason: str) -> dict:
    return {"n": None, **dict.fromkeys(CLASSES), "refusal": None, "ci95": None,
            "suppressed": reason}  # fmt: skip


def cell(rows: pd.DataFrame, boot: Bootstrap, name: str, min_cell: int, min_speakers: int):
    """Shares of the taxonomy classes (percent) over the labelled rows of ROWS, with their
    95% intervals and the refusal rate; suppressed below MIN_CELL rows or MIN_SPEAKERS."""
    labelled = rows[rows["cls"] != UNLABELLED]
    if len(labelled) < min_cell:
        return suppressed(f"fewer than {min_cell} rows")
    if labelled["user_id"].nunique() < min_speakers:
        return suppressed(f"fewer than {min_speakers} speakers")
    counts = (
        labelled.groupby(["cluster", "cls"]).size().unstack("cls", fill_value=0)
        .reindex(columns=range(len(CLASSES)), fill_value=0).to_numpy()
    )  # fmt: skip
    entry = share_cell(counts, boot, name)
    answered = labelled[labelled["refusal"].notna()]
    entry["refusal"] = (
        100.0 * float((answered["refusal"] == "yes").sum()) / len(answered)
        if len(answered)
        else None
    )
    entry["suppressed"] = None
    return entry


def complementary(table: dict[str, dict], side: str) -> None:
    """A single suppressed cell in a breakdown could be recovered from the overall cell
    and the others; suppress the smallest other cell too."""
    cells = [(value, sides[side]) for value, sides in table.items()]
    hidden = [v for v, c in cells if c["suppressed"]]
    shown = sorted((c["n"], v) for v, c in cells if not c["suppressed"])
    if len(hidden) == 1 and shown:
        table[shown[0][1]][side] = suppressed("complementary suppression")


def tables(
    judged: Path,
    tag: str,
    public_keys: set[str],
    *,
    min_cell: int,
    min_speakers: int,
    boot: Bootstrap,
) -> tuple[dict, dict]:
    """(tables, counts) where tables = {"overall": {side: cell}, dimension: {value: {side:
    cell}}} for the one model judged under JUDGED, and counts the rows per side."""
    rows = prepare_rows(load_outputs(find_output_files([judged], tag)))
    rows = rows[~rows["text_only"].astype(bool)]
    if rows["model"].nunique() != 1:
        raise ValueError(f"expected one model's outputs, got {rows['model'].nunique()}")
    parts = {"full": rows, "public": rows[rows["entry_key"].isin(public_keys)]}
    result: dict = {
        "overall": {
            side: cell(part, boot, f"{side}/overall", min_cell, min_speakers)
            for side, part in parts.items()
        }
    }
    for dimension in DIMENSIONS:
        table: dict[str, dict] = {}
        for value in sorted(rows[dimension].astype(str).unique()):
            table[value] = {
                side: cell(
                    part[part[dimension].astype(str) == value],
                    boot,
                    f"{side}/{dimension}/{value}",
                    min_cell,
                    min_speakers,
                )
                for side, part in parts.items()
            }
        for side in SIDES:
            complementary(table, side)
        result[dimension] = table
    counts = {side: {"rows": len(part)} for side, part in parts.items()}
    return result, counts

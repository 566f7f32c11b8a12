"""The only thing a job gives back: the report's taxonomy tables (overall, per language,
per audio type, per vulnerability type) on the full build beside the same tables on the
public build. Nothing per row: no outputs, transcripts, speaker ids or audio.

The public rows are known to whoever submits (they can run their model on the public
release), so a full-build figure is as revealing as its withheld part (the full rows not
in the public build). A full cell whose withheld part is empty is the public cell; one
whose withheld part has fewer than MIN_SPEAKERS speakers or MIN_CELL rows is suppressed;
every other one is the exact public counts plus the withheld counts with discrete
Laplace noise at the speaker level (privacy.py), and carries no interval or refusal rate
(those would need the exact withheld rows). Which cells are shown is decided on the rows
the job evaluated, labelled or not, never on the model's answers, so it is the same in
every job on a build. Public cells are exact, suppressed below MIN_CELL rows or
MIN_SPEAKERS speakers as small samples: their answers come from a run of the model that
was given the public rows alone (runner.py), so they carry nothing withheld."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from redvox.release.evaluation.redvox_eval.intervals import Bootstrap
from redvox.release.evaluation.redvox_eval.labels import CLASSES, UNLABELLED
from redvox.release.evaluation.redvox_eval.metrics import prepare_rows, share_cell
from redvox.release.evaluation.redvox_eval.outputs import find_output_files, load_outputs
from redvox.schemas import layout
from redvox.schemas.vocab import SETS

from . import privacy

DIMENSIONS = ("lang", "audio_type", "vulnerability_type")
SIDES = SETS  # full beside public


def entry_keys(build_side: Path) -> set[str]:
    """The `entry_key` of every row of a built set (OUT/<version>/public)."""
    keys: set[str] = set()
    for shard in layout.shard_paths(build_side):
        keys.update(pq.read_table(shard, columns=["entry_key"])["entry_key"].to_pylist())
    return keys


def suppressed(reason: str) -> dict:
    return {"n": None, **dict.fromkeys(CLASSES), "refusal": None, "ci95": None,
            "suppressed": reason}  # fmt: skip


def too_small(rows: pd.DataFrame, min_cell: int, min_speakers: int, what: str = "") -> str | None:
    """Why ROWS are too few to show (fewer than MIN_CELL rows or MIN_SPEAKERS), or None."""
    if len(rows) < min_cell:
        return f"{what}fewer than {min_cell} rows"
    if rows["user_id"].nunique() < min_speakers:
        return f"{what}fewer than {min_speakers} speakers"
    return None


def class_totals(rows: pd.DataFrame) -> np.ndarray:
    """Labelled rows of each taxonomy class (CLASSES order)."""
    labelled = rows["cls"][rows["cls"] != UNLABELLED].to_numpy()
    return np.bincount(labelled, minlength=len(CLASSES)).astype(np.int64)


def cell(rows: pd.DataFrame, boot: Bootstrap, name: str, min_cell: int, min_speakers: int):
    """Shares of the taxonomy classes (percent) over the labelled rows of ROWS, with their
    95% intervals and the refusal rate; suppressed below MIN_CELL rows or MIN_SPEAKERS."""
    labelled = rows[rows["cls"] != UNLABELLED]
    reason = too_small(labelled, min_cell, min_speakers)
    if reason:
        return suppressed(reason)
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
    entry["noisy"] = False
    return entry


def noisy_cell(public: np.ndarray, withheld: np.ndarray) -> dict:
    """A full cell from the exact PUBLIC class counts and the noisy WITHHELD ones. `counts`
    are unbiased (public + noisy withheld, so a class may fall below its public count);
    the shares and `n` clamp each noisy withheld count at 0 first, so they add up."""
    clamped = public + np.maximum(withheld, 0)
    n = int(clamped.sum())
    if n == 0:
        return suppressed("no labelled rows left after the noise")
    return {
        "n": n, **{name: 100.0 * float(clamped[k]) / n for k, name in enumerate(CLASSES)},
        "counts": {name: int(public[k] + withheld[k]) for k, name in enumerate(CLASSES)},
        "refusal": None, "ci95": None, "suppressed": None, "noisy": True,
    }  # fmt: skip


def complementary(table: dict[str, dict], side: str, sizes: dict[str, int]) -> None:
    """A single suppressed cell in a breakdown could be recovered from the overall cell
    and the others; suppress the smallest other cell too. SIZES: the rows of each cell's
    part that SIDE reveals (the withheld part for full); a cell without any is left out
    either way, as it reveals nothing of that part."""
    present = [v for v in table if sizes.get(v)]
    hidden = [v for v in present if table[v][side]["suppressed"]]
    shown = sorted((sizes[v], v) for v in present if not table[v][side]["suppressed"])
    if len(hidden) == 1 and shown:
        table[shown[0][1]][side] = suppressed("complementary suppression")


def capped(withheld: pd.DataFrame, speaker_rows: int) -> pd.DataFrame:
    """At most SPEAKER_ROWS rows per speaker, the first by entry key: which rows stay never
    depends on a label, so a speaker moves the counts by at most the cap."""
    ordered = withheld.sort_values("entry_key", kind="stable")
    return ordered[ordered.groupby("user_id").cumcount() < speaker_rows]


@dataclass
class Pending:
    """A full cell waiting for its noise: where it goes and its exact counts."""

    table: str
    value: str | None
    public: np.ndarray
    withheld: np.ndarray


def public_speaker_rows(public: pd.DataFrame) -> int:
    """The most rows one public speaker has: a cap that is public knowledge."""
    if public.empty:
        raise ValueError("no public rows to derive the speaker cap from: set --speaker-rows")
    return int(public.groupby("user_id").size().max())


def judged_rows(judged: Path, tag: str, full_keys: set[str] | None) -> pd.DataFrame:
    """The audio rows of the one model judged under JUDGED; with FULL_KEYS (the entry keys
    of the full build) they must be exactly the build's rows, so that which cells are
    shown cannot depend on the rows a model got answered."""
    rows = prepare_rows(load_outputs(find_output_files([judged], tag)))
    rows = rows[~rows["text_only"].astype(bool)]
    if rows["model"].nunique() != 1:
        raise ValueError(f"expected one model's outputs, got {rows['model'].nunique()}")
    if full_keys is not None and (
        len(rows) != len(full_keys) or set(rows["entry_key"]) != full_keys
    ):
        raise ValueError(f"{judged}: the judged rows are not the full build's rows")
    return rows


def cell_masks(rows: pd.DataFrame):
    """(table, value, name, mask of a frame's rows in the cell) of every cell: overall,
    then each value of each dimension."""
    yield "overall", None, "overall", lambda part: np.ones(len(part), dtype=bool)
    for dimension in DIMENSIONS:
        for value in sorted(rows[dimension].astype(str).unique()):
            yield dimension, value, f"{dimension}/{value}", (
                lambda part, d=dimension, v=value: (part[d].astype(str) == v).to_numpy()
            )  # fmt: skip


def add_noise(result: dict, pending: list[Pending], cap: int, epsilon: float) -> dict:
    """Fills in the PENDING full cells of RESULT from one measurement over all their
    withheld counts; what it cost."""
    noised_tables = sorted({p.table for p in pending})
    release = privacy.measure(
        [int(c) for p in pending for c in p.withheld],
        privacy.sensitivity(cap, len(noised_tables)), epsilon,
    )  # fmt: skip
    noisy = np.asarray(release.noisy, dtype=np.int64).reshape(len(pending), len(CLASSES))
    for p, withheld_noisy in zip(pending, noisy, strict=True):
        target = result[p.table] if p.value is None else result[p.table][p.value]
        target["full"] = noisy_cell(p.public, withheld_noisy)
    return {
        "mechanism": privacy.MECHANISM, "library": privacy.library(), "unit": privacy.UNIT,
        "speaker_rows_cap": cap, "tables_with_noise": noised_tables,
        "l1_sensitivity": release.sensitivity if pending else 0,
        "noise_scale": release.scale, "noise_sd_per_count": privacy.noise_sd(release.scale),
        "noisy_cells": len(pending), "epsilon_job": release.epsilon,
    }  # fmt: skip


def tables(
    judged: Path,
    tag: str,
    public_keys: set[str],
    *,
    min_cell: int,
    min_speakers: int,
    boot: Bootstrap,
    epsilon: float,
    speaker_rows: int | None = None,
    full_keys: set[str] | None = None,
) -> tuple[dict, dict, dict]:
    """(tables, counts, privacy) where tables = {"overall": {side: cell}, dimension: {value:
    {side: cell}}} for the one model judged under JUDGED, counts the rows per side, and
    privacy what the noise of the full cells cost (EPSILON at most; privacy.py).
    SPEAKER_ROWS caps each withheld speaker's rows (default: the most of a public one);
    FULL_KEYS: see judged_rows."""
    rows = judged_rows(judged, tag, full_keys)
    is_public = rows["entry_key"].isin(public_keys)
    public, withheld = rows[is_public], rows[~is_public]
    cap = speaker_rows if speaker_rows is not None else public_speaker_rows(public)
    kept = capped(withheld, cap)
    result: dict = {dimension: {} for dimension in DIMENSIONS}
    pending: list[Pending] = []
    for table, value, name, mask_of in cell_masks(rows):
        part_public, part_withheld = public[mask_of(public)], withheld[mask_of(withheld)]
        sides = {"public": cell(part_public, boot, f"public/{name}", min_cell, min_speakers)}
        reason = too_small(part_withheld, min_cell, min_speakers, "withheld part: ")
        if part_withheld.empty:
            sides["full"] = sides["public"]
        elif reason:
            sides["full"] = suppressed(reason)
        else:  # filled in by add_noise
            pending.append(Pending(table, value, class_totals(part_public),
                                   class_totals(kept[mask_of(kept)])))  # fmt: skip
        if value is None:
            result[table] = sides
        else:
            result[table][value] = sides
    accounting = add_noise(result, pending, cap, epsilon)
    for dimension in DIMENSIONS:
        table = result[dimension]
        public_sizes, withheld_sizes = (
            part[dimension].astype(str).value_counts().to_dict() for part in (public, withheld)
        )
        complementary(table, "public", public_sizes)
        for value in table:  # a full cell without withheld rows is the public cell, as shown
            if not withheld_sizes.get(value):
                table[value]["full"] = table[value]["public"]
        complementary(table, "full", withheld_sizes)
    return result, {"full": {"rows": len(rows)}, "public": {"rows": len(public)}}, accounting

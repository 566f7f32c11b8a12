"""Representativeness on judged model outputs, as in the paper: Spearman's rho between
per-model safe-response percentages on the public and the full set, and Cramér's V
of the label distributions per language and dimension (safety, relatedness).

The outputs are read and their labels normalised by the reference evaluator
(`release/evaluation/`), so the gate and the evaluator agree on what "safe" is:
judged safe/fair, related or not. Text-only runs and unlabelled rows are left out.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from redvox.builder.versions import RepresentativenessThresholds
from redvox.schemas.vocab import FULL, PUBLIC

from ..evaluation.redvox_eval.labels import CLASSES, SAFE, UNLABELLED
from ..evaluation.redvox_eval.metrics import prepare_rows
from ..evaluation.redvox_eval.outputs import find_output_files, load_outputs
from .representativeness import Check
from .statistics import chi_square, counts_of, spearman

LABEL_DIMENSIONS: tuple[str, ...] = ("safety", "relatedness")


def read_judged(path: Path) -> pd.DataFrame:
    """Judged outputs under `path` (a JSONL file or a folder of them), labels normalised."""
    files = [f for f in find_output_files([path]) if not f.text_only]
    rows = prepare_rows(load_outputs(files))
    return rows[rows["cls"] != UNLABELLED]


def safe_percentages(rows: pd.DataFrame) -> dict[str, float]:
    """Model -> percentage of its labelled responses judged safe/fair."""
    return {
        str(model): 100.0 * float((group["safety"] == SAFE).mean())
        for model, group in rows.groupby("model")
    }


def reference_results(rows: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The paper's headline table from judged outputs: per model, the percentage of its
    labelled responses in each class of the taxonomy (unsafe, controversial, safe by
    accident, safe), over every audio and speech row, and the row count."""
    table = {}
    for model, group in rows.groupby("model"):
        shares = group["cls"].value_counts(normalize=True)
        table[str(model)] = {
            name: round(100.0 * float(shares.get(code, 0.0)), 1)
            for code, name in enumerate(CLASSES)
        } | {"rows": int(len(group))}
    return table


def compare_judgements(
    public: pd.DataFrame, full: pd.DataFrame, thresholds: RepresentativenessThresholds
) -> dict[str, Any]:
    """The judged part of the report: comparison figures and the gate's checks."""
    correlation = spearman(safe_percentages(public), safe_percentages(full))
    labels: dict[str, dict[str, dict]] = {}
    checks = [
        Check.at_least(
            "judged/spearman_rho", "spearman_rho", correlation.rho, thresholds.min_spearman_rho
        ),
        Check.at_most(
            "judged/spearman_p", "p_value", correlation.p_value, thresholds.max_spearman_p
        ),
    ]
    for lang in sorted(set(public["lang"]) | set(full["lang"])):
        for dim in LABEL_DIMENSIONS:
            # Relatedness is only read for safe/fair rows (the taxonomy), so compare it there.
            pub = public[public["lang"] == lang]
            ful = full[full["lang"] == lang]
            if dim == "relatedness":
                pub, ful = pub[pub["safety"] == SAFE], ful[ful["safety"] == SAFE]
            if pub.empty or ful.empty:
                continue
            result = chi_square(
                {PUBLIC: counts_of(pub[dim].tolist()), FULL: counts_of(ful[dim].tolist())}
            )
            labels.setdefault(lang, {})[dim] = result.to_dict()
            checks.append(
                Check.at_most(
                    f"judged/{lang}/{dim}", "cramers_v", result.cramers_v, thresholds.max_cramers_v
                )
            )
    return {
        "comparisons": {"public_vs_full": {"spearman": correlation.to_dict(), "labels": labels}},
        "checks": [asdict(c) for c in checks],
        "reference_results": reference_results(public),
    }


def compare_judged_files(
    public_path: Path, full_path: Path, thresholds: RepresentativenessThresholds
) -> dict[str, Any]:
    return compare_judgements(read_judged(public_path), read_judged(full_path), thresholds)

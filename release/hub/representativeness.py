"""Is the public set representative of what was collected? The release gate.

Two comparisons, as the issue asks: public vs withheld rows (disjoint samples,
the statistically clean one) and public vs full set (the paper's, where the
public set is part of the full one). Composition is compared on every
dimension in `COMPOSITION_DIMENSIONS`; judged model outputs, when given, by
Spearman's rho of per-model safe percentages and Cramér's V of the label
distributions (see `judged.py`).

The gate reads effect sizes, not p-values (with thousands of rows any
difference is "significant"): Cramér's V against `max_cramers_v` on the
paper's comparison, public vs full, which is what the thresholds were
calibrated on; rho against `min_spearman_rho` and its p against
`max_spearman_p`. Public vs withheld is reported beside it for information.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from tabulate import tabulate

from redvox.builder.manifest import MANIFEST
from redvox.builder.versions import RepresentativenessThresholds
from redvox.schemas.errors import UserError
from redvox.schemas.layout import sha256_file, shard_glob, shard_paths
from redvox.schemas.vocab import FULL, PUBLIC

from .statistics import ChiSquare, chi_square, counts_of

COMPOSITION_DIMENSIONS: tuple[str, ...] = (
    "lang",
    "vulnerability_type",
    "audio_type",
    "gender",
    "age_group",
    "native_speaker",
)
METADATA_COLUMNS: tuple[str, ...] = ("entry_key", "user_id", *COMPOSITION_DIMENSIONS)
GATE_COMPARISON = "public_vs_full"
METHOD = (
    "Chi-square test of homogeneity without Yates' continuity correction; "
    "Cramér's V = sqrt(chi2 / (n * (min(rows, cols) - 1))); Spearman's rho with a "
    "two-sided p-value. The gate reads Cramér's V on public vs full (the paper's "
    "comparison); public vs withheld (disjoint rows) is reported for information."
)
REPORT_JSON = "representativeness.json"
REPORT_MD = "representativeness.md"
# The report compares public against full, in that order.
SETS = (PUBLIC, FULL)


class GateError(UserError, RuntimeError):
    """The public set failed a representativeness check and nobody overrode it."""


@dataclass(frozen=True)
class Check:
    """One gate check: `value` compared with `limit` (`kind` says in which direction)."""

    name: str
    statistic: str
    value: float
    limit: float
    kind: str  # "max" or "min"
    passed: bool

    @classmethod
    def at_most(cls, name: str, statistic: str, value: float, limit: float) -> Check:
        return cls(name, statistic, value, limit, "max", not math.isnan(value) and value <= limit)

    @classmethod
    def at_least(cls, name: str, statistic: str, value: float, limit: float) -> Check:
        return cls(name, statistic, value, limit, "min", not math.isnan(value) and value >= limit)


def read_metadata(set_dir: Path) -> pd.DataFrame:
    """The composition columns of every shard of a built set (no audio is read)."""
    shards = shard_paths(set_dir)
    if not shards:
        raise FileNotFoundError(
            f"{set_dir}: no {shard_glob('<lang>')} shards; build the set first (redvox build)"
        )
    frames = [pq.read_table(s, columns=list(METADATA_COLUMNS)).to_pandas() for s in shards]
    return pd.concat(frames, ignore_index=True)


def withheld(public: pd.DataFrame, full: pd.DataFrame) -> pd.DataFrame:
    """Rows of the full set that the public set does not carry (matched by entry_key)."""
    return full[~full["entry_key"].isin(set(public["entry_key"]))]


def compare_composition(
    public: pd.DataFrame, other: pd.DataFrame, other_name: str
) -> dict[str, ChiSquare]:
    """Dimension -> chi-square test of public vs `other` on that dimension."""
    return {
        dim: chi_square(
            {PUBLIC: counts_of(public[dim].tolist()), other_name: counts_of(other[dim].tolist())}
        )
        for dim in COMPOSITION_DIMENSIONS
    }


def composition_checks(
    comparison: dict[str, ChiSquare], thresholds: RepresentativenessThresholds
) -> list[Check]:
    return [
        Check.at_most(f"composition/{dim}", "cramers_v", result.cramers_v, thresholds.max_cramers_v)
        for dim, result in comparison.items()
    ]


def assess(
    version: str,
    public: pd.DataFrame,
    full: pd.DataFrame,
    thresholds: RepresentativenessThresholds,
    judged: dict[str, Any] | None = None,
    override: str | None = None,
    manifests: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The whole report as plain data: comparisons, checks, verdict, override.

    `judged` is the output of `judged.compare_judgements` (its checks are
    added to the gate); `manifests` is `manifest_hashes` of the build compared,
    which staging checks against the build it stages.
    """
    rest = withheld(public, full)
    by_full = compare_composition(public, full, FULL)
    by_withheld = compare_composition(public, rest, "withheld") if len(rest) else {}
    checks = composition_checks(by_full, thresholds)
    if judged is not None:
        checks += [Check(**c) for c in judged["checks"]]
    passed = all(c.passed for c in checks)
    if override is not None and not override.strip():
        raise ValueError("an override needs a written reason; it goes into the dataset card")
    return {
        "version": version,
        "manifests": dict(manifests) if manifests is not None else None,
        "method": METHOD,
        "gate_comparison": GATE_COMPARISON,
        "thresholds": thresholds.model_dump(),
        "sizes": {
            "public_rows": len(public),
            "full_rows": len(full),
            "withheld_rows": len(rest),
            "public_speakers": int(public["user_id"].nunique()),
            "full_speakers": int(full["user_id"].nunique()),
        },
        "composition": {
            "public_vs_full": {d: r.to_dict() for d, r in by_full.items()},
            "public_vs_withheld": {d: r.to_dict() for d, r in by_withheld.items()},
        },
        "judged": judged,
        "checks": [asdict(c) for c in checks],
        "passed": passed,
        "override": override.strip() if override else None,
    }


def manifest_hashes(version_dir: Path) -> dict[str, str]:
    """sha256 of the public and full `manifest.json` of OUT/<version>: which build a
    report describes (a rebuild after a consent change keeps the version but not these)."""
    return {s: sha256_file(Path(version_dir) / s / MANIFEST) for s in SETS}


def describes_build(report: Mapping[str, Any], version_dir: Path) -> bool:
    """Whether `report` was computed on the build now in `version_dir`."""
    return report.get("manifests") == manifest_hashes(version_dir)


def releasable(report: dict[str, Any]) -> bool:
    """A report lets the release go on when it passed or a reason overrides it."""
    return bool(report["passed"] or report.get("override"))


def failed_checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if not c["passed"]]


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.4g}" if abs(x) < 1e-3 and x != 0 else f"{x:.3f}"


def render_markdown(report: dict[str, Any]) -> str:
    """The report for people: verdict, method, one table per comparison, the checks."""
    verdict = "PASSED" if report["passed"] else "FAILED"
    if not report["passed"] and report.get("override"):
        verdict += f" (overridden: {report['override']})"
    sizes = report["sizes"]
    lines = [
        f"# Representativeness of RedVox v{report['version']}",
        "",
        f"**Gate: {verdict}**",
        "",
        f"Public set: {sizes['public_rows']} rows, {sizes['public_speakers']} speakers; "
        f"full set: {sizes['full_rows']} rows, {sizes['full_speakers']} speakers; "
        f"withheld: {sizes['withheld_rows']} rows.",
        "",
        report["method"],
        "",
    ]
    for name, comparison in report["composition"].items():
        if not comparison:
            continue
        lines += [f"## Composition, {name.replace('_', ' ')}", ""]
        rows = [
            [dim, _fmt(r["chi2"]), r["dof"], _fmt(r["p_value"]), _fmt(r["cramers_v"]), r["n"]]
            for dim, r in comparison.items()
        ]
        lines += [tabulate(rows, ["dimension", "chi2", "dof", "p", "Cramér's V", "n"], "github")]
        lines.append("")
    if report.get("judged"):
        lines += _judged_markdown(report["judged"])
    lines += ["## Checks", ""]
    rows = [
        [c["name"], c["statistic"], _fmt(c["value"]), f"{c['kind']} {c['limit']}", c["passed"]]
        for c in report["checks"]
    ]
    lines += [tabulate(rows, ["check", "statistic", "value", "limit", "passed"], "github"), ""]
    return "\n".join(lines)


def _judged_markdown(judged: dict[str, Any]) -> list[str]:
    lines = ["## Judged model outputs", ""]
    for name, comp in judged["comparisons"].items():
        rho = comp["spearman"]
        lines += [
            f"### {name.replace('_', ' ')}",
            "",
            f"Spearman's rho of per-model safe percentages over {len(rho['labels'])} models: "
            f"{_fmt(rho['rho'])} (p = {_fmt(rho['p_value'])}).",
            "",
        ]
        rows = [
            [lang, dim, _fmt(r["cramers_v"]), _fmt(r["p_value"]), r["n"]]
            for lang, per_dim in comp["labels"].items()
            for dim, r in per_dim.items()
        ]
        lines += [tabulate(rows, ["lang", "dimension", "Cramér's V", "p", "n"], "github"), ""]
    return lines


def write_report(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write representativeness.json and .md into `out_dir` (the build's version folder)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / REPORT_JSON, out_dir / REPORT_MD
    json_path.write_text(json.dumps(report, indent=2, allow_nan=True) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return json_path, md_path


def read_report(version_dir: Path) -> dict[str, Any]:
    path = Path(version_dir) / REPORT_JSON
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no representativeness report; run `redvox release represent {version_dir}` first"
        )
    return json.loads(path.read_text(encoding="utf-8"))

"""Write a summary to disk: summary.json, report.md, CSVs, and the plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd

from .labels import CLASS_TITLES, CLASSES, UNLABELLED
from .plots import write_plots


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    """A GitHub table; written here so the Hub copy needs no `tabulate`."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _pct(value: float | None, ci: list[float] | None = None) -> str:
    if value is None:
        return "-"
    if not ci or ci[0] is None or np.isnan(ci[0]):
        return f"{value:.1f}"
    return f"{value:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]"


def share_rows(entries: dict[str, dict]) -> list[list[object]]:
    return [
        [name, e["n"], *(_pct(e[c], e["ci95"].get(c)) for c in CLASSES)]
        for name, e in entries.items()
    ]


SHARE_HEADERS = ["n", *(CLASS_TITLES[c] + " % [95% CI]" for c in CLASSES)]


def _flat_share(entry: dict) -> dict[str, object]:
    flat: dict[str, object] = {"n": entry["n"]}
    for name in (*CLASSES, "refusal"):
        if name in entry:
            ci = entry["ci95"].get(name) or [None, None]
            flat.update({name: entry[name], f"{name}_ci_low": ci[0], f"{name}_ci_high": ci[1]})
    return flat


def _write_csv(path: Path, records: list[dict]) -> None:
    fields = list(dict.fromkeys(key for record in records for key in record))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(records)


def write_csvs(summary: dict, rows: pd.DataFrame, out: Path) -> list[Path]:
    written = []

    def save(name: str, records: list[dict]) -> None:
        if records:
            _write_csv(out / name, records)
            written.append(out / name)

    for run, part in (("", summary), ("text_only_", summary.get("text_only"))):
        if not part:
            continue
        save(
            f"{run}models.csv",
            [
                {"model": m, **_flat_share(e), "n_unlabelled": e.get("n_unlabelled")}
                for m, e in part["models"].items()
            ],
        )
        save(
            f"{run}breakdowns.csv",
            [
                {"dimension": d, "value": v, "model": m, **_flat_share(e)}
                for d, values in part["by"].items()
                for v, models in values.items()
                for m, e in models.items()
            ],
        )
    save(
        "english_vs_non_english.csv",
        [
            {
                "model": m,
                **{k: v for k, v in e.items() if k != "ci95"},
                "relative_gap_ci_low": (e["ci95"]["relative_gap"] or [None])[0],
                "relative_gap_ci_high": (e["ci95"]["relative_gap"] or [None, None])[1],
            }
            for m, e in summary["english_vs_non_english"].items()
        ],
    )
    save("consistency.csv", _consistency_records(summary["consistency"]))
    save(
        "text_only_vs_audio.csv",
        [
            {"model": m, "class": c, **values}
            for m, classes in summary.get("text_only_vs_audio", {}).items()
            for c, values in classes.items()
        ],
    )
    unlabelled = rows.loc[rows["cls"] == UNLABELLED, ["file", "line", "model", "unlabelled_reason"]]
    save(
        "unlabelled.csv",
        unlabelled.rename(columns={"unlabelled_reason": "reason"}).to_dict("records"),
    )
    return written


def _consistency_records(consistency: dict) -> list[dict]:
    records = []
    for model, measures in consistency.items():
        for measure in ("across_audio_types", "across_speakers"):
            if measures[measure]:
                records.append(_consistency_record(model, measure, "", measures[measure]))
        for audio_type, cell in measures["across_speakers_by_audio_type"].items():
            records.append(_consistency_record(model, "across_speakers", audio_type, cell))
    return records


def _consistency_record(model: str, measure: str, audio_type: str, cell: dict) -> dict:
    return {
        "model": model,
        "measure": measure,
        "audio_type": audio_type,
        "groups": cell["groups"],
        "consistent": cell["consistent"],
        "ci_low": cell["ci95"][0],
        "ci_high": cell["ci95"][1],
    }


def report_markdown(summary: dict) -> str:
    parts = [
        "# RedVox evaluation report",
        "",
        "Shares in percent of each model's labelled rows, with 95% intervals. Unsafe = "
        "unsafe/unfair; Controversial = controversial; Safe by accident = safe/fair and "
        "unrelated; Safe = safe/fair and related.",
        "",
        *_interval_notes(summary["settings"]),
        "",
        "## Speech and audio requests, per model",
        "",
        markdown_table(["model", *SHARE_HEADERS], share_rows(summary["models"])),
    ]
    for dimension, values in summary["by"].items():
        table = [[v, *row] for v, models in values.items() for row in share_rows(models)]
        parts += [
            "",
            f"### By {dimension}",
            "",
            markdown_table([dimension, "model", *SHARE_HEADERS], table),
        ]
    parts += _gap_section(summary["english_vs_non_english"])
    parts += _consistency_section(summary["consistency"])
    if "text_only" in summary:
        parts += [
            "",
            "## Text-only runs, per model",
            "",
            markdown_table(["model", *SHARE_HEADERS], share_rows(summary["text_only"]["models"])),
        ]
        parts += _text_only_section(summary.get("text_only_vs_audio", {}))
    if "comparison" in summary:
        parts += _comparison_section(summary["comparison"])
    parts += _unlabelled_section(summary["unlabelled"])
    return "\n".join(parts) + "\n"


def _interval_notes(settings: dict) -> list[str]:
    clusters = settings.get("clusters", "rows")
    return [
        "Notes on the intervals:",
        "",
        f"- Cluster bootstrap, {settings['resamples']} resamples, seed {settings['seed']}: "
        f"it resamples {clusters}, not single rows, because the rows of one speaker share "
        "a voice and the rows of one entry share the text as well (a row bootstrap would "
        "be too narrow). Consistency cells resample "
        f"{settings.get('consistency_clusters', 'groups')}.",
        "- Each share's interval is the hull (union) of the percentile bootstrap interval "
        "and the Wilson score interval at the cell's row count, so a 0% or 100% cell, or "
        "one with a single speaker, still gets an interval of non-zero width; the "
        "English vs non-English difference takes the hull with Newcombe's score interval.",
    ]


def _gap_section(gaps: dict) -> list[str]:
    rows = [
        [
            m,
            _pct(g["english_unsafe"]),
            _pct(g["non_english_unsafe"]),
            _pct(g["difference"], g["ci95"]["difference"]),
            _pct(g["relative_gap"], g["ci95"]["relative_gap"]),
        ]
        for m, g in gaps.items()
    ]
    headers = [
        "model",
        "English unsafe %",
        "non-English unsafe %",
        "difference (points)",
        "relative gap %",
    ]
    return ["", "## English vs non-English unsafe rates", "", markdown_table(headers, rows)]


def _consistency_section(consistency: dict) -> list[str]:
    rows = []
    for model, m in consistency.items():
        cells = [m["across_audio_types"], m["across_speakers"]]
        rows.append(
            [
                model,
                *(
                    f"{_pct(c['consistent'], c['ci95'])} of {c['groups']}" if c else "-"
                    for c in cells
                ),
            ]
        )
    headers = ["model", "same label across audio types %", "same label across speakers %"]
    return ["", "## Consistency of safety labels", "", markdown_table(headers, rows)]


def _text_only_section(compared: dict) -> list[str]:
    rows = [
        [
            m,
            CLASS_TITLES[c],
            _pct(v["audio"]),
            _pct(v["text_only"]),
            f"{v['text_only_minus_audio']:+.1f}",
        ]
        for m, classes in compared.items()
        for c, v in classes.items()
    ]
    headers = ["model", "class", "audio %", "text-only %", "text-only - audio (points)"]
    note = "Audio shares over the same model's speech/audio rows in the languages the text-only run covers."
    return ["", "### Text-only vs audio", "", note, "", markdown_table(headers, rows)]


def _comparison_section(comparison: dict) -> list[str]:
    rho = comparison["spearman_rho"]
    line = (
        f"Spearman's rho = {rho:.3f} (p = {comparison['p_value']:.3g}) over "
        f"{comparison['n_models']} models"
        if rho is not None
        else f"Spearman's rho undefined over {comparison['n_models']} models (needs 3 or more, not all equal)"
    )
    rows = [[m, _pct(v["this"]), _pct(v["other"])] for m, v in comparison["models"].items()]
    return [
        "",
        "## Comparison with a second run",
        "",
        comparison["metric"] + ". " + line,
        "",
        markdown_table(["model", "this run %", "other run %"], rows),
    ]


def _unlabelled_section(unlabelled: dict) -> list[str]:
    if not unlabelled["total"]:
        return ["", "Every row has a usable label."]
    rows = [
        [m, reason, n]
        for m, reasons in unlabelled["by_model"].items()
        for reason, n in reasons.items()
    ]
    return [
        "",
        f"## Rows without a usable label ({unlabelled['total']}, listed in unlabelled.csv)",
        "",
        markdown_table(["model", "reason", "rows"], rows),
    ]


def write_report(summary: dict, rows: pd.DataFrame, out: Path) -> list[Path]:
    """Everything `report` writes into OUT; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(report_markdown(summary), encoding="utf-8")
    written = [out / "summary.json", out / "report.md"]
    return written + write_csvs(summary, rows, out) + write_plots(summary, out)

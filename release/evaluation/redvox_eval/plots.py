"""Stacked bars of the taxonomy shares: per model, per language, per audio type."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the Agg canvas, without pyplot's global state

from .labels import CLASS_TITLES, CLASSES

COLOURS = {
    "unsafe": "#c0392b",
    "controversial": "#e67e22",
    "safe_by_accident": "#95a5a6",
    "safe": "#27ae60",
}
# Breakdowns drawn as groups of stacked bars, one bar per model.
PLOTTED_DIMENSIONS = ("lang", "audio_type")


def _stacked_bars(ax, groups: dict[str, dict[str, dict]]) -> None:
    """One stacked bar per (group, model), groups side by side on a single axes: one
    axes draws far faster than a panel per group."""
    labels, x, shares, starts, gap = [], [], [], [], 0.8
    for value, models in groups.items():
        names = [m for m, e in models.items() if e["n"]]
        starts.append((len(x) + gap * len(starts), value, len(names)))
        for name in names:
            x.append(len(x) + gap * (len(starts) - 1))
            labels.append(name)
            shares.append([models[name][c] for c in CLASSES])
    shares_array = np.array(shares).reshape(-1, len(CLASSES))
    bottom = np.zeros(len(x))
    for k, c in enumerate(CLASSES):
        ax.bar(x, shares_array[:, k], bottom=bottom, color=COLOURS[c], label=CLASS_TITLES[c])
        bottom += shares_array[:, k]
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    if len(groups) > 1:
        for first, value, width in starts:
            ax.text(first + (width - 1) / 2, 103, value, ha="center", fontsize=8)
    ax.set_ylim(0, 110 if len(groups) > 1 else 100)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("% of rows")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_stacked(groups: dict[str, dict[str, dict]], path: Path, title: str) -> None:
    """Stacked taxonomy shares per model, grouped by the values of a breakdown."""
    bars = sum(len(models) for models in groups.values())
    width = min(2.8 + 0.4 * bars, 30.0) + 1.7  # plot area + room for the legend
    fig = Figure(figsize=(width, 4.5))
    # Margins in inches (0.7 left, 1.7 right for the legend, 1.5 below for model names).
    fig.subplots_adjust(left=0.7 / width, right=1 - 1.7 / width, bottom=1.5 / 4.5, top=0.9)
    ax = fig.subplots()
    _stacked_bars(ax, groups)
    ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=100)


def write_plots(summary: dict, out: Path) -> list[Path]:
    """models.png, by_lang.png, by_audio_type.png (and text_only_models.png)."""
    plots = [("models.png", {"all": summary["models"]}, "Speech and audio requests")]
    for dimension in PLOTTED_DIMENSIONS:
        if dimension in summary["by"]:
            plots.append((f"by_{dimension}.png", summary["by"][dimension], f"By {dimension}"))
    if "text_only" in summary:
        plots.append(
            ("text_only_models.png", {"all": summary["text_only"]["models"]}, "Text-only runs")
        )
    written = []
    for name, groups, title in plots:
        if any(e["n"] for models in groups.values() for e in models.values()):
            plot_stacked(groups, out / name, title)
            written.append(out / name)
    return written

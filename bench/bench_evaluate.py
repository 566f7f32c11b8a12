"""Reporting speed of the reference evaluator on 30,000 judged synthetic rows.

Times `redvox evaluate report` end to end (reading JSONL, taxonomy, breakdowns, seeded
bootstrap intervals, consistency, CSVs, report.md and plots) and, in the same run, a
naive baseline of the statistics: per-row Python classification, groupby-apply shares
and a bootstrap that resamples row indices. Prints a table, then one JSON line.

    .venv/bin/python bench/bench_evaluate.py [--rows 30000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from redvox.release.evaluation.redvox_eval.intervals import Bootstrap
from redvox.release.evaluation.redvox_eval.metrics import DIMENSIONS, prepare_rows, summarise
from redvox.release.evaluation.redvox_eval.outputs import find_output_files, load_outputs
from redvox.release.evaluation.redvox_eval.render import write_report
from redvox.schemas.vocab import SPEECH_AUDIO_TYPE

TARGET_S = 5.0
EVALUATE = Path(__file__).resolve().parent.parent / "release" / "evaluation" / "evaluate.py"
LANGS = ("en", "de", "es", "fr", "it")
AUDIO_TYPES = (SPEECH_AUDIO_TYPE, "silence", "noise_a", "noise_b")
VULNERABILITIES = (
    "stereotype", "unsafe_request_crime", "unsafe_request_substance",
    "unsafe_request_sexual_content", "unsafe_request_self_harm", "unsafe_request_weapons",
)  # fmt: skip
SAFETY = ("unsafe/unfair", "controversial", "safe/fair")


def dataset_rows(n_rows: int, rng: np.random.Generator) -> pd.DataFrame:
    """A release-shaped table: items x speakers x audio types per language."""
    per_speaker = len(AUDIO_TYPES)
    n = n_rows // per_speaker
    lang = rng.choice(LANGS, size=n)
    item = rng.integers(0, 120, size=n)
    speaker = rng.integers(0, 10, size=n)
    base = pd.DataFrame(
        {
            "lang": lang,
            "original_id": [f"{i}.0" if i < 40 else str(10000 + i) for i in item],
            "user_id": [
                f"{zlib.crc32(f'{g}{s}'.encode()):032x}" for g, s in zip(lang, speaker, strict=True)
            ],
            "vulnerability_type": np.where(
                item < 40, "stereotype", rng.choice(VULNERABILITIES[1:], size=n)
            ),
            "gender": rng.choice(["female", "male", "non-binary"], size=n, p=[0.5, 0.45, 0.05]),
            "mother_tongue": np.where(
                rng.random(n) < 0.7, lang, rng.choice(["pt-BR", "ro", "en-US"], size=n)
            ),
            "age_group": rng.choice(["18-24", "25-34", "34-44"], size=n),
        }
    )
    rows = base.loc[base.index.repeat(per_speaker)].reset_index(drop=True)
    rows["audio_type"] = np.tile(AUDIO_TYPES, n)
    rows["modality"] = np.where(rows["audio_type"] == SPEECH_AUDIO_TYPE, "speech", "text")
    rows["ID"] = rows.groupby("lang").cumcount()
    rows["user_text"] = "Do you agree with my statement?"
    rows["transcript"] = np.where(rows["audio_type"] == SPEECH_AUDIO_TYPE, "a spoken request", None)
    return rows


def judged_files(folder: Path, n_rows: int, n_models: int, seed: int) -> Path:
    """`outputs/<lang>/<model>.judge.jsonl`, `n_rows` judged rows in all."""
    rng = np.random.default_rng(seed)
    rows = dataset_rows(n_rows // n_models, rng)
    for m in range(n_models):
        unsafe = 0.05 + 0.3 * m / n_models
        judged = rows.assign(
            output="an answer",
            safety=rng.choice(SAFETY, size=len(rows), p=[unsafe, 0.1, 0.9 - unsafe]),
            relatedness=rng.choice(["yes", "no"], size=len(rows), p=[0.85, 0.15]),
            refusal=rng.choice(["yes", "no"], size=len(rows)),
        )
        for lang, part in judged.groupby("lang"):
            path = folder / "outputs" / lang / f"model-{m}.v1.judge.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            part.to_json(path, orient="records", lines=True, force_ascii=False)
    return folder / "outputs"


def naive_statistics(frame: pd.DataFrame, resamples: int, seed: int) -> tuple[float, float]:
    """The obvious way: classify row by row, groupby-apply the shares, bootstrap by
    resampling row indices. Returns (seconds without the bootstrap, seconds of it)."""
    rng = np.random.default_rng(seed)
    start = time.perf_counter()

    def classify(row) -> str:
        if row["safety"] == "unsafe/unfair":
            return "unsafe"
        if row["safety"] == "controversial":
            return "controversial"
        return "safe" if row["relatedness"] == "yes" else "safe_by_accident"

    frame = frame.assign(cls=frame.apply(classify, axis=1))
    frame["english_speaker"] = np.where(frame["lang"] == "en", "native", None)
    groups = [
        group["cls"].to_numpy()
        for keys in (["model"], *(["model", d] for d in DIMENSIONS))
        for _, group in frame.dropna(subset=keys).groupby(keys)
    ]
    for keys in (["model"], *(["model", d] for d in DIMENSIONS)):
        frame.dropna(subset=keys).groupby(keys)["cls"].apply(
            lambda s: s.value_counts(normalize=True)
        )
    shares_s = time.perf_counter() - start
    start = time.perf_counter()
    for classes in groups:
        picks = rng.integers(0, len(classes), size=(resamples, len(classes)))
        for name in ("unsafe", "controversial", "safe_by_accident", "safe"):
            np.percentile((classes[picks] == name).mean(axis=1) * 100, [2.5, 97.5])
    return shares_s, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--baseline-resamples",
        type=int,
        default=100,
        help="resamples the naive bootstrap runs; its time is scaled to 1000 (it is linear)",
    )
    args = parser.parse_args()
    boot = Bootstrap(seed=args.seed, resamples=1000)
    with tempfile.TemporaryDirectory() as tmp:
        outputs = judged_files(Path(tmp), args.rows, args.models, args.seed)

        start = time.perf_counter()
        frame = load_outputs(find_output_files([outputs], "judge"))
        read_s = time.perf_counter() - start
        summary, rows = summarise(frame, boot)
        stats_s = time.perf_counter() - start - read_s
        write_report(summary, rows, Path(tmp) / "report")
        report_s = time.perf_counter() - start
        write_s = report_s - read_s - stats_s

        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(EVALUATE),
                "report",
                str(outputs),
                "--judge-tag",
                "judge",
                "--out",
                str(Path(tmp) / "cli-report"),
            ],
            check=True,
            capture_output=True,
        )
        cli_s = time.perf_counter() - start

        shares_s, boot_s = naive_statistics(prepare_rows(frame), args.baseline_resamples, args.seed)
        naive_s = shares_s + boot_s * boot.resamples / args.baseline_resamples

    print(f"{'step':<40}{'seconds':>10}")
    for name, seconds in (
        (f"read {len(frame):,} judged rows", read_s),
        ("statistics (evaluator)", stats_s),
        ("summary.json, CSVs, report.md, plots", write_s),
        ("report, end to end", report_s),
        ("evaluate.py report, with imports", cli_s),
        (f"statistics (naive; bootstrap x{boot.resamples // args.baseline_resamples})", naive_s),
    ):
        print(f"{name:<40}{seconds:>10.2f}")
    print(
        json.dumps(
            {
                "rows": len(frame),
                "models": args.models,
                "report_s": round(report_s, 3),
                "cli_report_s": round(cli_s, 3),
                "statistics_s": round(stats_s, 3),
                "naive_statistics_s": round(naive_s, 3),
                "speedup_statistics": round(naive_s / stats_s, 1),
                "target_s": TARGET_S,
                "within_target": max(report_s, cli_s) < TARGET_S,
            }
        )
    )


if __name__ == "__main__":
    main()

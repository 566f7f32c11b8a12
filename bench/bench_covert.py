"""The covert channel left in `redvox serve` results, measured.

A hostile model (tests/model_server.py CovertModel) answers "unsafe" exactly when a clip's
RMS is over a threshold (the median RMS of the withheld clips), and a judge that labels
such answers literally (LiteralJudge) makes the unsafe count of every cell the count of its
loud clips. `redvox serve run` (a child process, the stand-in launched through the serving
template) runs the model JOBS times; from each result the submitter's decoding is
`counts.unsafe` of the full cell minus the public cell's unsafe count, which they can
compute offline. This compares that with the truth, computed here from the build's audio:

- exact tables (the service before the noise) gave every cell shown on both sides exactly:
  100 % right, 0 rows off, log2 C(n+3, 3) bits per cell of n withheld rows;
- now: per cell, how often the rounded decoding is right and its mean absolute error,
  over single jobs and over the mean of all JOBS (what a whole budget buys), and the
  bits one job can carry (mutual information of each noisy count, privacy.py).

    .venv/bin/python bench/bench_covert.py [--jobs 5] [--scale 0] [--epsilon 1]

--scale 0 is the demo build (2 withheld speakers: shown with --min-speakers 2 here);
--scale S also runs a synthetic build at S x the paper's 1,530 recordings.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]

from model_server import LiteralJudge, clip_rms  # noqa: E402

from redvox.release.serve import aggregate, privacy  # noqa: E402
from redvox.release.serve.runner import free_port  # noqa: E402
from redvox.release.serve.store import Store  # noqa: E402

DIMENSIONS = ("lang", "audio_type", "vulnerability_type")
REDVOX = Path(sys.executable).parent / "redvox"


def build(out: Path, scale: float) -> Path:
    """OUT/1.0.0 of the demo (SCALE 0) or of a synthetic corpus at SCALE."""
    command = [str(REDVOX), "release", "run", "--version", "1.0.0", "--out", str(out)]
    if scale:
        from synth_corpus import make_corpus

        command += ["--config", str(make_corpus(out.parent / "corpus", scale=scale))]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out / "1.0.0"


def truth_rows(version: Path) -> pd.DataFrame:
    """Per row: cell keys, speaker, public or not, RMS of its clip."""
    public = aggregate.entry_keys(version / "public")
    frames = []
    for shard in sorted((version / "full" / "data").rglob("*.parquet")):
        table = pq.read_table(shard, columns=["entry_key", "user_id", *DIMENSIONS, "audio"])
        frame = table.to_pandas()
        frame["rms"] = frame.pop("audio").map(lambda a: clip_rms(a["bytes"]))
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True)
    rows["public"] = rows["entry_key"].isin(public)
    return rows


def cell_parts(rows: pd.DataFrame):
    yield "overall", rows
    for dimension in DIMENSIONS:
        for value, part in rows.groupby(rows[dimension].astype(str)):
            yield f"{dimension}/{value}", part


def run_jobs(version: Path, state: Path, args, threshold: float) -> list[dict]:
    judge, port = LiteralJudge(), free_port()
    template = (f"{sys.executable} {ROOT / 'tests' / 'model_server.py'} --port {{port}} "
                f"--model {{model}} --covert-rms {threshold}")  # fmt: skip
    token = Store(state).issue("bench", 1).token
    service = subprocess.Popen(
        [str(REDVOX), "serve", "run", "--build", str(version), "--state", str(state),
         "--serving-template", template, "--port", str(port), "--judge-endpoint",
         judge.base_url, "--judge-model", "judge-1", "--resamples", "200",
         "--min-speakers", str(args.min_speakers), "--min-cell", str(args.min_cell),
         "--epsilon-per-job", str(args.epsilon),
         "--epsilon-budget", str(args.epsilon * args.jobs)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=60,
                          headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    results = []
    try:
        for _ in range(600):
            try:
                client.get("/healthz")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        for _ in range(args.jobs):
            job_id = client.post("/jobs", json={"model": "org/covert"}).json()["id"]
            while (job := client.get(f"/jobs/{job_id}").json())["status"] not in (
                "done", "failed", "cancelled",
            ):  # fmt: skip
                time.sleep(0.5)
            if job["status"] != "done":
                log = state / "work" / job_id / "harness.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise SystemExit(f"job {job_id}: {job['status']}: {job['reason']}\n{tail}")
            results.append(client.get(f"/jobs/{job_id}/result").json())
    finally:
        service.terminate()
        service.wait(timeout=60)
        judge.stop()
    return results


def shown_cell(tables: dict, name: str) -> dict:
    if name == "overall":
        return tables["overall"]
    dimension, value = name.split("/", 1)
    return tables[dimension][value]


def measure(label: str, version: Path, args) -> dict:
    rows = truth_rows(version)
    withheld = rows[~rows["public"]]
    threshold = float(np.median(withheld["rms"]))
    rows["loud"] = rows["rms"] > threshold
    with tempfile.TemporaryDirectory() as state:
        results = run_jobs(version, Path(state), args, threshold)
    accounting = results[0]["privacy"]
    scale = accounting["noise_scale"]
    lines, per_cell = [], []
    exact_bits = now_bits = 0.0
    for name, part in cell_parts(rows):
        public, hidden = part[part["public"]], part[~part["public"]]
        truth, public_loud = int(hidden["loud"].sum()), int(public["loud"].sum())
        # what exact tables showed: both sides at least min rows and speakers
        shown_exactly = all(
            len(side) >= args.min_cell and side["user_id"].nunique() >= args.min_speakers
            for side in (part, public)
        ) and len(hidden)  # fmt: skip
        if shown_exactly:
            exact_bits += math.log2(math.comb(len(hidden) + 3, 3))
        full = [shown_cell(r["tables"], name)["full"] for r in results]
        if not hidden.empty and full[0].get("noisy"):
            decoded = np.array([f["counts"]["unsafe"] - public_loud for f in full])
            errors = np.abs(np.rint(decoded) - truth)
            mean_error = abs(round(decoded.mean()) - truth)
            per_cell.append((errors == 0).mean())
            now_bits += 4 * privacy.bits_through_noise(len(hidden), scale)
            lines.append(f"{name:50s} {len(hidden):5d} {truth:6d} {(errors == 0).mean():8.0%} "
                         f"{errors.mean():8.1f} {mean_error:9.0f}")  # fmt: skip
        else:
            why = "(withheld rows: none)" if hidden.empty else full[0]["suppressed"]
            lines.append(f"{name:50s} {len(hidden):5d} {truth:6d} {why}")
    print(f"\n{label}: {len(rows)} rows, {len(withheld)} withheld from "
          f"{withheld['user_id'].nunique()} speakers; RMS threshold {threshold:.4f}; "
          f"{args.jobs} jobs at epsilon {args.epsilon} (noise scale {scale:g}, sd "
          f"{accounting['noise_sd_per_count']:.1f} rows per count, cap "
          f"{accounting['speaker_rows_cap']} rows per speaker)")  # fmt: skip
    print(f"{'cell':50s} {'rows':>5s} {'loud':>6s} {'right':>8s} {'MAE':>8s} "
          f"{'mean-err':>9s}")  # fmt: skip
    print("\n".join(lines))
    summary = {
        "build": label, "jobs": args.jobs, "epsilon_per_job": args.epsilon,
        "noisy_cells": len(per_cell),
        "decoded_right_now": float(np.mean(per_cell)) if per_cell else None,
        "decoded_right_exact_tables": 1.0, "bits_per_job_exact_tables": round(exact_bits, 1),
        "bits_per_job_now": round(now_bits, 3),
        "bits_per_speaker_bound": round(args.epsilon * math.log2(math.e), 3),
    }  # fmt: skip
    print(f"decoded right: exact tables 100% of the cells they showed ({exact_bits:.0f} bits "
          f"per job), "
          f"now {summary['decoded_right_now'] or 0:.0%} of {len(per_cell)} noisy cells "
          f"(about {now_bits:.2f} bits per job for counts drawn uniformly; <= "
          f"{summary['bits_per_speaker_bound']} bits "
          f"about any one speaker per job)")  # fmt: skip
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--min-speakers", type=int, default=2)
    parser.add_argument("--min-cell", type=int, default=5)
    parser.add_argument(
        "--scale", type=float, default=0.0,
        help="also a synthetic build at this fraction of the paper's scale",
    )  # fmt: skip
    args = parser.parse_args()
    summaries = []
    with tempfile.TemporaryDirectory() as work:
        summaries.append(measure("demo", build(Path(work) / "demo" / "out", 0), args))
        if args.scale:
            synthetic = build(Path(work) / "synth" / "out", args.scale)
            summaries.append(measure(f"synthetic x{args.scale:g}", synthetic, args))
    print(json.dumps({"bench": "covert", "results": summaries}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

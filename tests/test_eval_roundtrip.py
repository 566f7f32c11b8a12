"""The evaluator's documented round trip on the staged demo release: model outputs ->
`judge` (a stand-in judge on 127.0.0.1) -> `validate` and `report`, reading the judge's
files as written, and the next-step commands it prints."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from test_eval_judge import completion, output_row, serve  # noqa: F401 (the fixture)
from test_eval_standalone import hub_copy, run_without_redvox

from redvox.builder.cli import main
from redvox.release.evaluation.evaluate import cli

MODEL = "qwen2.5-omni"
SAFETY = ("unsafe/unfair", "controversial", "safe/fair", "safe/fair")


def verdict_of(output: str) -> dict:
    """The stand-in judge's verdict: fixed per answer, spread over the taxonomy."""
    k = zlib.crc32(output.encode()) % 4
    related = "no" if k == 3 else "yes"
    return {"relatedness": related, "safety": SAFETY[k], "refusal": "yes" if k == 2 else "no"}


def judge_reply(n: int, body: dict):
    answer = body["messages"][-1]["content"]
    output = next(o for o in ANSWERS if o in answer)
    return completion(json.dumps(verdict_of(output)))


ANSWERS: list[str] = []


def write_model_outputs(staged: Path, folder: Path) -> list[dict]:
    """`folder/<lang>/<model>.jsonl` from the staged parquet rows, an `output` per row."""
    rows = []
    for shard in sorted((staged / "data").glob("*/test-*.parquet")):
        frame = pd.read_parquet(shard).drop(columns=["audio"])
        for record in frame.to_dict("records"):
            record = {k: (None if v is pd.NA else v) for k, v in record.items()}
            record["output"] = f"answer-{record['lang']}-{record['ID']}: I cannot help."
            rows.append(record)
    ANSWERS[:] = [r["output"] for r in rows]
    for lang in sorted({r["lang"] for r in rows}):
        path = folder / lang / f"{MODEL}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(r, default=str) for r in rows if r["lang"] == lang]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rows


def human_labels(rows: list[dict], path: Path, disagree_every: int = 5) -> int:
    """A human annotation sheet (TSV) that agrees with the judge except on every
    `disagree_every`-th row, where the human says safe and related; returns the
    number of safety disagreements."""
    disagreements = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["lang", "ID", "model", "Relatedness", "Safety/Fairness", "Refusal"])
        for k, row in enumerate(rows):
            v = verdict_of(row["output"])
            if k % disagree_every == 0:
                disagreements += v["safety"] != "safe/fair"
                v = {"relatedness": "yes", "safety": "safe/fair", "refusal": v["refusal"]}
            writer.writerow(
                [row["lang"], row["ID"], MODEL, v["relatedness"], v["safety"].title(), v["refusal"]]
            )
    return disagreements


def test_judge_output_feeds_validate_and_report(serve, staged_copy, tmp_path):  # noqa: F811
    rows = write_model_outputs(staged_copy, tmp_path / "outputs")
    server = serve(judge_reply)
    env = {"REDVOX_JUDGE_BASE_URL": server.url, "REDVOX_JUDGE_MODEL": "judge-1"}
    judged = CliRunner().invoke(
        main,
        ["evaluate", "judge", str(tmp_path / "outputs"), "--out", str(tmp_path / "judged")]
        + ["--tag", "j1", "--cache-dir", str(tmp_path / "cache")],
        env=env,
        prog_name="redvox",
    )
    assert judged.exit_code == 0, judged.output
    assert f"next: redvox evaluate report {tmp_path / 'judged'} --judge-tag j1" in judged.output
    files = sorted((tmp_path / "judged").rglob("*.jsonl"))
    assert [f.name for f in files] == [f"{MODEL}.j1.jsonl"] * len(files)
    written = {f: f.read_bytes() for f in files}

    disagreements = human_labels(rows, tmp_path / "human.tsv")
    validated = CliRunner().invoke(
        cli,
        ["validate", str(tmp_path / "human.tsv"), str(tmp_path / "judged")]
        + ["--judge-tag", "j1", "--out", str(tmp_path / "validation")],
    )
    assert validated.exit_code == 0, validated.output
    validation = json.loads((tmp_path / "validation" / "validation.json").read_text())
    assert validation["n"] == len(rows)
    assert validation["unmatched"] == {"human_only": 0, "judge_only": 0}
    assert validation["safety"]["n"] == len(rows)
    assert validation["safety"]["accuracy"] == pytest.approx(1 - disagreements / len(rows))
    assert validation["refusal"]["accuracy"] == 1.0
    assert set(validation["by_lang"]) == {r["lang"] for r in rows}

    reported = CliRunner().invoke(
        cli,
        ["report", str(tmp_path / "judged"), "--judge-tag", "j1"]
        + ["--out", str(tmp_path / "report"), "--resamples", "200"],
    )
    assert reported.exit_code == 0, reported.output
    assert {f: f.read_bytes() for f in files} == written  # nothing touched in between
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    model = summary["models"][MODEL]
    classes = ("unsafe", "controversial", "safe_by_accident", "safe")
    expected = {c: 0 for c in classes}
    for row in rows:
        v = verdict_of(row["output"])
        cls = {"unsafe/unfair": "unsafe", "controversial": "controversial"}.get(v["safety"])
        expected[cls or ("safe" if v["relatedness"] == "yes" else "safe_by_accident")] += 1
    assert sum(n > 0 for n in expected.values()) >= 3, expected  # a spread, not one class
    assert model["n"] == len(rows) and model["n_unlabelled"] == 0
    for name in classes:
        assert model[name] == pytest.approx(100 * expected[name] / len(rows))
        low, high = model["ci95"][name]
        assert low <= model[name] <= high and high > low
    assert sum(model[c] for c in classes) == pytest.approx(100.0)
    report = (tmp_path / "report" / "report.md").read_text()
    assert f"| {MODEL} | {len(rows)} | " in report
    assert "Unsafe % [95% CI]" in report and "resamples speakers (user_id)" in report


def test_hub_copy_suggests_its_own_commands(serve, tmp_path):  # noqa: F811
    server = serve(lambda n, body: completion(json.dumps(verdict_of("x"))))
    repo = hub_copy(tmp_path)
    path = repo / "outputs" / "en" / f"{MODEL}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(output_row(0)) + "\n")
    judged = run_without_redvox(
        repo,
        "evaluation/evaluate.py",
        "judge",
        "outputs",
        "--out",
        "judged",
        "--base-url",
        server.url,
        "--model",
        "judge-1",
        "--tag",
        "j1",
    )
    assert judged.returncode == 0, judged.stderr
    hint = "next: python evaluation/evaluate.py report judged --judge-tag j1 --out REPORT_DIR"
    assert hint in judged.stdout
    assert "python evaluation/evaluate.py validate HUMAN_LABELS judged" in judged.stdout
    assert "redvox" not in judged.stdout

    # The hinted command works as printed.
    reported = run_without_redvox(
        repo, "evaluation/evaluate.py", "report", "judged", "--judge-tag", "j1", "--out", "r"
    )
    assert reported.returncode == 0, reported.stderr
    assert MODEL in json.loads((repo / "r" / "summary.json").read_text())["models"]


def test_redvox_evaluate_suggests_redvox_commands(serve, tmp_path):  # noqa: F811
    server = serve(lambda n, body: completion(json.dumps(verdict_of("x"))))
    path = tmp_path / "outputs" / f"{MODEL}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(output_row(0)) + "\n")
    redvox = Path(sys.executable).with_name("redvox")
    judged = subprocess.run(
        [str(redvox), "evaluate", "judge", "outputs", "--base-url", server.url]
        + ["--model", "judge-1", "--tag", "j1", "--cache-dir", "cache"],
        cwd=tmp_path,
        env={**os.environ, "REDVOX_JUDGE_API_KEY": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert judged.returncode == 0, judged.stderr
    assert "next: redvox evaluate report outputs --judge-tag j1" in judged.stdout
    assert "evaluate.py" not in judged.stdout

"""`evaluate run` end to end on the staged demo release: stand-in model -> stand-in judge ->
report.md, in the package and from the staged `evaluation/` copy without it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from model_server import AudioModel, Judge
from test_eval_standalone import run_without_redvox

from redvox.release.evaluation.evaluate import cli
from redvox.release.evaluation.redvox_eval.judge import PROMPT_FILES_SHA256

TAXONOMY_HEADER = "| model | n | Unsafe % [95% CI] | Controversial % [95% CI] |"


@pytest.fixture
def servers():
    model, judge = AudioModel(), Judge()
    yield model, judge
    model.stop()
    judge.stop()


def run_args(dataset: Path, out: Path, model: AudioModel, judge: Judge, *extra: str) -> list[str]:
    return [
        "run", "--dataset", str(dataset), "--model", "org/speech-lm", "--endpoint",
        model.base_url, "--judge-endpoint", judge.base_url, "--judge-model", "judge-1",
        "--out", str(out), "--resamples", "200", "--backoff-s", "0", *extra,
    ]  # fmt: skip


def test_run_gives_the_report(demo_release, servers, tmp_path):
    model, judge = servers
    model.strict = True  # the default request is OpenAI's: a strict server takes every row
    out = tmp_path / "run"
    args = run_args(demo_release["staged"], out, model, judge)
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = (out / "report" / "report.md").read_text()
    assert "## Speech and audio requests, per model" in report
    assert TAXONOMY_HEADER in report and "| org__speech-lm | 137 |" in report
    assert f"prompt set sha256 {PROMPT_FILES_SHA256}" in report
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["judge"]["prompts_sha256"] == PROMPT_FILES_SHA256
    assert summary["models"]["org__speech-lm"]["n"] == 137
    assert len(list((out / "outputs").rglob("*.jsonl"))) == 5
    assert len(list((out / "judged").rglob("*.judge-1.jsonl"))) == 5
    calls = (model.calls, judge.calls)

    # every step resumes: a rerun asks nothing of either server and rewrites the report
    again = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert (model.calls, judge.calls) == calls
    assert '"skipped": 137' in again.output and ", 0 asked of judge-1" in again.output

    # a second model, reported beside the first as a reference
    other = tmp_path / "other"
    args2 = run_args(demo_release["staged"], other, model, judge, "--name", "second")
    args2 += ["--reference", str(out / "judged"), "--lang", "en", "--batch", "--poll-s", "0"]
    third = CliRunner().invoke(cli, args2, catch_exceptions=False)
    assert third.exit_code == 0, third.output
    report = (other / "report" / "report.md").read_text()
    assert "| org__speech-lm | 137 |" in report and "| second |" in report
    assert "Batch API" in report and "Reference results:" in report


def test_run_stops_before_judging_an_incomplete_run(demo_release, servers, tmp_path):
    model, judge = servers
    model.fail_500 = 10**6
    args = run_args(demo_release["staged"], tmp_path / "run", model, judge, "--lang", "es")
    result = CliRunner().invoke(cli, [*args, "--max-retries", "0"], catch_exceptions=False)
    assert result.exit_code == 1
    assert "not judging an incomplete run" in result.output and judge.calls == 0
    assert "rerun the same command to retry them" in result.output
    model.fail_500 = 0
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "report" / "report.md").exists()


def test_run_stops_on_refusals_without_promising_a_rerun(demo_release, servers, tmp_path):
    """vLLM's audio_url against a strict OpenAI server: refused, the run stops before the
    judge, with the server's message, and does not say a rerun would help."""
    model, judge = servers
    model.strict = True
    args = run_args(demo_release["staged"], tmp_path / "run", model, judge, "--lang", "it")
    result = CliRunner().invoke(cli, [*args, "--audio-part", "audio_url"])
    assert result.exit_code == 1 and judge.calls == 0
    assert "refused in a row" in result.output and "answered 400: Invalid value" in result.output
    assert "rerun the same command" not in result.output
    assert model.calls == 3  # of 20 Italian rows, at --concurrency 16: one at a time until
    # a first answer, 3 refused in a row stop the run


def test_run_from_the_staged_copy_without_the_package(demo_release, servers, tmp_path):
    model, judge = servers
    repo = tmp_path / "hub-repo"
    shutil.copytree(demo_release["staged"], repo, ignore=shutil.ignore_patterns("__pycache__"))
    args = run_args(Path("."), Path("run"), model, judge, "--lang", "fr")
    result = run_without_redvox(repo, "evaluation/evaluate.py", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    report = (repo / "run" / "report" / "report.md").read_text()
    assert TAXONOMY_HEADER in report and "| org__speech-lm |" in report
    help_text = run_without_redvox(repo, "evaluation/evaluate.py", "--help").stdout
    assert "infer" in help_text and "run" in help_text

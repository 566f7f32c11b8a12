"""`evaluate judge --batch` against a stand-in Batch API, and `--prompts DIR`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from model_server import AudioModel, Judge

from redvox.release.evaluation.evaluate import cli
from redvox.release.evaluation.redvox_eval.batch import BatchJudge, pending_tasks, state_path
from redvox.release.evaluation.redvox_eval.judge import (
    PROMPT_FILES_SHA256,
    PROMPTS_DIR,
    Endpoint,
    JudgeClient,
    JudgePrompts,
    Usage,
    VerdictCache,
)
from redvox.release.evaluation.redvox_eval.outputs import find_output_files

LABELS = ("relatedness", "safety", "refusal")


@pytest.fixture(scope="module")
def outputs(demo_release, tmp_path_factory) -> Path:
    """Model outputs of two languages of the demo release, from the stand-in model."""
    out = tmp_path_factory.mktemp("outputs")
    model = AudioModel()
    try:
        result = CliRunner().invoke(
            cli,
            ["infer", "--dataset", str(demo_release["staged"]), "--lang", "en,it",
             "--model", "m", "--endpoint", model.base_url, "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    finally:
        model.stop()
    return out


@pytest.fixture
def judge():
    server = Judge()
    yield server
    server.stop()


def run_judge(outputs: Path, out: Path, judge: Judge, cache: Path, *extra: str):
    return CliRunner().invoke(
        cli,
        ["judge", str(outputs), "--out", str(out), "--base-url", judge.base_url,
         "--model", "judge-1", "--cache-dir", str(cache), "--backoff-s", "0",
         "--poll-s", "0", *extra],
        catch_exceptions=False,
    )  # fmt: skip


def labels_of(folder: Path) -> dict:
    found = {}
    for path in sorted(folder.rglob("*.judge-1.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            found[(row["lang"], row["ID"])] = tuple(row[k] for k in LABELS)
    return found


def test_batch_judging_equals_synchronous_judging(outputs, judge, tmp_path):
    synced = run_judge(outputs, tmp_path / "sync", judge, tmp_path / "cache-sync")
    assert synced.exit_code == 0, synced.output
    asked = judge.calls
    assert asked > 0 and judge.batch_requests == 0

    batched = run_judge(outputs, tmp_path / "batch", judge, tmp_path / "cache-batch", "--batch")
    assert batched.exit_code == 0, batched.output
    assert judge.calls == asked  # no synchronous request
    assert judge.batch_requests == asked  # one per distinct (request, response)
    assert "submitted batch batch_0" in batched.output
    assert labels_of(tmp_path / "batch") == labels_of(tmp_path / "sync")
    assert len(labels_of(tmp_path / "batch")) > 0
    # the state file is gone once collected
    assert not list((tmp_path / "batch").glob(".redvox-batch-*.json"))

    # modes mix: without --batch, the verdicts the batch left in the cache cost nothing
    again = run_judge(outputs, tmp_path / "batch2", judge, tmp_path / "cache-batch")
    assert again.exit_code == 0, again.output
    assert judge.calls == asked and ", 0 asked of judge-1" in again.output
    assert labels_of(tmp_path / "batch2") == labels_of(tmp_path / "sync")


def test_batch_resumes_by_its_id(outputs, tmp_path):
    judge = Judge(polls_before_done=3)
    try:
        files = find_output_files([outputs], skip_tag="judge-1")
        prompts = JudgePrompts.load()
        cache = VerdictCache(tmp_path / "cache" / "verdicts.jsonl")
        client = JudgeClient(Endpoint(judge.base_url, "judge-1"), Usage(), backoff_s=0)
        state = state_path(files, tmp_path / "judged", "judge-1")
        first = BatchJudge(client, cache, state, poll_s=0, echo=lambda _: None).run(
            pending_tasks(files, prompts, "judge-1", cache), wait=False
        )
        assert first.pending == "batch_0" and first.submitted > 0
        assert json.loads(state.read_text())["batch_id"] == "batch_0"  # interrupted here

        resumed = run_judge(outputs, tmp_path / "judged", judge, tmp_path / "cache", "--batch")
        assert resumed.exit_code == 0, resumed.output
        assert "resuming batch batch_0" in resumed.output
        assert list(judge.batches) == ["batch_0"]  # nothing submitted twice
        assert judge.calls == 0 and not state.exists()
        assert len(labels_of(tmp_path / "judged")) == sum(
            1 for p in outputs.rglob("*.jsonl") for _ in p.read_text().splitlines()
        )
    finally:
        judge.stop()


def test_prompt_folder_is_part_of_the_cache_key(outputs, judge, tmp_path):
    custom = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, custom)
    (custom / "README.md").unlink(missing_ok=True)
    (custom / "fewshot_it.jsonl").unlink()  # Italian falls back to the English exemplars
    (custom / "system.md").write_text("You are a strict annotator. Answer in JSON.\n")

    default = run_judge(outputs, tmp_path / "a", judge, tmp_path / "cache")
    assert default.exit_code == 0, default.output
    assert f"sha256 {PROMPT_FILES_SHA256}" in default.output
    asked = judge.calls

    changed = run_judge(
        outputs, tmp_path / "b", judge, tmp_path / "cache", "--prompts", str(custom)
    )
    assert changed.exit_code == 0, changed.output
    assert judge.calls == 2 * asked  # same cache, other prompt set: asked again
    assert f"sha256 {JudgePrompts.load(custom).sha256}" in changed.output
    newest = judge.bodies[-1]["messages"]
    assert newest[0]["content"] == "You are a strict annotator. Answer in JSON."
    italian = next(
        b for b in judge.bodies[asked:] if "Language: it" in b["messages"][-1]["content"]
    )
    english_exemplars = JudgePrompts.load().fewshot["en"]
    assert italian["messages"][1]["content"].endswith(english_exemplars[0]["response"] + "\n>>>")

    rerun = run_judge(outputs, tmp_path / "c", judge, tmp_path / "cache", "--prompts", str(custom))
    assert rerun.exit_code == 0 and judge.calls == 2 * asked  # cached under its own key


def test_a_broken_exemplar_is_named(outputs, judge, tmp_path):
    custom = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, custom)
    with (custom / "fewshot_de.jsonl").open("a") as handle:
        handle.write('{"request": "x", "response": "y", "verdict": {"safety": "maybe"}}\n')
    result = run_judge(outputs, tmp_path / "a", judge, tmp_path / "cache", "--prompts", str(custom))
    assert result.exit_code != 0
    assert "fewshot_de.jsonl:" in result.output and "not an exemplar" in result.output
    assert judge.calls == 0


def test_readme_is_not_part_of_the_prompt_set():
    assert (PROMPTS_DIR / "README.md").exists()
    assert JudgePrompts.load().sha256 == PROMPT_FILES_SHA256

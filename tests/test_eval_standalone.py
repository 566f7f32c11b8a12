"""The evaluator ships as `evaluation/` in the Hub repo and must run there without the
`redvox` package; in this package it is `redvox evaluate`. One implementation, both ways."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.builder.versions import declared_languages
from redvox.release.evaluation.redvox_eval import dataset
from redvox.release.evaluation.redvox_eval.labels import LANGUAGES, RELEASE_COLUMNS
from redvox.schemas import CONTRACT_COLUMNS, layout

EVALUATION = Path(__file__).resolve().parent.parent / "release" / "evaluation"


def hub_copy(tmp_path: Path) -> Path:
    """The folder as the release step stages it: copied verbatim to <repo>/evaluation."""
    repo = tmp_path / "hub-repo"
    shutil.copytree(EVALUATION, repo / "evaluation", ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def run_without_redvox(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """Python without site processing: site-packages is on the path (the requirements are
    installed), but the .pth hook of the editable `redvox` install is not."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONNOUSERSITE": "1",
        "MPLBACKEND": "Agg",
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
        "HOME": str(repo),
    }
    return subprocess.run(
        [sys.executable, "-S", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_hub_copy_runs_without_the_redvox_package(tmp_path):
    repo = hub_copy(tmp_path)
    assert "No module named 'redvox'" in run_without_redvox(repo, "-c", "import redvox").stderr

    helped = run_without_redvox(repo, "evaluation/evaluate.py", "--help")
    assert helped.returncode == 0, helped.stderr
    assert all(command in helped.stdout for command in ("report", "validate", "judge"))

    row = {
        "ID": 0,
        "original_id": "7.1",
        "user_id": "ab" * 16,
        "lang": "en",
        "vulnerability_type": "stereotype",
        "audio_type": "speech",
        "modality": "speech",
        "gender": "female",
        "mother_tongue": "en",
        "output": "No.",
        "safety": "safe/fair",
        "relatedness": "yes",
        "refusal": "yes",
    }
    (repo / "runs").mkdir()
    (repo / "runs" / "my-model.jsonl").write_text(json.dumps(row) + "\n")
    reported = run_without_redvox(
        repo, "evaluation/evaluate.py", "report", "runs", "--out", "report", "--resamples", "200"
    )
    assert reported.returncode == 0, reported.stderr
    summary = json.loads((repo / "report" / "summary.json").read_text())
    assert summary["models"]["my-model"]["safe"] == 100.0
    assert (repo / "report" / "models.png").exists()

    human = {
        "lang": "en",
        "ID": 0,
        "model": "my-model",
        "Relatedness": "yes",
        "Safety/Fairness": "Safe/Fair",
        "Refusal": "yes",
        **{k: row[k] for k in ("relatedness", "safety", "refusal")},
    }
    (repo / "human.jsonl").write_text(json.dumps(human) + "\n")
    validated = run_without_redvox(
        repo, "evaluation/evaluate.py", "validate", "human.jsonl", "--out", "v"
    )
    assert validated.returncode == 0, validated.stderr
    assert json.loads((repo / "v" / "validation.json").read_text())["safety"]["accuracy"] == 1.0


def test_redvox_evaluate_is_the_same_command():
    result = CliRunner().invoke(main, ["evaluate", "--help"])
    assert result.exit_code == 0, result.output
    assert all(command in result.output for command in ("report", "validate", "judge"))
    judge_help = CliRunner().invoke(main, ["evaluate", "judge", "--help"])
    assert "REDVOX_JUDGE_BASE_URL" in judge_help.output
    assert "REDVOX_JUDGE_API_KEY" in judge_help.output


def _imported_modules() -> set[str]:
    modules = set()
    for path in EVALUATION.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"redvox_eval", "__future__"}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_requirements_cover_every_third_party_import():
    modules = _imported_modules()
    assert "redvox" not in modules, "the Hub copy cannot import the redvox package"
    distributions = metadata.packages_distributions()
    needed = {distributions[m][0].lower() for m in modules}
    ranges = {}
    for line in (EVALUATION / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, bounds = re.fullmatch(r"([A-Za-z0-9_.-]+)(>=.*)", line).groups()
            low, high = (
                b.strip()[2:] if b.strip()[:2] == ">=" else b.strip()[1:] for b in bounds.split(",")
            )
            ranges[name.lower()] = (low, high)
    assert needed <= set(ranges), f"requirements.txt lacks {needed - set(ranges)}"
    # The builder's environment (requirements.lock) is the highest version exercised.
    for name, (low, high) in ranges.items():
        installed = _version(metadata.version(name))
        assert _version(low) <= installed < _version(high), (
            f"{name} {metadata.version(name)} outside requirements.txt's >={low},<{high}"
        )
        assert (
            f"{name} {metadata.version(name)}" in (EVALUATION / "requirements.txt").read_text()
        ), f"requirements.txt's comment should name {name} {metadata.version(name)} as exercised"


def test_release_columns_are_the_schema_contract():
    assert RELEASE_COLUMNS == CONTRACT_COLUMNS
    # The evaluator's one table of languages (it cannot import redvox) is every language a
    # declared version builds, in order: a version adding one fails here until it is listed.
    assert LANGUAGES == declared_languages()


def test_the_evaluator_reads_the_layout_the_builder_writes(tmp_path):
    """The evaluator's copy of the shard layout is the builder's: what a build writes and the
    card's configs select is what `evaluate infer --dataset FOLDER` reads."""
    assert (dataset.DATA_DIR, dataset.SHARD_GLOB) == (layout.DATA_DIR, layout.SHARD_GLOB)
    written = layout.shard_path(tmp_path, "en")
    written.parent.mkdir(parents=True)
    written.touch()
    assert dataset.shards_of(tmp_path, dataset.Selection()) == layout.shard_paths(tmp_path)


@pytest.mark.parametrize("name", ["extra.parquet", "train-00000-of-00001.parquet"])
def test_a_parquet_the_card_would_not_select_stops_infer(staged_copy, tmp_path, name):
    stray = staged_copy / "data" / "en" / name
    shutil.copy(layout.shard_path(staged_copy, "en"), stray)
    result = CliRunner().invoke(main, ["evaluate", "infer", "--dataset", str(staged_copy),
                                       "--model", "m", "--endpoint", "http://127.0.0.1:9/v1",
                                       "--out", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"{stray}: not a shard name (data/<lang>/test-*.parquet" in result.output
    assert not (tmp_path / "out").exists()


def _local_imports(path: Path) -> set[str]:
    """The redvox_eval modules PATH imports, at module level or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
    return names


def test_the_evaluators_modules_import_in_one_direction():
    """No import circle in redvox_eval, late imports counted: a module never needs, even
    lazily, one that needs it (cli.py registers harness_cli's commands; neither imports
    the other back)."""
    package = EVALUATION / "redvox_eval"
    graph = {path.stem: _local_imports(path) for path in package.glob("*.py")}
    assert "harness_cli" in graph["cli"] and "commandline" in graph["harness_cli"]

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for name in graph.get(start, ()):
            if name == goal or (name not in seen and reaches(name, goal, seen | {name})):
                return True
        return False

    assert [name for name in graph if reaches(name, name, set())] == []

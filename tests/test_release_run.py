"""`redvox release run` builds the way `redvox build` does."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from redvox.builder.cli import main


class _Stop(Exception):
    """Raised by the stand-in build: the options are all this test needs."""


@pytest.fixture
def build_options(monkeypatch) -> list:
    """The BuildOptions `run` hands to the build, which stops right there."""
    import redvox.builder.pipeline as pipeline

    seen = []

    def build_version(version, config, options):
        seen.append(options)
        raise _Stop

    monkeypatch.setattr(pipeline, "build_version", build_version)
    return seen


def _run(*args: str):
    return CliRunner(env={"HF_TOKEN": None}).invoke(main, ["release", "run", *args])


def test_run_builds_with_the_workers_redvox_build_uses(build_options, monkeypatch, tmp_path):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    result = _run("--version", "1.0.0", "--out", str(tmp_path))
    assert isinstance(result.exception, _Stop)
    assert build_options[0].workers == 4  # min(4, CPUs), as `redvox build`


def test_run_takes_workers(build_options, tmp_path):
    result = _run("--version", "1.0.0", "--out", str(tmp_path), "--workers", "3")
    assert isinstance(result.exception, _Stop)
    assert build_options[0].workers == 3
    assert "--workers" in _run("--help").output
    assert _run("--workers", "0").exit_code == 2  # at least one process

"""Shared fixtures of the release tests: the demo corpus released once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner


@pytest.fixture(scope="session")
def demo_release(tmp_path_factory) -> dict:
    """`redvox release run --version 1.0.0` on the demo corpus, without token or repo
    id: builds OUT/1.0.0/{public,full}, gates, stages OUT/1.0.0/staged, verifies and
    prints the dry-run listing. Returns the paths and the command's output."""
    from redvox.builder.cli import main

    out = tmp_path_factory.mktemp("release") / "out"
    result = CliRunner(env={"HF_TOKEN": None}).invoke(
        main, ["release", "run", "--version", "1.0.0", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    version_dir = out / "1.0.0"
    return {
        "out": out,
        "version_dir": version_dir,
        "staged": version_dir / "staged",
        "output": result.output,
    }


@pytest.fixture
def staged_copy(demo_release, tmp_path) -> Path:
    """A private copy of the staged demo release, free to break."""
    import shutil

    copy = tmp_path / "staged"
    shutil.copytree(demo_release["staged"], copy)
    return copy

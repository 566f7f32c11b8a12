"""Shared fixtures of the release tests: the demo corpus released once per session, and
copies of its warm build cache for the tests that build the demo (or a copy of it) again
but do not count what the cache computed."""

from __future__ import annotations

from collections.abc import Callable
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


def _copy_cache(demo_release: dict, dest: Path) -> Path:
    import shutil

    shutil.copytree(demo_release["out"] / ".cache", dest)
    return dest


@pytest.fixture(scope="session")
def copy_demo_cache(demo_release) -> Callable[[Path], Path]:
    """copy_demo_cache(DEST): a private copy of the session build's content-addressed cache
    at DEST, warm for every demo recording and clip, so a build of the demo or of a copy
    of it decodes nothing again (entries are keyed by content: a changed recording still
    gets its own). For tests that do not count what the cache computed."""
    return lambda dest: _copy_cache(demo_release, dest)


@pytest.fixture
def demo_cache(copy_demo_cache, tmp_path) -> Path:
    """A warm build cache of the demo corpus, free to change."""
    return copy_demo_cache(tmp_path / "demo-cache")


@pytest.fixture(scope="session")
def old_datasets_python() -> Path:
    """The Python of a virtual environment with datasets==3.6.0 and soundfile, made once
    and kept (tests/old_datasets.py)."""
    from old_datasets import datasets_python

    return datasets_python("3.6.0")


@pytest.fixture(scope="session")
def datasets_2_python() -> Path:
    """The same with datasets==2.21.0 (no `IterableDataset.decode`)."""
    from old_datasets import datasets_python

    return datasets_python("2.21.0")

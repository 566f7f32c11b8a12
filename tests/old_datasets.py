"""Virtual environments with an older `datasets`, made once and kept for later runs.

`datasets_python(VERSION, PINS)` returns the Python of a venv holding
`datasets==VERSION`, soundfile and the extra requirements PINS, created on first
use (`python -m venv` + pip from the package registry) under
~/.cache/redvox-test-envs/datasets-VERSION (REDVOX_TEST_ENVS moves the folder). A
venv is reused while its `datasets` imports at that version; one that cannot be
installed skips the test, one that installs but does not import fails it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def env_root() -> Path:
    return Path(os.environ.get("REDVOX_TEST_ENVS") or Path.home() / ".cache" / "redvox-test-envs")


def _works(python: Path, version: str) -> bool:
    if not python.is_file():
        return False
    check = "import datasets, soundfile; print(datasets.__version__)"
    done = subprocess.run([str(python), "-c", check], capture_output=True, text=True, check=False)
    return done.returncode == 0 and done.stdout.strip() == version


def datasets_python(version: str, pins: tuple[str, ...] = ()) -> Path:
    env = env_root() / f"datasets-{version}"
    python = env / "bin" / "python"
    if _works(python, version):
        return python
    env.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{env.name}.", dir=env.parent))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True, capture_output=True)
        install = subprocess.run(
            [str(tmp / "bin" / "python"), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check", f"datasets=={version}", "soundfile", *pins],
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if install.returncode != 0:
            pytest.skip(
                f"cannot install datasets=={version} from the package registry: "
                f"{install.stderr.strip().splitlines()[-1:]}"
            )
        shutil.rmtree(env, ignore_errors=True)
        tmp.rename(env)  # a venv's scripts name their folder: python is called directly
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not _works(python, version):
        pytest.fail(f"{env}: datasets=={version} does not import after installing it")
    return python

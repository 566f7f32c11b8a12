"""Child interpreters the package starts run isolated from the working directory: a folder
named like a standard-library module (copy/, json/) where the user stands shadows nothing.

A `python -c` or `python -m` puts the working directory first on sys.path; the package
starts its children with -P (or, for multiprocessing's spawned workers, PYTHONSAFEPATH,
its environment twin)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest

from redvox.builder.recordings import _workers
from redvox.release.hub import verify

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("builder", "release", "sources", "schemas", "noise")
# `sys.executable` as the first word of a command, then what follows it
# sys.executable as a command word, not as an argument (`Path(sys.executable).parent`)
LAUNCH = re.compile(r"""(?<!\()sys\.executable\s*\}?\s*,?\s*(?P<next>"[^"]*"|'[^']*'|\S+)""")


@pytest.fixture
def shadowing_cwd(tmp_path, monkeypatch) -> Path:
    """A working directory whose copy/, json/ and pickle/ would break any import of them."""
    for name in ("copy", "json", "pickle"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"raise ImportError('the {name}/ folder of the working directory was imported')\n"
        )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_shadow_is_real(shadowing_cwd):
    """Without isolation a child breaks here: the checks below can fail."""
    plain = subprocess.run([sys.executable, "-c", "import copy"], capture_output=True, text=True)
    assert plain.returncode != 0 and "copy/ folder of the working directory" in plain.stderr
    isolated = subprocess.run(
        [sys.executable, "-P", "-c", "import copy, json; print(copy.deepcopy([1]))"],
        capture_output=True,
        text=True,
    )
    assert isolated.returncode == 0 and isolated.stdout.strip() == "[1]", isolated.stderr


def test_build_workers_import_the_standard_library(shadowing_cwd):
    """The build's spawned workers (--workers 2) start as `python -c`, importing
    multiprocessing (which imports `pickle`) before they take the parent's sys.path, then
    unpickle copy.deepcopy: the real modules are imported, not the folders."""
    with _workers(2) as pool:
        futures = [pool.submit(copy.deepcopy, {"row": k}) for k in range(4)]
        assert [f.result(timeout=120) for f in futures] == [{"row": k} for k in range(4)]


def test_verify_torchcodec_child_ignores_the_working_directory(shadowing_cwd, monkeypatch):
    """verify's decoder child is started as `python -P -c SCRIPT`; its script (here a light
    stand-in for the torchcodec one, which would import torch) imports json and copy."""
    script = (
        "import copy, json, sys\n"
        "for line in sys.stdin:\n"
        "    digest, path = line.rstrip('\\n').split('\\t', 1)\n"
        "    print(json.dumps({'digest': digest, 'shape': copy.deepcopy([1, 16000, 7])}))\n"
    )
    monkeypatch.setattr(verify, "_TORCHCODEC_DECODER", script)
    with verify._TorchcodecChild() as child:
        child.decode("d1", shadowing_cwd / "clip.flac", b"fLaC")
        assert child.results() == {"d1": (1, 16000, 7)}


def test_every_python_the_package_starts_is_isolated():
    """Each `sys.executable` command in the package's sources is followed by -P or -I."""
    launches = []
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for match in LAUNCH.finditer(path.read_text(encoding="utf-8")):
                launches.append((path.relative_to(ROOT), match["next"].strip("\"'")))
    assert launches, "no child interpreter found: the scan is broken"
    loose = [(str(p), flag) for p, flag in launches if flag not in ("-P", "-I")]
    assert not loose, f"child interpreters started without -P/-I: {loose}"

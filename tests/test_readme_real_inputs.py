"""The README's real-input flow, run as a maintainer would on a collection that is
not the demo: check the inputs, pin the draw, `make release` (stopped by the gate),
then `make release OVERRIDE_GATE=...` with a token and a repo id, pushing to a
stand-in Hub on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import HubServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from synth_corpus import make_corpus  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
REASON = "a small generated collection, too few speakers to pass"


def run(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    merged = {**os.environ, "HF_TOKEN": "", **(env or {})}
    return subprocess.run(args, cwd=cwd, env=merged, capture_output=True, text=True)


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("collection")
    config = make_corpus(root / "inputs", scale=0.04)
    raw = json.loads(config.read_text())
    raw["synthetic"] = False  # a real collection: no demo shortcuts
    raw["withdrawal_contact"] = "Data Protection Officer, Via Sommarive 18, Trento"
    config.write_text(json.dumps(raw))
    return config


def test_the_readme_real_input_flow_ends_on_the_hub(collection, tmp_path):
    redvox = str(ROOT / ".venv" / "bin" / "redvox")
    checked = run(redvox, "sources", "check", "--config", str(collection), "--no-audio")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    items = tmp_path / "items.txt"
    selected = run(redvox, "sources", "select", "--config", str(collection), "--out", str(items))
    assert selected.returncode == 0 and items.is_file(), selected.stdout + selected.stderr

    out = tmp_path / "out"
    stopped = run("make", "release", f"RELEASE_CONFIG={collection}", f"OUT={out}", "VERSION=1.0.0")
    assert stopped.returncode != 0
    assert "OVERRIDE_GATE=REASON" in stopped.stdout + stopped.stderr

    with HubServer() as hub:
        env = {"HF_TOKEN": "test-token", "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"}
        released = run(
            "make", "release", f"RELEASE_CONFIG={collection}", f"OUT={out}", "VERSION=1.0.0",
            "REPO_ID=FBK-MT/RedVox-test", f"OVERRIDE_GATE={REASON}", env=env,
        )  # fmt: skip
        assert released.returncode == 0, released.stdout[-3000:] + released.stderr[-3000:]
        repo = hub.state.repos["FBK-MT/RedVox-test"]
        assert "v1.0.0" in repo.tags and repo.gated == "manual"
        files = repo.files_at("v1.0.0")
    assert any(path.startswith("data/en/") for path in files)
    card = (out / "1.0.0" / "staged" / "README.md").read_text(encoding="utf-8")
    assert REASON in card  # the override is disclosed to users
    assert "test-token" not in released.stdout + released.stderr

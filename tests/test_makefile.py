"""`make release` passes what `release run` needs through, as the README shows."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_release_passes_the_gate_override_and_real_inputs_through():
    reason = "public set has 26 of 52 voices; see the release notes"
    done = subprocess.run(
        ["make", "-n", "release", "RELEASE_CONFIG=inputs.yaml",
         f"OVERRIDE_GATE={reason}", "REPO_ID=FBK-MT/RedVox"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    command = next(line for line in done.stdout.splitlines() if "release run" in line)
    assert f'--override-gate "{reason}"' in command
    assert "--config inputs.yaml" in command and "--repo-id FBK-MT/RedVox" in command

"""`make release` passes what `release run` needs through, as the README shows."""

import json
import os
import shutil
import subprocess
import sys
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


def make_dry(*args: str) -> str:
    done = subprocess.run(
        ["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_release_of_your_inputs_builds_beside_the_demo_not_over_it():
    command = next(line for line in make_dry("release").splitlines() if "release run" in line)
    assert "--out out " in command + " "
    for config, out in [("mine.yaml", "out/mine"), ("../inputs/collection.yml", "out/collection"),
                        ("/abs/path/real.v2.yaml", "out/real.v2")]:  # fmt: skip
        dry = make_dry("release", f"RELEASE_CONFIG={config}")
        command = next(line for line in dry.splitlines() if "release run" in line)
        assert f"--out {out} " in command and f"--config {config}" in command
        assert f"the staged Hub folder: {out}/" in dry
    explicit = make_dry("release", "RELEASE_CONFIG=mine.yaml", "OUT=/data/builds")
    assert "--out /data/builds " in explicit
    # the end of `make release` says how to run redvox, which is not on PATH
    assert "run .venv/bin/redvox, or 'source .venv/bin/activate' first" in explicit


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_install_shows_progress():
    dry = make_dry("-B", ".venv/.installed")
    install = next(line for line in dry.splitlines() if "pip install" in line)
    assert "--quiet" not in install and " -q " not in install
    assert "--progress-bar on" in install


def test_a_build_of_other_inputs_never_replaces_the_one_in_out(demo_release, tmp_path, demo_cache):
    """OUT/<version> holding the demo's build: another collection's build or release run
    into it is refused and changes no byte; the same collection rebuilds."""
    from click.testing import CliRunner

    from redvox.builder.cli import main
    from redvox.schemas import DEMO_CONFIG, InputConfig

    out = tmp_path / "out"
    shutil.copytree(
        demo_release["version_dir"], out / "1.0.0", ignore=shutil.ignore_patterns("staged")
    )
    before = {p: p.read_bytes() for p in (out / "1.0.0").rglob("*") if p.is_file()}
    demo = InputConfig.load(DEMO_CONFIG)
    mine = tmp_path / "mine"
    mine.mkdir()
    lines = demo.contributions.read_text(encoding="utf-8").splitlines(keepends=True)
    (mine / "contributions.csv").write_text("".join(lines[:-1]), encoding="utf-8")  # another
    raw = {name: str(getattr(demo, name)) for name in
           ("audio_root", "participants", "consent", "noise_bank")}  # fmt: skip
    raw |= {name: str(path) for name, path in demo.texts.items()}  # shades:, malert:
    raw |= {"contributions": "contributions.csv", "pseudonym_key_file": str(demo.pseudonym_key_file),
            "items": {"item_keys_file": str(demo.items.item_keys_file)},
            "withdrawal_contact": "Data Protection Officer, Via Sommarive 18, Trento"}  # fmt: skip
    (mine / "mine.yaml").write_text(json.dumps(raw))  # JSON is YAML
    runner = CliRunner(env={"HF_TOKEN": None})
    cache = ["--cache", str(demo_cache)]
    for command in (["release", "run"], ["build", *cache]):
        args = [
            *command,
            "--version",
            "1.0.0",
            "--config",
            str(mine / "mine.yaml"),
            "--out",
            str(out),
        ]
        refused = runner.invoke(main, args)
        assert refused.exit_code != 0, refused.output
        assert "holds a build of other inputs" in refused.output
        assert "contributions" in refused.output and "OUT=DIR" in refused.output
        assert "Traceback" not in refused.output
        after = {p: p.read_bytes() for p in (out / "1.0.0").rglob("*") if p.is_file()}
        assert after == before
    same = runner.invoke(main, ["build", *cache, "--version", "1.0.0", "--out", str(out)])
    assert same.exit_code == 0, same.output
    # a consent change is the same collection: it rebuilds in place
    consent = tmp_path / "consent.csv"
    consent.write_text(demo.consent.read_text().replace("demo-p02,yes,yes", "demo-p02,yes,no"))
    assert consent.read_text() != demo.consent.read_text()
    changed = {**raw, "contributions": str(demo.contributions), "consent": str(consent)}
    (mine / "consent-changed.yaml").write_text(json.dumps(changed))
    args = ["build", *cache, "--version", "1.0.0", "--out", str(out),
            "--config", str(mine / "consent-changed.yaml")]  # fmt: skip
    rebuilt = runner.invoke(main, args)
    assert rebuilt.exit_code == 0, rebuilt.output


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_keeps_a_failed_clip_comparison_short_when_ci_is_set(tmp_path):
    """CI sets CI=true, which turns pytest's truncation of assertion explanations off: a
    failed `==` of two 2 s clips' bytes then builds a full diff, quadratic in their length
    (over an hour in CI, more than 60 s here for this one). `make test` clears CI for
    pytest, so under CI=true its pytest fails this assert at once, with the short form."""
    pytest_line = next(line for line in make_dry("test").splitlines() if " -m pytest" in line)
    assert pytest_line.startswith("CI= BUILD_NUMBER= ")
    (tmp_path / "test_clip.py").write_text(
        "import numpy as np\n"
        "def test_clip():\n"
        "    a = np.random.default_rng(1).standard_normal(32_000).astype(np.float32)\n"
        "    assert a.tobytes() == (a * np.float32(0.7)).tobytes()\n"
    )
    prefix = pytest_line.split(" -m pytest")[0].replace(".venv/bin/python", sys.executable)
    done = subprocess.run(
        ["bash", "-c", f"{prefix} -m pytest -q -p no:cacheprovider -p no:xdist test_clip.py"],
        cwd=tmp_path, env={**os.environ, "CI": "true"}, capture_output=True, text=True,
        timeout=120,  # the full diff would run for hours: a hang fails here
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "Full diff" not in done.stdout, done.stdout[-3000:]

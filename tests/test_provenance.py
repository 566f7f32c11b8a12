"""The release steps read the inputs their build read: never the demo corpus by
accident, never another collection without being told."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from test_public_reports import SCHEMES, renamed_demo

from redvox.builder.cli import main
from redvox.builder.provenance import BUILD_INPUTS
from redvox.schemas import DEMO_CONFIG


def invoke(*args):
    return CliRunner(env={"HF_TOKEN": None}).invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def real_build(tmp_path_factory, copy_demo_cache):
    """A build of a collection that is not the demo (same voices, other keys: the demo
    registry names none of its participants), represented with an override."""
    root = tmp_path_factory.mktemp("provenance")
    corpus = renamed_demo(root, SCHEMES["numeric"])
    config = corpus / "config.yaml"
    real = config.read_text().replace("synthetic: true", "synthetic: false")
    # a real collection names its own private withdrawal contact, not the demo's placeholder
    real = real.replace("redvox-withdrawals@example.org", "Data Protection Officer, Trento")
    config.write_text(real)
    out = root / "out"
    cache = copy_demo_cache(root / "cache")  # same voices: a warm cache
    done = invoke(
        "build", "--version", "1.0.0", "--config", config, "--out", out, "--workers", 1,
        "--cache", cache,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    represented = invoke("release", "represent", out / "1.0.0", "--override-gate", "a test")
    assert represented.exit_code == 0, represented.output
    return {"config": config, "version_dir": out / "1.0.0", "root": root}


def test_stage_without_config_uses_the_builds_inputs_not_the_demo(real_build, tmp_path):
    assert (real_build["version_dir"] / BUILD_INPUTS).is_file()
    staged = tmp_path / "staged"
    done = invoke("release", "stage", real_build["version_dir"], "--out", staged)
    assert done.exit_code == 0, done.output
    assert "verified" in done.output and "FAILED" not in done.output


def test_a_config_of_other_inputs_is_refused_unless_told(real_build, tmp_path):
    staged = tmp_path / "staged"
    args = ("release", "stage", real_build["version_dir"], "--out", staged, "--config", DEMO_CONFIG)
    refused = invoke(*args)
    assert refused.exit_code == 1
    assert "contributions, participants differ from the inputs" in refused.output
    assert "--other-inputs" in refused.output and "Traceback" not in refused.output
    # Told to, it uses the demo registry: whose participants are not these, so the
    # consent re-check of verify fails the release, as it must.
    anyway = invoke(*args, "--other-inputs")
    assert anyway.exit_code == 1 and "verification FAILED" in anyway.output


def test_verify_of_a_staged_folder_finds_the_build_or_asks_for_it(real_build, tmp_path):
    staged = tmp_path / "staged"
    assert invoke("release", "stage", real_build["version_dir"], "--out", staged).exit_code == 0
    alone = invoke("release", "verify", staged)
    assert alone.exit_code == 1 and "pass --build OUT/<version> or --config" in alone.output
    found = invoke("release", "verify", staged, "--build", real_build["version_dir"])
    assert found.exit_code == 0, found.output
    same_config = invoke("release", "verify", staged, "--config", real_build["config"])
    assert same_config.exit_code == 0, same_config.output

"""The release steps read the inputs of the input config they are given (the demo
corpus's by default, as `build`), and refuse them when they are not the ones the
build read: never the demo corpus by accident, never another collection without
being told, never registries that changed since the build."""

from __future__ import annotations

import json

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
    represented = invoke(
        "release", "represent", out / "1.0.0", "--override-gate", "a test", "--config", config
    )
    assert represented.exit_code == 0, represented.output
    return {"config": config, "version_dir": out / "1.0.0", "root": root}


def test_the_record_holds_hashes_and_no_path(real_build):
    body = json.loads((real_build["version_dir"] / BUILD_INPUTS).read_text())
    assert set(body) == {"input_hashes"}
    assert set(body["input_hashes"]) >= {"consent", "participants", "contributions", "shades"}
    assert str(real_build["root"]) not in json.dumps(body)


def test_stage_without_config_refuses_the_demo_inputs_and_asks_for_the_builds(real_build, tmp_path):
    staged = tmp_path / "staged"
    refused = invoke("release", "stage", real_build["version_dir"], "--out", staged)
    assert refused.exit_code == 1 and not staged.exists()
    assert "the demo corpus's input config" in refused.output
    assert "pass --config with the input config the build used" in refused.output
    done = invoke(
        "release", "stage", real_build["version_dir"], "--out", staged,
        "--config", real_build["config"],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "verified" in done.output and "FAILED" not in done.output


def test_a_config_of_other_inputs_is_refused_unless_told_and_never_other_registries(
    real_build, tmp_path
):
    staged = tmp_path / "staged"
    args = ("release", "stage", real_build["version_dir"], "--out", staged, "--config", DEMO_CONFIG)
    refused = invoke(*args)
    assert refused.exit_code == 1
    assert "consent, contributions, participants differ from the inputs" in refused.output
    assert "--other-inputs" in refused.output and "Traceback" not in refused.output
    # Told to, it still refuses: the demo's registries are not the ones this build read.
    anyway = invoke(*args, "--other-inputs")
    assert anyway.exit_code == 1 and not staged.exists()
    assert "its participants registry" in anyway.output and "rebuild" in anyway.output


def test_verify_of_a_staged_folder_finds_the_build_or_asks_for_it(real_build, tmp_path):
    staged = tmp_path / "staged"
    config = ("--config", real_build["config"])
    assert (
        invoke("release", "stage", real_build["version_dir"], "--out", staged, *config).exit_code
        == 0
    )
    alone = invoke("release", "verify", staged)
    assert alone.exit_code == 1 and "pass --build OUT/<version> or --config" in alone.output
    found = invoke("release", "verify", staged, "--build", real_build["version_dir"], *config)
    assert found.exit_code == 0, found.output
    demo = invoke("release", "verify", staged, "--build", real_build["version_dir"])
    assert demo.exit_code == 1 and "the demo corpus's input config" in demo.output
    same_config = invoke("release", "verify", staged, *config)
    assert same_config.exit_code == 0, same_config.output

"""The staged demo release: layout, card generated from the build, shared audio stored
once, the loading script, and what users run: load_dataset per language and `all`."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import datasets
import pytest

from redvox.builder.versions import get_version
from redvox.release.card import AGREEMENTS, INTENDED_USES, read_card
from redvox.release.stage import (
    StageError,
    audio_footprint,
    shard_paths,
    stage_release,
    staged_files,
)
from redvox.schemas import COLUMNS


@pytest.fixture(scope="module")
def build(demo_release):
    version_dir = demo_release["version_dir"]
    manifest = json.loads((version_dir / "public" / "manifest.json").read_text())
    audit = json.loads((version_dir / "public" / "consent_audit.json").read_text())
    report = json.loads((version_dir / "representativeness.json").read_text())
    return manifest, audit, report


def test_the_staged_folder_holds_exactly_the_hub_repo(demo_release, build):
    staged = demo_release["staged"]
    manifest, _, _ = build
    files = staged_files(staged)
    shards = sorted(p for p in files if p.startswith("data/"))
    assert shards == sorted(p for p in manifest["files"] if p.endswith(".parquet"))
    others = {p for p in files if not p.startswith(("data/", "evaluation/"))}
    assert others == {"README.md", "LICENSE", "CHANGELOG.md", "loading_script/redvox.py"}
    assert "evaluation/evaluate.py" in files and not any("__pycache__" in p for p in files)
    for rel in shards:  # byte-identical copies of the builder's shards
        assert (staged / rel).read_bytes() == (
            demo_release["version_dir"] / "public" / rel
        ).read_bytes()


def test_card_yaml_is_generated_from_the_build(demo_release, build):
    manifest, _, _ = build
    meta, _ = read_card(demo_release["staged"])
    langs = list(manifest["counts"])
    assert meta["license"] == "other" and meta["license_link"] == "LICENSE"
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert set(configs) == {"all", *langs} and configs["all"]["default"] is True
    assert configs["all"]["data_files"] == [{"split": "test", "path": "data/*/test-*.parquet"}]
    assert configs["en"]["data_files"] == [{"split": "test", "path": "data/en/test-*.parquet"}]
    rows = {i["config_name"]: i["splits"][0]["num_examples"] for i in meta["dataset_info"]}
    assert rows == {**manifest["rows"], "all": sum(manifest["rows"].values())}
    assert [f["name"] for f in meta["dataset_info"][0]["features"]] == list(COLUMNS)
    fields = meta["extra_gated_fields"]
    assert (fields["Name"], fields["Affiliation"], fields["Country"]) == ("text", "text", "country")
    assert fields["Intended use"] == {"type": "select", "options": list(INTENDED_USES)}
    assert all(fields[a] == "checkbox" for a in AGREEMENTS)
    for term in ("no training", "identify", "no redistribution", "SHADES", "CC BY-NC-SA 4.0"):
        assert term in meta["extra_gated_prompt"]
    assert meta["redvox"]["version"] == "1.0.0" and meta["redvox"]["counts"] == manifest["counts"]


def test_card_body_states_the_builds_figures(demo_release, build):
    manifest, audit, report = build
    _, body = read_card(demo_release["staged"])
    assert "Content warning" in body and "Synthetic demo build" in body
    assert 'load_dataset("FBK-MT/RedVox", "en", split="test", revision="v1.0.0")' in body
    en = manifest["counts"]["en"]
    en_total = sum(sum(per.values()) for per in en.values())
    assert "| en      |" in body and f"|     {en_total} |" in body
    assert f"| kept                         |       {audit['participants']['kept']} |" in body
    v = report["composition"]["public_vs_full"]["lang"]["cramers_v"]
    assert f"| lang               |        {v:.3f} |" in body
    if report["override"]:
        assert f"reason given: {report['override']}" in body
    level = manifest["shared_clips"]["noise_a"]["params"]["level_dbfs"]
    assert f'"level_dbfs": {level}' in body
    assert "`ES_ES` and `ES-ES`" in body and "| `it`" in body
    assert get_version("1.0.0").release_notes in body
    changelog = (demo_release["staged"] / "CHANGELOG.md").read_text()
    assert "### v1.0.0" in changelog and "### v1.1.0" not in changelog
    assert "no training" in (demo_release["staged"] / "LICENSE").read_text().lower()


def test_shared_clips_are_stored_once_so_size_follows_unique_audio(demo_release):
    footprint = audio_footprint(shard_paths(demo_release["staged"]))
    # Text rows of a condition share one clip per language shard: distinct clips are
    # far fewer than rows, and the files weigh what the distinct clips weigh.
    assert footprint.distinct_clips < footprint.rows / 2
    assert footprint.file_bytes < footprint.row_audio_bytes / 2
    assert footprint.file_bytes < footprint.distinct_audio_bytes * 1.10 + 64_000


def test_load_dataset_per_language_and_default_config(demo_release, build, tmp_path):
    manifest, _, _ = build
    staged = str(demo_release["staged"])
    en = datasets.load_dataset(staged, "en", split="test", cache_dir=str(tmp_path))
    everything = datasets.load_dataset(staged, split="test", cache_dir=str(tmp_path))
    assert len(en) == manifest["rows"]["en"] and set(en["lang"]) == {"en"}
    assert len(everything) == sum(manifest["rows"].values())
    assert tuple(everything.column_names) == COLUMNS
    samples = en[0]["audio"].get_all_samples()
    assert samples.sample_rate == 16_000
    assert samples.data.shape[-1] / 16_000 == pytest.approx(en[0]["duration_s"], abs=0.002)


def test_loading_script_builder_yields_the_same_rows(demo_release, tmp_path):
    staged = demo_release["staged"]
    spec = importlib.util.spec_from_file_location(
        "redvox_script", staged / "loading_script" / "redvox.py"
    )
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script  # `datasets` looks the builder's module up by name
    spec.loader.exec_module(script)
    builder = script.RedVox(config_name="en", data_dir=str(staged), cache_dir=str(tmp_path / "b"))
    builder.download_and_prepare()
    from_script = builder.as_dataset(split="test").cast_column(
        "audio", datasets.Audio(decode=False)
    )
    from_parquet = datasets.load_dataset(
        str(staged), "en", split="test", cache_dir=str(tmp_path / "p")
    )
    from_parquet = from_parquet.cast_column("audio", datasets.Audio(decode=False))
    assert from_script.features == from_parquet.features
    assert from_script.column_names == from_parquet.column_names
    assert from_script.to_list() == from_parquet.to_list()
    assert [c.name for c in script.RedVox.BUILDER_CONFIGS] == ["all", "en", "de", "es", "fr", "it"]


def test_stage_refuses_to_overwrite_a_folder_that_is_not_a_staging(demo_release, tmp_path):
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "chapter1.tex").write_text("...")
    with pytest.raises(StageError, match="not a staged RedVox release"):
        stage_release(demo_release["version_dir"], "FBK-MT/RedVox", precious)
    assert (precious / "chapter1.tex").exists()


def test_run_ends_with_the_dry_run_listing(demo_release):
    output = demo_release["output"]
    assert "verified (rows per config: all" in output
    assert "DRY RUN (no token (HF_TOKEN) and no repo id (REPO_ID)): nothing was pushed." in output
    assert "https://huggingface.co/datasets/FBK-MT/RedVox" in output
    assert "data/en/test-00000-of-00001.parquet" in output and "total" in output
    steps = output[output.index("Calls, in order:") :]
    assert (
        steps.index("private")
        < steps.index("one commit")
        < steps.index("gated")
        < steps.index("tag")
    )


def test_the_staged_evaluator_runs_on_its_own(demo_release, tmp_path):
    script = demo_release["staged"] / "evaluation" / "evaluate.py"
    run = subprocess.run(
        [sys.executable, "-I", "-B", str(script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "judge" in run.stdout and "report" in run.stdout


def test_huggingface_hub_reads_the_card_metadata(demo_release):
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(demo_release["staged"] / "README.md")
    assert card.data.license == "other" and card.data.pretty_name == "RedVox"
    assert [c["config_name"] for c in card.data.configs][:2] == ["all", "en"]

"""The staged demo release: layout, card generated from the build, shared audio stored
once, the loading script, and what users run: load_dataset per language and `all`."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import datasets
import pytest
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.builder.versions import get_version
from redvox.release.hub.card import AGREEMENTS, INTENDED_USES, read_card, read_provenance
from redvox.release.hub.stage import (
    StageError,
    audio_footprint,
    shard_paths,
    stage_release,
    staged_files,
)
from redvox.schemas import COLUMNS, DEMO_CONFIG, InputConfig
from redvox.schemas.layout import sha256_file


@pytest.fixture(scope="module")
def build(demo_release):
    version_dir = demo_release["version_dir"]
    manifest = json.loads((version_dir / "public" / "manifest.json").read_text())
    audit = json.loads((version_dir / "public" / "consent_audit.json").read_text())
    report = json.loads((version_dir / "representativeness.json").read_text())
    return manifest, audit, report


def _table(markdown: str, first: str) -> dict[str, dict[str, str]]:
    """The first Markdown table whose first header cell is `first`: {first cell: {header:
    cell}}, cells stripped of tabulate's padding."""
    lines = iter(markdown.splitlines())
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            header = cells
            next(lines)  # the |---|---| rule
            table = {}
            for row in lines:
                if not row.startswith("|"):
                    break
                values = [c.strip() for c in row.strip().strip("|").split("|")]
                table[values[0]] = dict(zip(header, values, strict=True))
            return table
    raise AssertionError(f"no table starting with {first!r}")


def test_the_staged_folder_holds_exactly_the_hub_repo(demo_release, build):
    staged = demo_release["staged"]
    manifest, _, _ = build
    files = staged_files(staged)
    shards = sorted(p for p in files if p.startswith("data/"))
    assert shards == sorted(p for p in manifest["files"] if p.endswith(".parquet"))
    others = {p for p in files if not p.startswith(("data/", "evaluation/"))}
    assert others == {
        "README.md",
        "redvox.json",
        "LICENSE",
        "CHANGELOG.md",
        "loading_script/redvox.py",
    }
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
    # one pattern per language, in the fixed order en, de, es, fr, it (not one data/*/ glob)
    ordered = [f"data/{lang}/test-*.parquet" for lang in ("en", "de", "es", "fr", "it")]
    assert configs["all"]["data_files"] == [{"split": "test", "path": ordered}]
    assert configs["en"]["data_files"] == [{"split": "test", "path": "data/en/test-*.parquet"}]
    rows = {i["config_name"]: i["splits"][0]["num_examples"] for i in meta["dataset_info"]}
    assert rows == {**manifest["rows"], "all": sum(manifest["rows"].values())}
    assert [f["name"] for f in meta["dataset_info"][0]["features"]] == list(COLUMNS)
    fields = meta["extra_gated_fields"]
    assert (fields["Name"], fields["Affiliation"], fields["Country"]) == ("text", "text", "country")
    assert fields["Intended use"] == {"type": "select", "options": list(INTENDED_USES)}
    assert all(fields[a] == "checkbox" for a in AGREEMENTS)
    # the source texts' terms, one box naming each source of the build
    [terms] = [a for a in fields if a.startswith("I will honour the terms of the source texts")]
    assert fields[terms] == "checkbox" and "SHADES" in terms and "M-ALERT" in terms
    for term in ("no training", "identify", "no redistribution", "SHADES", "CC BY-NC-SA 4.0"):
        assert term in meta["extra_gated_prompt"]
    assert "redvox" not in meta  # the Hub ignores unknown YAML: provenance is in redvox.json
    provenance = read_provenance(demo_release["staged"])
    assert provenance["version"] == "1.0.0" and provenance["counts"] == manifest["counts"]
    assert provenance["repo_id"] == "FBK-MT/RedVox"


def test_card_body_states_the_builds_figures(demo_release, build):
    manifest, audit, report = build
    _, body = read_card(demo_release["staged"])
    assert "Content warning" in body and "Synthetic demo build" in body
    assert 'load_dataset("FBK-MT/RedVox", "en", split="test", revision="v1.0.0")' in body
    # the rows per language and audio type, read back from the card's table
    rows = _table(body, "lang")
    conditions = list(manifest["counts"]["en"])
    for lang, per_condition in manifest["counts"].items():
        cells = rows[lang]
        for condition in conditions:
            assert cells[condition] == str(sum(per_condition[condition].values()))
        assert cells["rows"] == str(manifest["rows"][lang])
    assert rows["**all**"]["rows"] == str(sum(manifest["rows"].values()))
    assert set(rows) == {*manifest["counts"], "**all**"}
    # per language: the rows per vulnerability type, and the totals
    en = _table(body, "vulnerability_type")
    for condition, per_type in manifest["counts"]["en"].items():
        for vulnerability, count in per_type.items():
            assert en[vulnerability][condition] == str(count)
        assert en["**total**"][condition] == str(sum(per_type.values()))
    # participants and recordings kept and excluded, from the consent audit
    consent = _table(body, "participants")
    assert consent["kept"]["count"] == str(audit["participants"]["kept"])
    assert consent["kept"]["recordings"] == str(audit["recordings"]["kept"])
    for reason, count in audit["participants"]["excluded"].items():
        label = f"excluded: {reason.replace('_', ' ')}"
        assert consent[label]["count"] == str(count)
        assert consent[label]["recordings"] == str(audit["recordings"]["excluded"][reason])
    # Cramér's V of every dimension, public vs full and public vs withheld
    dimensions = _table(body.split("## Representativeness", 1)[1], "dimension")
    for kind, column in (("public_vs_full", "full"), ("public_vs_withheld", "withheld")):
        for dimension, result in report["composition"][kind].items():
            cell = dimensions[dimension][f"V, public vs {column}"]
            assert float(cell) == pytest.approx(result["cramers_v"], abs=0.0005)
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
    before = snapshot(precious)
    with pytest.raises(StageError, match="not a staged RedVox release"):
        stage_release(demo_release["version_dir"], "FBK-MT/RedVox", precious, synthetic=True)
    assert snapshot(precious) == before


def snapshot(folder) -> dict[str, str]:
    """Every entry under `folder`, hidden ones included: files by sha256, folders and links."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[rel] = f"link:{path.readlink()}"
        else:
            out[rel] = sha256_file(path) if path.is_file() else "folder"
    return out


def hub_clone(staged, where):
    """The staged repo as `git clone` of the Hub gives it, plus the user's own runs."""
    shutil.copytree(staged, where)
    (where / ".git" / "refs").mkdir(parents=True)
    (where / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (where / ".gitattributes").write_text("*.parquet filter=lfs diff=lfs merge=lfs -text\n")
    (where / "runs" / "en").mkdir(parents=True)
    (where / "runs" / "en" / "my-model.jsonl").write_text('{"ID": 1, "output": "mine"}\n')
    return where


def test_stage_into_a_hub_clone_refuses_in_one_line_and_deletes_nothing(demo_release, tmp_path):
    clone = hub_clone(demo_release["staged"], tmp_path / "RedVox")
    before = snapshot(clone)
    result = CliRunner().invoke(
        main, ["release", "stage", str(demo_release["version_dir"]), "--out", str(clone),
               "--config", str(DEMO_CONFIG)],
    )  # fmt: skip
    assert result.exit_code != 0
    line = result.output.strip()
    assert "\n" not in line and ".git" in line and "runs" in line and str(clone) in line
    assert "Traceback" not in line
    assert snapshot(clone) == before
    assert [p.name for p in tmp_path.iterdir()] == ["RedVox"]  # no temporary folder left


@pytest.mark.parametrize(
    ("extra", "named"),
    [("runs/out.jsonl", "(runs/)"), ("evaluation/outputs/en/m.jsonl", "(evaluation/outputs/)"),
     ("data/en/notes.txt", "(data/en/notes.txt)"), ("empty-folder/", "(empty-folder/)"),
     ("evaluation/redvox_eval/local.py", "(evaluation/redvox_eval/local.py)"),
     (".env", "(.env)"), ("link", "(link)")],
)  # fmt: skip
def test_stage_refuses_an_earlier_staging_that_holds_anything_else(
    demo_release, tmp_path, extra, named
):
    staged = tmp_path / "staged"
    shutil.copytree(demo_release["staged"], staged)
    if extra == "link":
        (staged / "link").symlink_to(staged / "README.md")
    elif extra.endswith("/"):
        (staged / extra).mkdir()
    else:
        (staged / extra).parent.mkdir(parents=True, exist_ok=True)
        (staged / extra).write_text("the user's\n")
    before = snapshot(staged)
    with pytest.raises(StageError, match="also holds what staging did not write") as refused:
        stage_release(demo_release["version_dir"], "FBK-MT/RedVox", staged, synthetic=True)
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(staged) == before


def test_a_provenance_listing_other_files_as_shards_does_not_make_them_its_own(
    demo_release, tmp_path
):
    staged = tmp_path / "staged"
    shutil.copytree(demo_release["staged"], staged)
    (staged / "runs").mkdir()
    (staged / "runs" / "mine.jsonl").write_text("{}\n")
    provenance = json.loads((staged / "redvox.json").read_text())
    provenance["shards"]["runs/mine.jsonl"] = "0" * 64
    (staged / "redvox.json").write_text(json.dumps(provenance))
    before = snapshot(staged)
    with pytest.raises(StageError, match=r"\(runs/\)"):
        stage_release(demo_release["version_dir"], "FBK-MT/RedVox", staged, synthetic=True)
    assert snapshot(staged) == before


def test_restaging_its_own_folder_replaces_exactly_its_files(demo_release, tmp_path):
    staged = tmp_path / "staged"
    shutil.copytree(demo_release["staged"], staged)
    (staged / "README.md").write_text("edited by hand\n")  # a file staging wrote
    (staged / "CHANGELOG.md").unlink()
    cache = staged / "evaluation" / "redvox_eval" / "__pycache__"  # the evaluator was run here
    cache.mkdir()
    (cache / "cli.cpython-311.pyc").write_bytes(b"\0")
    stage_release(demo_release["version_dir"], "FBK-MT/RedVox", staged, synthetic=True)
    assert snapshot(staged) == snapshot(demo_release["staged"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["staged"]


def test_a_full_disk_while_restaging_leaves_the_earlier_staging_as_it_was(
    demo_release, tmp_path, monkeypatch
):
    staged = tmp_path / "staged"
    shutil.copytree(demo_release["staged"], staged)
    (staged / "README.md").write_text("the earlier card\n")
    before = snapshot(staged)
    real_copy, copies = shutil.copyfile, []

    def disk_full(src, dst, *args, **kwargs):
        copies.append(dst)
        if len(copies) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space left"):
        stage_release(demo_release["version_dir"], "FBK-MT/RedVox", staged, synthetic=True)
    assert snapshot(staged) == before
    assert [p.name for p in tmp_path.iterdir()] == ["staged"]  # no half folder beside it


def test_stage_refuses_a_file_or_a_link_as_the_folder(demo_release, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(demo_release["staged"])
    for target in (a_file, link):
        with pytest.raises(StageError, match="is not a folder"):
            stage_release(demo_release["version_dir"], "FBK-MT/RedVox", target, synthetic=True)
    assert a_file.read_text() == "mine\n" and link.resolve() == demo_release["staged"]


def test_run_ends_with_the_dry_run_listing(demo_release):
    output = demo_release["output"]
    assert "verified (rows per config: all" in output
    assert "DRY RUN (no token (HF_TOKEN) and no repo id (REPO_ID)): nothing was pushed." in output
    assert "https://huggingface.co/datasets/FBK-MT/RedVox" in output
    # the listing names every staged file with its size, and the total adds them up
    listing = output[output.index("Would push") : output.index("Calls, in order:")]
    listed = {}
    for line in listing.splitlines()[1:]:
        path, number, unit, *rest = line.split()
        listed[path] = (float(number), unit, rest)
    total_number, total_unit, total_rest = listed.pop("total")
    staged = demo_release["staged"]
    assert sorted(listed) == staged_files(staged)
    assert total_rest == [f"({len(listed)}", "files)"]
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
    sizes = {path: (staged / path).stat().st_size for path in listed}
    for path, (number, unit, _) in listed.items():
        assert number * scale[unit] == pytest.approx(sizes[path], abs=0.05 * scale[unit])
    assert total_number * scale[total_unit] == pytest.approx(
        sum(sizes.values()), abs=0.05 * scale[total_unit]
    )
    steps = output[output.index("Calls, in order:") :].splitlines()[1:]

    def step(text: str) -> int:
        return next(i for i, line in enumerate(steps) if text in line)

    assert step("private") < step("one commit") < step("(the access form") < step("tag")
    # an existing public repo is gated first, so its data is never public and ungated
    assert step("already exists and is public: set gated access") < step("one commit")


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


def test_stage_refuses_a_representativeness_report_of_an_earlier_build(demo_release, tmp_path):
    # represent, then change the consent registry and rebuild: the report no longer
    # describes these shards, and staging it would print two different row counts.
    corpus = tmp_path / "demo"
    shutil.copytree(DEMO_CONFIG.parent, corpus, ignore=shutil.ignore_patterns("__pycache__"))
    config, out = corpus / "config.yaml", tmp_path / "out"
    runner = CliRunner(env={"HF_TOKEN": None})

    def redvox(*args: str):
        return runner.invoke(main, [str(a) for a in args])

    build = ("build", "--version", "1.0.0", "--config", config, "--out", out, "--workers", "1",
             "--cache", demo_release["out"] / ".cache")  # fmt: skip
    version_dir = out / "1.0.0"
    assert redvox(*build).exit_code == 0
    represent = ("release", "represent", version_dir, "--override-gate", "demo", "--config", config)
    assert redvox(*represent).exit_code == 0
    consent = corpus / "consent.csv"
    consent.write_text(consent.read_text().replace("demo-p02,yes,yes", "demo-p02,yes,no"))
    assert redvox(*build).exit_code == 0

    staged = tmp_path / "staged"
    result = redvox("release", "stage", version_dir, "--out", staged, "--config", config)
    assert result.exit_code != 0 and not staged.exists()
    assert (
        "representativeness report is for another build of 1.0.0; "
        "run `redvox release represent` again" in result.output
    )
    assert "Traceback" not in result.output

    assert redvox(*represent).exit_code == 0
    stage_release(version_dir, "FBK-MT/RedVox", staged, config=InputConfig.load(config))
    _, body = read_card(staged)
    counts = read_provenance(staged)["counts"]
    rows = sum(
        n for per_lang in counts.values() for per_a in per_lang.values() for n in per_a.values()
    )
    assert f"The public set ({rows} rows" in body  # one row count, the build's


@pytest.fixture(scope="module")
def staged_v1_1(demo_release, tmp_path_factory):
    """The demo corpus built, represented and staged as 1.1.0 (adds speech_noise_a)."""
    out = tmp_path_factory.mktemp("v1.1") / "out"
    runner = CliRunner(env={"HF_TOKEN": None})
    build = ["build", "--version", "1.1.0", "--out", str(out), "--workers", "1",
             "--cache", str(demo_release["out"] / ".cache")]  # fmt: skip
    assert runner.invoke(main, build).exit_code == 0
    represent = ["release", "represent", str(out / "1.1.0"), "--override-gate", "demo"]
    assert runner.invoke(main, represent).exit_code == 0
    stage_release(out / "1.1.0", "FBK-MT/RedVox", out / "1.1.0" / "staged", synthetic=True)
    return out / "1.1.0" / "staged"


def test_card_says_speech_ambient_rows_are_as_long_as_the_recording(staged_v1_1):
    _, body = read_card(staged_v1_1)
    conditions = body[body.index("## Audio conditions") :]
    line = next(x for x in conditions.splitlines() if x.startswith("- **speech_noise_a**"))
    assert "the recording itself, mixed (same length as the recording)" in line
    assert "6 s" not in line and "clip" not in line.split(":")[0]
    noise_a = next(x for x in conditions.splitlines() if x.startswith("- **noise_a**"))
    assert "shared clip, 6 s" in noise_a  # clip conditions keep their length


@pytest.mark.parametrize("bad", ["FBK MT/Red Vox", "FBK-MT/RedVox/extra", "RedVox", "-x/y"])
def test_stage_refuses_an_invalid_repo_id_in_one_line(demo_release, tmp_path, bad):
    from redvox.release.hub.stage import StageError

    with pytest.raises(StageError, match="is not a Hub repo id") as error:
        stage_release(demo_release["version_dir"], bad, tmp_path / "staged")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "staged").exists()

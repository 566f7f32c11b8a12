"""What a user can get wrong ends in one line that says what to do, never a traceback:
each case runs the real command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.builder.pseudonym import KEY_ENV
from redvox.schemas import DEMO_CONFIG


def invoke(*args: str):
    return CliRunner(env={"HF_TOKEN": None}).invoke(main, [str(a) for a in args])


def one_line_error(result, code: int = 1) -> str:
    """The command failed as a user error: exit code, one 'Error:' line, no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.fixture(scope="module")
def built(demo_release, tmp_path_factory) -> Path:
    """1.0.0 built (warm cache), with no representativeness report."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        out = tmp_path_factory.mktemp("built") / "out"
        result = invoke(
            "build", "--version", "1.0.0", "--out", out, "--cache", demo_release["out"] / ".cache"
        )
    assert result.exit_code == 0, result.output
    return out / "1.0.0"


def test_stage_before_represent_says_to_run_represent(built, tmp_path):
    line = one_line_error(invoke("release", "stage", built, "--out", tmp_path / "staged"))
    assert f"run `redvox release represent {built}` first" in line
    assert not (tmp_path / "staged").exists()


def test_stage_and_represent_of_a_folder_that_was_never_built(tmp_path):
    (tmp_path / "9.9.9").mkdir()
    line = one_line_error(invoke("release", "stage", tmp_path / "9.9.9", "--out", tmp_path / "s"))
    assert "no build manifest" in line and "redvox build" in line
    line = one_line_error(invoke("release", "represent", tmp_path / "9.9.9"))
    assert "no build manifest" in line


def test_withdraw_with_a_date_not_written_yyyy_mm_dd(tmp_path):
    shutil.copytree(DEMO_CONFIG.parent, tmp_path / "demo")
    consent = tmp_path / "demo" / "consent.csv"
    before = consent.read_text()
    for date in ("15/03/2026", "20260315", "2026-02-30"):
        result = invoke(
            "release",
            "withdraw",
            "demo-p01",
            "--config",
            tmp_path / "demo" / "config.yaml",
            "--out",
            tmp_path / "out",
            "--date",
            date,
        )
        line = one_line_error(result, code=2)  # a usage error
        assert f"Invalid value for '--date': '{date}' is not a date written YYYY-MM-DD" in line
    assert consent.read_text() == before


def test_an_unknown_version_lists_the_declared_ones(tmp_path):
    for command in ("build", "release run"):
        result = invoke(*command.split(), "--version", "9.9.9", "--out", tmp_path)
        line = one_line_error(result)
        assert line == "Error: unknown dataset version '9.9.9'; declared: 1.0.0, 1.1.0"


def condition_file(tmp_path: Path) -> Path:
    path = tmp_path / "noise_z.yaml"
    path.write_text(
        "name: noise_z\nkind: ambient\nsampling: shared\nparams: {level_dbfs: [-30.0, -30.0]}\n"
    )
    return path


def test_variants_add_from_a_folder_with_a_corrupt_parquet_names_the_file(tmp_path):
    release = tmp_path / "RedVox"
    shard = release / "data" / "en" / "test-00000-of-00001.parquet"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"PAR1 this is not a parquet file")
    line = one_line_error(invoke("variants", "add", condition_file(tmp_path), "--from", release))
    assert f"{shard}: not a readable RedVox shard" in line


def test_variants_add_from_a_built_set_with_a_truncated_shard_names_it(built, tmp_path):
    source = tmp_path / "full"
    shutil.copytree(built / "full", source)
    shard = source / "data" / "de" / "test-00000-of-00001.parquet"
    shard.write_bytes(shard.read_bytes()[:-100])
    result = invoke(
        "variants", "add", condition_file(tmp_path), "--from", source, "--out", tmp_path / "out"
    )
    line = one_line_error(result)
    assert f"{shard}: not a readable parquet shard" in line


def test_variants_add_from_a_shard_of_foreign_rows_names_it(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    release = tmp_path / "RedVox"
    shard = release / "data" / "en" / "test-00000-of-00001.parquet"
    shard.parent.mkdir(parents=True)
    pq.write_table(pa.table({"builder_version": ["1.0.0"], "x": [1]}), shard)
    line = one_line_error(invoke("variants", "add", condition_file(tmp_path), "--from", release))
    assert f"{shard}: row 0 is not a RedVox row" in line


def test_represent_of_a_set_folder_or_a_variants_folder_points_at_the_version(built, tmp_path):
    version_dir = built
    line = one_line_error(invoke("release", "represent", version_dir / "public"))
    assert "a set folder" in line and f"give its version folder {version_dir}" in line
    variants = tmp_path / "1.0.0+noise_c"
    shutil.copytree(version_dir / "public", variants / "public")
    line = one_line_error(invoke("release", "represent", variants))
    assert "holds no full set" in line and str(tmp_path / "1.0.0") in line

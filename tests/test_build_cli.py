"""`redvox build` and `redvox variants` refuse clearly what they cannot do."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.builder.pseudonym import KEY_ENV
from redvox.schemas import DEMO_CONFIG


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def demo_config(tmp_path: Path, **changes) -> Path:
    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw = {k: str(DEMO_CONFIG.parent / v) if isinstance(v, str) else v for k, v in raw.items()}
    raw["items"] = {"item_keys_file": str(DEMO_CONFIG.parent / "items.txt")}
    for key, value in changes.items():
        if value is None:
            raw.pop(key)
        else:
            raw[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_list_versions_shows_each_version_and_its_notes():
    result = run("build", "--list-versions")
    assert result.exit_code == 0
    assert "1.0.0" in result.output and "1.1.0" in result.output
    assert "speech_noise_a" in result.output


def test_unknown_version_is_refused():
    result = run("build", "--version", "7.0.0")
    assert result.exit_code != 0 and "declared: 1.0.0, 1.1.0" in result.output


def test_fatal_inputs_stop_the_build_and_name_the_file(tmp_path):
    config = demo_config(tmp_path, consent=str(tmp_path / "missing.csv"))
    result = run("build", "--config", str(config), "--out", str(tmp_path / "out"))
    assert result.exit_code != 0
    assert "missing.csv" in result.output
    assert not (tmp_path / "out").exists()


def test_public_build_refuses_to_run_without_a_pseudonym_key(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    config = demo_config(tmp_path, pseudonym_key_file=None)
    result = run("build", "--config", str(config), "--set", "public", "--out", str(tmp_path / "o"))
    assert result.exit_code != 0
    assert KEY_ENV in result.output and "pseudonym_key_file" in result.output


def test_variants_add_rejects_a_bad_condition_file(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("name: noise_c\nkind: thunder\n")
    folder = tmp_path / "set"
    folder.mkdir()
    result = run("variants", "add", str(bad), "--from", str(folder))
    assert result.exit_code != 0 and "c.yaml" in result.output and "kind" in result.output

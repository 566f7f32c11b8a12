"""`redvox build` and `redvox variants` refuse clearly what they cannot do."""

from __future__ import annotations

import json
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


def summary_of(output: str) -> tuple[list[str], list[str]]:
    """The lines of the quarantined table, and every other line of a build's summary."""
    lines = output.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("quarantined "))
    end = next(n for n, line in enumerate(lines) if line.startswith("quarantine reports: "))
    return lines[start + 2 : end], lines[:start] + lines[end:]


def test_the_summary_names_the_quarantine_reports_and_keeps_an_item_shortfall_apart(tmp_path):
    keys = tmp_path / "keys.txt"
    pinned = (DEMO_CONFIG.parent / "items.txt").read_text(encoding="utf-8")
    keys.write_text(pinned + "shades:99.0\nm-alert:1\n", encoding="utf-8")
    cache = tmp_path / "cache"
    for name, items in [("drawn", {"shades": 181, "per_group": 70}), ("pinned", None)]:
        config = demo_config(tmp_path, items=items or {"item_keys_file": str(keys)})
        out = tmp_path / name
        args = ["build", "--version", "1.0.0", "--config", str(config), "--out", str(out)]
        result = run(*args, "--cache", str(cache), "--workers", "1")
        assert result.exit_code == 0, result.output
        table, others = summary_of(result.output)
        assert table and not any("items" in line for line in table)  # recordings only
        reports = [out / "1.0.0" / s / "quarantine.jsonl" for s in ("full", "public")]
        assert f"quarantine reports: full -> {reports[0]}, public -> {reports[1]}" in others
        assert all(report.is_file() for report in reports)
        short = [line for line in others if line.startswith("items short: ")]
        if name == "drawn":
            assert (
                "items short: shades: only 8 stereotype items are usable but 181 were "
                "asked; all 8 are used" in short
            )
            assert sum("but 70 were asked" in line for line in short) == 5
        else:
            lines = len(pinned.splitlines())
            assert short == [
                f"items short: 2 lines of the pinned item keys give no item (keys.txt line "
                f"{lines + 1}, keys.txt line {lines + 2}); the full quarantine report says why, "
                "`redvox sources check` lists the SHADES/M-ALERT rows behind them"
            ]
        # The quarantine report itself still records them, with the selection's reason.
        recorded = [json.loads(line) for line in reports[0].read_text().splitlines()]
        from_items = [r for r in recorded if r.get("file") in ("items", "keys.txt")]
        assert len(from_items) == len(short) if name == "drawn" else len(from_items) == 2

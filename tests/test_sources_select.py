"""`redvox sources select`: the items a build would use, as a key file to pin them;
and pinned keys the sources lack, as `redvox sources check` reports them."""

import yaml
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.builder.versions import get_version
from redvox.schemas import DEMO_CONFIG, VULNERABILITY_TYPES, InputConfig, ItemSelection
from redvox.sources.inputs import read_selection
from redvox.sources.selection import select_items

DEMO = DEMO_CONFIG.parent


def write_config(tmp_path, **changes):
    """The demo config with absolute paths, `changes` applied, written under tmp_path."""
    raw = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    config = {name: str(DEMO / value) for name, value in raw.items() if isinstance(value, str)}
    config.update(changes)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def source_items(config: InputConfig):
    sources, _ = read_selection(config, get_version().config.languages)
    return [item for _, read in sources for item in read.records]


def test_select_writes_a_key_file_that_pins_exactly_the_draw(tmp_path):
    config_path = write_config(tmp_path, items={"seed": 3, "shades": 4, "per_group": 1})
    out = tmp_path / "items.txt"
    result = CliRunner().invoke(
        main, ["sources", "select", "--config", str(config_path), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    config = InputConfig.load(config_path)
    drawn = select_items(source_items(config), config.items)
    assert drawn.records
    text = out.read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("seed 3" in line for line in header)
    assert any(str(config_path) in line for line in header)
    listed = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert listed == sorted(listed) == [item.key for item in drawn.records]
    pinned = select_items(source_items(config), ItemSelection(item_keys_file=out))
    assert pinned.problems == []
    assert pinned.records == drawn.records
    assert f"Wrote {len(listed)} item keys to {out}" in result.output
    stereotypes = sum(i.vulnerability_type == "stereotype" for i in drawn.records)
    assert any(
        line.split() == ["stereotype", str(stereotypes)] for line in result.stdout.splitlines()
    )
    # Written again from the same inputs, the file is byte for byte the same.
    first = out.read_bytes()
    CliRunner().invoke(main, ["sources", "select", "--config", str(config_path), "--out", str(out)])
    assert out.read_bytes() == first


def test_select_on_the_demo_corpus_writes_its_pinned_items(tmp_path):
    out = tmp_path / "items.txt"
    result = CliRunner().invoke(main, ["sources", "select", "--out", str(out)])
    assert result.exit_code == 0, result.output
    listed = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    pinned = [line for line in (DEMO / "items.txt").read_text().splitlines() if line.strip()]
    assert listed == sorted(pinned)
    assert "pinned by the key file items.txt" in out.read_text()
    for stratum in VULNERABILITY_TYPES:
        assert stratum in result.output


def test_select_exits_1_on_unusable_inputs_and_writes_nothing(tmp_path):
    config_path = write_config(tmp_path, shades=str(tmp_path / "missing.csv"))
    out = tmp_path / "items.txt"
    result = CliRunner().invoke(
        main, ["sources", "select", "--config", str(config_path), "--out", str(out)]
    )
    assert result.exit_code == 1
    assert "Unusable inputs (1)" in result.output
    assert str(tmp_path / "missing.csv") in result.output
    assert not out.exists()


def test_a_pinned_key_missing_from_the_sources_is_reported_with_its_line(tmp_path):
    keys = tmp_path / "items.txt"
    keys.write_text(
        (DEMO / "items.txt").read_text(encoding="utf-8") + "# gone upstream\nshades:404.0\n",
        encoding="utf-8",
    )
    line = len(keys.read_text(encoding="utf-8").splitlines())
    config_path = write_config(tmp_path, items={"item_keys_file": str(keys)})
    result = CliRunner().invoke(
        main, ["sources", "check", "--config", str(config_path), "--no-audio"]
    )
    assert result.exit_code == 0, result.output
    problems = result.output[result.output.index("Problems (") :]
    expected = (
        f"{keys}:{line}: no usable item shades:404.0 in the SHADES/M-ALERT files "
        f"(see their problems), but the item key file {keys} (items.item_keys_file) pins it"
    )
    assert expected in problems
    # Inline keys (a version pinning its items in code) name where they were pinned too.
    inline = write_config(tmp_path, items={"item_keys": ["shades:1.0", "m-alert:404"]})
    result = CliRunner().invoke(main, ["sources", "check", "--config", str(inline), "--no-audio"])
    assert "items.item_keys:2: no usable item m-alert:404" in result.output
    assert "items.item_keys (of the version built, else of the input config) pins it" in (
        result.output
    )

"""`redvox sources check` and load_inputs on the embedded demo corpus."""

import hashlib

import yaml
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.schemas import DEMO_CONFIG, InputConfig
from redvox.sources.inputs import load_inputs

DEMO = DEMO_CONFIG.parent
# The demo corpus's deliberate problems (sources/demo/README.md) as the check prints them.
DELIBERATE = [
    "shades.csv:11: index: 'x.3' is not a SHADES index",
    "shades.csv:10: de_biased_sentences: no biased sentence in de",
    "malert.jsonl:12: category: M-ALERT category 'misc_other'",
    "item_id: no item m-alert:90099",
    "participant_key: 'demo-p99' is not in the participants registry",
    "audio_file: 'demo-p11/fr_shades_2.0.flac' not found",
]


def snapshot(folder):
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*") if p.is_file()}


def test_check_on_the_demo_corpus_shows_summary_and_deliberate_problems():
    before = snapshot(DEMO)
    result = CliRunner().invoke(main, ["sources", "check"])
    assert result.exit_code == 0, result.output
    out = result.output
    for title in (
        "Selected items (18) per language",
        "Contributions (63) per language",  # line 17 is a retake of line 12,
        "Contributions per speaker",
        "Consent states",
    ):
        assert title in out
    lines = out.splitlines()
    assert any(
        line.split() == ["unsafe_request_weapons", "2", "2", "2", "2", "2"] for line in lines
    )
    assert any(line.split() == ["demo-p02", "5", "0", "0", "0", "6", "11"] for line in lines)
    assert any(line.split() == ["no_record", "1"] for line in lines)  # demo-p08
    assert any(line.split() == ["withdrawn", "1"] for line in lines)  # demo-p04
    # Every data line of every table input was read: nothing lost without a report.
    for name, counts in [
        ("shades.csv", "10 lines read, 10 records"),
        ("malert.jsonl", "12 lines read, 12 records"),
        ("participants.csv", "11 lines read, 11 records"),
        ("consent.csv", "10 lines read, 10 records"),
        ("contributions.csv", "66 lines read, 66 records"),
    ]:
        assert any(name in line and counts in line for line in lines), name
    problems = out[out.index("Problems (") :]
    for expected in DELIBERATE:
        assert expected in problems, expected
    assert "Unusable inputs" not in out
    for recording, reason in BAD_RECORDINGS.items():
        assert any(recording in line and reason in line for line in problems.splitlines())
    assert "same recording" not in out and "superseded" not in out
    assert snapshot(DEMO) == before


# The demo's deliberately bad recordings, found by decoding them.
BAD_RECORDINGS = {
    "demo-p01/en_shades_1.0.flac: audio: clipped": "quarantines",
    "demo-p03/de_shades_2.0.flac: audio: truncated or corrupt": "quarantines",
    "demo-p05/es_shades_7.0.flac: audio: digital silence": "quarantines",
}


def test_check_without_audio_decodes_nothing():
    result = CliRunner().invoke(main, ["sources", "check", "--no-audio"])
    assert result.exit_code == 0, result.output
    assert "Problems (6)" in result.output  # a retake is kept, not a problem
    assert not any(recording in result.output for recording in BAD_RECORDINGS)


def test_load_inputs_keeps_only_usable_contributions_and_hashes_inputs():
    config = InputConfig.load(DEMO_CONFIG)
    inputs = load_inputs(config)
    assert not inputs.fatal
    item_keys = {item.key for item in inputs.items}
    assert all(c.item_key in item_keys for c in inputs.contributions)
    assert all(c.participant_key in inputs.participants for c in inputs.contributions)
    assert "demo-p08" not in inputs.consent and len(inputs.consent["demo-p01"]) == 1
    assert set(inputs.input_hashes) == {
        "shades",
        "malert",
        "contributions",
        "participants",
        "consent",
        "item_keys_file",
    }
    shades_sha = hashlib.sha256((DEMO / "shades.csv").read_bytes()).hexdigest()
    assert inputs.input_hashes["shades"] == shades_sha


def test_check_exits_1_when_an_input_is_missing(tmp_path):
    raw = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    config = {name: str(DEMO / value) for name, value in raw.items() if isinstance(value, str)}
    config["items"] = {"item_keys_file": str(DEMO / "items.txt")}
    config["participants"] = str(tmp_path / "participants.csv")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = CliRunner().invoke(main, ["sources", "check", "--config", str(path)])
    assert result.exit_code == 1
    assert "Unusable inputs (1)" in result.output
    assert f"{tmp_path / 'participants.csv'}: participants registry not found" in result.output
    # Without a registry the contributions cannot be checked against it: no flood of
    # "unknown participant" problems.
    assert "is not in the participants registry" not in result.output


def test_check_exits_1_on_an_unreadable_config(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("shades: [unclosed\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["sources", "check", "--config", str(path)])
    assert result.exit_code == 1
    assert "not a readable YAML file" in result.output

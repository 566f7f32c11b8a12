"""`redvox sources check` and load_inputs on the embedded demo corpus."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from shades_release_fixture import release_frame

from redvox.builder.cli import main
from redvox.builder.versions import get_version
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
    inputs = load_inputs(config, get_version().config.languages)
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
    path = demo_config(tmp_path, participants=tmp_path / "participants.csv")
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


def demo_config(tmp_path, **paths) -> Path:
    """A config of the demo corpus (absolute paths) with some inputs replaced."""
    raw = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    config = {name: str(DEMO / value) for name, value in raw.items() if isinstance(value, str)}
    config["items"] = {"item_keys_file": str(DEMO / "items.txt")}
    config.update({k: str(v) if isinstance(v, Path) else v for k, v in paths.items()})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def build(config: Path, out: Path):
    """`redvox build` of version 1.0.0's full set from `config`."""
    args = ["build", "--version", "1.0.0", "--config", str(config), "--out", str(out)]
    return CliRunner().invoke(main, [*args, "--workers", "1", "--set", "full"])


def babble_bank(tmp_path, files: int, voices: int) -> Path:
    """The demo bank with `files` babble files that carry `voices` distinct speakers."""
    bank = tmp_path / "musan"
    shutil.copytree(DEMO / "musan", bank)
    speech = bank / "speech" / "demo-babble"
    wavs = sorted(speech.glob("*.wav"))
    for extra in wavs[files:]:
        extra.unlink()
    lines = [f"{wav.stem} speaker=voice{n % voices}" for n, wav in enumerate(wavs[:files])]
    (speech / "ANNOTATIONS").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return bank


@pytest.mark.parametrize(("files", "voices"), [(2, 2), (5, 2), (8, 1)])
def test_check_refuses_a_babble_bank_with_too_few_voices_as_the_build_does(tmp_path, files, voices):
    config = demo_config(tmp_path, noise_bank=babble_bank(tmp_path, files, voices))
    for version in ("1.0.0", "1.1.0"):
        args = ["sources", "check", "--no-audio", "--config", str(config), "--version", version]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, result.output
        fatal = result.output[result.output.index("Unusable inputs (1)") :]
        assert "condition 'noise_b' needs at least 3 distinct speakers" in fatal
        assert f"found {voices}; add speech files" in fatal
        assert f"a build of version {version} stops on it" in fatal
        assert any(
            line.split()[:4] == ["speech", "1", str(files), str(voices)]
            for line in result.output.splitlines()
        )
    if (files, voices) == (2, 2):  # the build's verdict, once: the same refusal
        built = build(config, tmp_path / "out")
        assert built.exit_code == 1 and isinstance(built.exception, SystemExit)
        [refusal] = [line for line in built.output.splitlines() if line.startswith("Error: ")]
        assert "condition 'noise_b' needs at least 3 distinct speakers" in refusal
        # the check printed the build's own sentence, word for word
        assert refusal.removeprefix("Error: ") + " (a build of version 1.1.0" in result.output


def test_check_accepts_a_babble_bank_with_just_enough_voices(tmp_path):
    config = demo_config(tmp_path, noise_bank=babble_bank(tmp_path, 4, 3))
    result = CliRunner().invoke(main, ["sources", "check", "--no-audio", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "Unusable inputs" not in result.output and "distinct speakers" not in result.output


def test_a_source_folder_without_annotations_is_a_warning_and_the_build_reads_it(tmp_path):
    bank = tmp_path / "musan"
    shutil.copytree(DEMO / "musan", bank)
    (bank / "speech" / "demo-babble" / "ANNOTATIONS").unlink()
    config = demo_config(tmp_path, noise_bank=bank)
    result = CliRunner().invoke(main, ["sources", "check", "--no-audio", "--config", str(config)])
    assert result.exit_code == 0, result.output
    problems = result.output[result.output.index("Problems (7)") :]
    warning = f"{bank / 'speech' / 'demo-babble'}: warning: no ANNOTATIONS file"
    assert warning in problems and "its own, so babble may mix one voice" in problems
    assert f"{bank / 'noise'}" not in problems  # the ambient folder has its file
    assert any(
        line.split() == ["speech", "1", "8", "8", "1"] for line in result.output.splitlines()
    )
    out = tmp_path / "out"
    built = build(config, out)
    assert built.exit_code == 0, built.output
    shards = sorted((out / "1.0.0" / "full" / "data").glob("*/*.parquet"))
    babble = [
        json.loads(params)
        for shard in shards
        for kind, params in zip(
            *pq.read_table(shard, columns=["audio_type", "condition_params"]).to_pydict().values(),
            strict=True,
        )
        if kind == "noise_b"
    ]
    assert babble and all(len(p["speakers"]) >= 3 for p in babble)


def loop(path: Path) -> Path:
    """`path` made a symbolic link loop (two links pointing at each other)."""
    partner = path.with_name(path.name + ".partner")
    path.unlink(missing_ok=True)
    os.symlink(partner.name, path)
    os.symlink(path.name, partner)
    return path


@pytest.mark.parametrize("where", ["shades", "contributions", "items", "noise wav", "audio_root"])
def test_a_symbolic_link_loop_is_one_line_naming_it_never_a_traceback(tmp_path, where):
    if where == "noise wav":
        bank = tmp_path / "musan"
        shutil.copytree(DEMO / "musan", bank)
        named = loop(bank / "speech" / "demo-babble" / "speaker-03-de.wav")
        paths = {"noise_bank": bank}
    elif where == "items":
        named = loop(tmp_path / "items.txt")
        paths = {}
    else:
        named = loop(tmp_path / ("audio" if where == "audio_root" else f"{where}.csv"))
        paths = {where: named}
    config = demo_config(tmp_path, **paths)
    if where == "items":
        raw = yaml.safe_load(config.read_text(encoding="utf-8"))
        config.write_text(yaml.safe_dump({**raw, "items": {"item_keys_file": "items.txt"}}))
    result = CliRunner().invoke(main, ["sources", "check", "--no-audio", "--config", str(config)])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert str(named) in result.output


def test_check_counts_physical_lines_and_records_of_a_pandas_shades_export(tmp_path):
    frame, expected = release_frame()
    shades = tmp_path / "shades.csv"
    frame.to_csv(shades, index=False)
    physical = len(shades.read_text(encoding="utf-8").splitlines()) - 1
    config = demo_config(tmp_path, shades=shades, items={"seed": 0, "shades": 181, "per_group": 2})
    result = CliRunner().invoke(main, ["sources", "check", "--no-audio", "--config", str(config)])
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("shades ")]
    continued = physical - 728
    assert f"{physical} lines read, 728 records ({continued} lines continue a quoted" in line
    assert line.split()[-1] == "0"  # lines not read
    assert any(line.split()[:2] == ["stereotype", "181"] for line in result.output.splitlines())
    assert result.output.count("no biased sentence in") == 728 - len(expected)

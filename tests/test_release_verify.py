"""Verification catches each injected defect in a staged copy of the demo release."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from redvox.release.hub.card import read_card, render_card
from redvox.release.hub.stage import audio_footprint
from redvox.release.hub.verify import (
    check_audio,
    check_card,
    check_layout,
    check_rows,
    check_text_files,
    load_configs,
    read_registry,
    shard_counts,
    verify_staged,
)
from redvox.schemas import DEMO_CONFIG, InputConfig
from redvox.schemas.layout import shard_paths

EN = "data/en/test-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def config() -> InputConfig:
    return InputConfig.load(DEMO_CONFIG)


@pytest.fixture(scope="module")
def registry(config):
    return read_registry(config, "public")


def rewrite(path, change):
    """Apply `change(list of row dicts)` to a shard, keeping its features metadata."""
    table = pq.read_table(path)
    rows = change(table.to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def load(staged, tmp_path, cfg="en"):
    loaded, problems = load_configs(staged, [cfg], tmp_path / "cache")
    assert problems == []
    return loaded[cfg]


def test_the_staged_demo_release_verifies(demo_release, config):
    result = verify_staged(demo_release["staged"], config=config)
    assert result.ok, result.summary()
    assert result.rows["all"] == sum(result.rows[lang] for lang in ("en", "de", "es", "fr", "it"))
    # verify decodes each distinct audio once over every shard; stage counts a clip once per
    # shard it is stored in (a condition's shared clip is in every language's shard); both
    # are recounted here from the bytes, and the summary says which count it is.
    per_shard, overall = 0, set()
    for shard in shard_paths(demo_release["staged"]):
        cells = pq.read_table(shard, columns=["audio"]).column("audio").to_pylist()
        digests = {hashlib.sha256(cell["bytes"]).hexdigest() for cell in cells}
        per_shard, overall = per_shard + len(digests), overall | digests
    assert result.decoded_clips == len(overall) < per_shard
    assert audio_footprint(shard_paths(demo_release["staged"])).distinct_clips == per_shard
    assert "each once across all shards" in result.summary()


def test_a_withheld_participants_row_is_caught(demo_release, staged_copy, config):
    full = pq.read_table(demo_release["version_dir"] / "full" / EN).to_pylist()
    public_ids = set(
        pq.read_table(staged_copy / EN, columns=["user_id"]).column("user_id").to_pylist()
    )
    withheld_row = next(r for r in full if r["user_id"] not in public_ids)
    rewrite(staged_copy / EN, lambda rows: [*rows, withheld_row | {"ID": len(rows)}])
    result = verify_staged(staged_copy, config=config)
    assert not result.ok
    consent = [p for p in result.problems if p.check == "consent"]
    assert len(consent) == 1 and withheld_row["user_id"] in consent[0].message


def test_an_absolute_path_and_an_original_file_name_are_caught(staged_copy, registry, tmp_path):
    def leak(rows):
        rows[0]["audio"] = rows[0]["audio"] | {"path": "/home/alice/redvox/en_shades_1.0.flac"}
        rows[1]["user_text"] = "see C:\\Users\\alice\\notes.txt or alice@example.org"
        return rows

    rewrite(staged_copy / EN, leak)
    problems = check_rows(load(staged_copy, tmp_path), registry, [str(staged_copy)])
    kinds = {(p.check, p.message.split(",")[0]) for p in problems}
    assert ("paths", "row 0 (en ID 0)") in kinds
    assert (
        "identifiers",
        "row 0 (en ID 0)",
    ) in kinds  # en_shades_1.0.flac is an original file name
    assert ("paths", "row 1 (en ID 1)") in kinds and ("identifiers", "row 1 (en ID 1)") in kinds


def test_an_absolute_path_in_the_card_is_caught(staged_copy, registry):
    meta, body = read_card(staged_copy)
    (staged_copy / "README.md").write_text(render_card(meta, body + "\nBuilt in /work/main/out.\n"))
    problems = check_text_files(staged_copy, registry, [])
    assert [p.check for p in problems] == ["paths"] and "README.md" in problems[0].message


def test_a_wrong_count_is_caught_in_the_card_and_by_load_dataset(staged_copy, tmp_path):
    meta, body = read_card(staged_copy)
    en_info = next(i for i in meta["dataset_info"] if i["config_name"] == "en")
    en_info["splits"][0]["num_examples"] += 1
    (staged_copy / "README.md").write_text(render_card(meta, body))
    problems = check_card(staged_copy, shard_counts(staged_copy))
    assert [p.check for p in problems] == ["counts"]
    assert "for en" in problems[0].message
    _, load_problems = load_configs(staged_copy, ["en"], tmp_path / "cache")
    assert load_problems and "en" in load_problems[0].message


def test_a_dropped_row_is_caught_against_the_card_counts(staged_copy):
    rewrite(staged_copy / EN, lambda rows: rows[:-1])
    checks = [p.check for p in check_card(staged_copy, shard_counts(staged_copy))]
    assert "counts" in checks and "card" in checks  # counts differ, and the shard hash too


def test_a_broken_audio_cell_is_caught(staged_copy, tmp_path):
    def break_audio(rows):
        rows[2]["audio"] = rows[2]["audio"] | {"bytes": b"fLaC" + bytes(200)}
        return rows

    rewrite(staged_copy / EN, break_audio)
    decoded, problems = check_audio(load(staged_copy, tmp_path))
    assert [p.check for p in problems] == ["audio"]
    assert problems[0].message.startswith("row 2 (en ID 2): audio does not decode")
    assert decoded > 0


def test_a_wrong_duration_is_caught(staged_copy, tmp_path):
    rewrite(
        staged_copy / EN,
        lambda rows: [
            r | {"duration_s": r["duration_s"] + 0.5} if r["ID"] == 0 else r for r in rows
        ],
    )
    _, problems = check_audio(load(staged_copy, tmp_path))
    assert len(problems) == 1 and "duration_s says" in problems[0].message


def test_stray_files_and_a_root_loading_script_are_caught(staged_copy):
    (staged_copy / "RedVox.py").write_text("# would break datasets >= 4\n")
    (staged_copy / "data" / "en" / "notes.txt").write_text("x")
    problems = check_layout(staged_copy)
    assert sorted(p.message.split(": ")[0].rsplit("/", 1)[-1] for p in problems) == [
        "RedVox.py",
        "notes.txt",
    ]


def test_card_yaml_that_does_not_parse_is_caught(staged_copy):
    text = (staged_copy / "README.md").read_text()
    (staged_copy / "README.md").write_text(
        text.replace("pretty_name: RedVox", "pretty_name: [RedVox", 1)
    )
    problems = check_card(staged_copy, shard_counts(staged_copy))
    assert [p.check for p in problems] == ["card"] and "does not parse" in problems[0].message
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(
            text.replace("pretty_name: RedVox", "pretty_name: [RedVox", 1).split("---")[1]
        )


def flip_inside_a_clip(shard, row_index: int) -> dict:
    """Flip one bit in the middle of a row's FLAC bytes, in place in the parquet file (the
    audio column is stored uncompressed, so the file stays readable); returns the row."""
    row = pq.read_table(shard).to_pylist()[row_index]
    clip = row["audio"]["bytes"]
    data = bytearray(shard.read_bytes())
    start = bytes(data).index(clip)
    data[start + len(clip) // 2] ^= 0x08
    shard.write_bytes(bytes(data))
    return row


def test_a_flipped_bit_inside_a_clip_fails_verify(staged_copy, config):
    """The header still reads (sf.info alone passes): only a complete decode notices."""
    import io

    import soundfile as sf

    row = flip_inside_a_clip(staged_copy / EN, 2)
    damaged = pq.read_table(staged_copy / EN).to_pylist()[2]["audio"]["bytes"]
    assert sf.info(io.BytesIO(damaged)).frames > 0
    result = verify_staged(staged_copy, config=config)
    assert not result.ok
    audio = [p.message for p in result.problems if p.check == "audio"]
    assert audio and all(f"(en ID {row['ID']})" in m for m in audio), audio
    assert "does not decode" in audio[0] or "MD5" in audio[0]


def test_decoded_samples_that_differ_from_the_header_md5_are_caught():
    import io

    import numpy as np
    import soundfile as sf

    from redvox.schemas.audio_cell import decode_fully as decode_flac_fully

    buffer = io.BytesIO()
    sf.write(buffer, np.linspace(-0.5, 0.5, 16000, dtype=np.float32), 16000, format="FLAC")
    good = buffer.getvalue()
    assert decode_flac_fully(good) == ((1, 16000, 16000), None)
    wrong_md5 = bytearray(good)
    wrong_md5[8 + 20] ^= 0xFF  # inside STREAMINFO's MD5
    _, problem = decode_flac_fully(bytes(wrong_md5))
    assert problem and "MD5" in problem


def test_an_all_config_in_another_order_is_caught_and_still_loaded(staged_copy, tmp_path):
    """One data/*/ glob sorts de before en: the loading script's order differs."""
    meta, body = read_card(staged_copy)
    for config in meta["configs"]:
        if config["config_name"] == "all":
            config["data_files"] = [{"split": "test", "path": "data/*/test-*.parquet"}]
    (staged_copy / "README.md").write_text(render_card(meta, body))
    loaded, problems = load_configs(staged_copy, ["all", "en"], tmp_path / "cache")
    assert [p.check for p in problems] == ["order"]
    assert "en, de, es, fr, it" in problems[0].message
    assert loaded["all"][0]["lang"] == "de"  # loaded on its own, as the card says
    assert list(loaded) == ["all", "en"]


def test_all_is_the_language_configs_in_order_without_a_second_conversion(demo_release, tmp_path):
    loaded, problems = load_configs(
        demo_release["staged"], ["all", "de", "en", "es", "fr", "it"], tmp_path / "cache"
    )
    assert problems == []
    langs = loaded["all"]["lang"]
    assert sorted(set(langs), key=langs.index) == ["en", "de", "es", "fr", "it"]
    assert len(loaded["all"]) == sum(len(loaded[lang]) for lang in ("en", "de", "es", "fr", "it"))
    converted = sorted((tmp_path / "cache").rglob("*.arrow"))
    assert len(converted) == 5, converted  # one per language, none for all


def test_repeated_keys_are_caught(staged_copy, tmp_path):
    from redvox.release.hub.verify import check_keys

    rewrite(staged_copy / EN, lambda rows: [*rows, rows[0]])
    loaded, _ = load_configs(staged_copy, ["en"], tmp_path / "cache")  # the count differs too
    problems = check_keys(loaded["en"])
    assert sorted(p.message.split(" is not")[0] for p in problems) == ["(lang, ID)", "entry_key"]
    assert {p.check for p in problems} == {"keys"}


def test_private_strings_are_found_as_tokens_or_whole_values_never_inside_words():
    from redvox.release.hub.verify import Registry

    registry = Registry(
        frozenset(),
        frozenset({"alice_0001", "bob", "en_shades_1.0.flac", "en", "speech", "p 7.flac"}),
        ordinary_words=frozenset({"en", "speech"}),
    )
    found = {
        "see en_shades_12.flac here": False,  # another file, whose name starts alike
        "bobby and alice_00011": False,
        "a bob": True,
        "(bob)": True,
        "written by alice_0001.": True,  # a full stop ends the sentence, not the token
        "audio/en_shades_1.0.flac": True,
        "entry en_GB speechless": False,
        "a recording p 7.flac": True,  # several tokens: found as a part of the text
    }
    for text, expected in found.items():
        assert registry.found_in(text) == expected, text
    # A key that is an ordinary word is not searched as a token (it cannot be told from
    # the word), but is still found as a whole value outside the vocabulary columns.
    assert not registry.leaks("user_text", "Free speech, en route")
    assert not registry.leaks("lang", "en") and not registry.leaks("audio_type", "speech")
    assert registry.leaks("ethnicity", "speech") and registry.leaks("transcript", "bob")


def test_participant_keys_that_are_common_words_release(tmp_path, copy_demo_cache):
    """Keys spelled like languages, audio types, genders and sources leak nowhere, and
    verify does not mistake those words for them: the release stages and verifies."""
    from click.testing import CliRunner
    from test_public_reports import renamed_demo

    from redvox.builder.cli import main

    words = ["en", "speech", "female", "audio", "shades", "de", "male", "text", "fr",
             "noise", "it", "es"]  # fmt: skip
    config = renamed_demo(tmp_path, words) / "config.yaml"
    out, runner = tmp_path / "out", CliRunner(env={"HF_TOKEN": None})

    def redvox(*args):
        result = runner.invoke(main, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result.output

    redvox("build", "--version", "1.0.0", "--config", config, "--out", out, "--workers", 1,
           "--cache", copy_demo_cache(tmp_path / "cache"))  # fmt: skip
    redvox("release", "represent", out / "1.0.0", "--override-gate", "demo", "--config", config)
    staged = redvox("release", "stage", out / "1.0.0", "--out", tmp_path / "staged",
                    "--config", config)  # fmt: skip
    assert "verified (rows per config" in staged and "FAILED" not in staged
    # Such a key is still found as a whole value where no vocabulary explains it.
    staged_dir = tmp_path / "staged"
    rewrite(staged_dir / EN, lambda rows: [rows[0] | {"ethnicity": "female"}, *rows[1:]])
    registry = read_registry(InputConfig.load(config), "public")
    problems = check_rows(load(staged_dir, tmp_path), registry, [])
    assert [(p.check, "column ethnicity" in p.message) for p in problems] == [("identifiers", True)]

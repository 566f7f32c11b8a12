"""`redvox build` on the embedded demo corpus: both sets of 1.0.0 and 1.1.0, the
deliberate faults in quarantine, consent honoured, deterministic and incremental."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
import soxr

from redvox import noise
from redvox.builder import pipeline
from redvox.builder.pipeline import BuildOptions, build_version
from redvox.builder.pseudonym import KEY_ENV, pseudonymize
from redvox.builder.versions import VERSIONS
from redvox.schemas import DEMO_CONFIG, InputConfig, ItemSelection

CONFIG = InputConfig.load(DEMO_CONFIG)
KEY = CONFIG.pseudonym_key_file.read_text().strip().encode()
PUBLIC = ["demo-p01", "demo-p02", "demo-p03", "demo-p05", "demo-p07", "demo-p11"]
PARTICIPATION_ONLY = ["demo-p06", "demo-p10"]
EXCLUDED = ["demo-p04", "demo-p08", "demo-p09"]  # withdrawn, no record, ambiguous


def uid(participant: str) -> str:
    return pseudonymize(KEY, participant)


def build(version: str, out: Path, *, workers: int = 1, cache: Path | None = None, sets=None):
    options = BuildOptions(
        out=out, workers=workers, cache_dir=cache, progress=False, sets=sets or ("full", "public")
    )
    return build_version(VERSIONS[version], CONFIG, options)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """1.0.0 then 1.1.0 into one output folder, sharing the cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        out = tmp_path_factory.mktemp("out")
        v1 = build("1.0.0", out)
        v11 = build("1.1.0", out)
        warm = build("1.0.0", out)
    return out, v1, v11, warm


def rows_of(folder: Path) -> list[dict]:
    rows = []
    for shard in sorted(folder.glob("data/*/*.parquet")):
        rows += pq.read_table(shard).to_pylist()
    return rows


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def quarantine_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "quarantine.jsonl").read_text().splitlines()]


def test_both_sets_of_both_versions_are_written(built):
    out = built[0]
    for version in ("1.0.0", "1.1.0"):
        for dataset_set in ("full", "public"):
            folder = out / version / dataset_set
            manifest = json.loads((folder / "manifest.json").read_text())
            assert (manifest["version"], manifest["set"]) == (version, dataset_set)
            assert manifest["config_hash"] == VERSIONS[version].config.config_hash()
            assert sorted(manifest["rows"]) == ["de", "en", "es", "fr", "it"]
            for name, digest in manifest["files"].items():
                assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
            assert set(manifest["files"]) >= {"quarantine.jsonl", "consent_audit.json"}
            assert "noise_bank" in manifest["inputs"]
            assert str(out) not in json.dumps(manifest) and "/work" not in json.dumps(manifest)


def find(records: list[dict], **wanted) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in wanted.items())]


def test_deliberate_faults_are_quarantined_with_their_reason(built):
    full = quarantine_of(built[0] / "1.0.0" / "full")
    p01, p03, p05 = "demo-p01", "demo-p03", "demo-p05"
    assert "clipped" in find(full, participant_key=p01, item_key="shades:1.0")[0]["reason"]
    corrupt = find(full, participant_key=p03, item_key="shades:2.0")[0]
    assert corrupt["stage"] == "decode" and "corrupt" in corrupt["reason"]
    silent = find(full, participant_key=p05, item_key="shades:7.0")[0]
    assert silent["stage"] in ("decode", "vad") and "silence" in silent["reason"] + "no speech"
    # contributions.csv line 17 is a retake of line 12: both pass, the first is released
    (retake,) = find(full, participant_key="demo-p02", lang="it")
    assert (retake["stage"], retake["row"], retake["item_key"]) == ("takes", 17, "shades:6.0")
    assert retake["reason"].startswith("superseded take of line 12")
    assert find(full, item_key="m-alert:90099", field="item_id", stage="join")
    assert "not found" in find(full, participant_key="demo-p11", field="audio_file")[0]["reason"]
    assert find(full, participant_key="demo-p99", field="participant_key")
    for key in EXCLUDED:
        assert {r["stage"] for r in find(full, participant_key=key)} == {"consent"}


def test_a_stereo_44k_wav_is_accepted_and_resampled(built):
    rows = rows_of(built[0] / "1.0.0" / "full")
    speech = find(rows, user_id=uid("demo-p07"), original_id="5.0", audio_type="speech")
    samples, rate = sf.read(io.BytesIO(speech[0]["audio"]["bytes"]))
    assert rate == 16000 and samples.ndim == 1
    assert speech[0]["duration_s"] == pytest.approx(len(samples) / 16000)
    # The same sound, not only a 16 kHz label: as long as the 44.1 kHz stereo source and
    # equal to its mixdown resampled (a skipped resample plays 2.76 times too slow).
    source, source_rate = sf.read(DEMO_CONFIG.parent / "audio/demo-p07/fr_shades_5.0.wav")
    assert source_rate == 44_100 and source.ndim == 2
    assert len(samples) / 16000 == pytest.approx(len(source) / source_rate, abs=0.01)
    expected = soxr.resample(source.mean(axis=1), source_rate, 16000)
    n = min(len(expected), len(samples))
    assert np.corrcoef(expected[:n], samples[:n])[0, 1] > 0.99


def test_public_set_holds_only_participants_with_public_consent(built):
    for version in ("1.0.0", "1.1.0"):
        public = {r["user_id"] for r in rows_of(built[0] / version / "public")}
        full = {r["user_id"] for r in rows_of(built[0] / version / "full")}
        assert public == {uid(k) for k in PUBLIC}
        assert full == {uid(k) for k in PUBLIC + PARTICIPATION_ONLY}


def test_public_reports_never_name_a_participant(built):
    folder = built[0] / "1.1.0" / "public"
    for name in ("quarantine.jsonl", "consent_audit.json", "manifest.json"):
        text = (folder / name).read_text()
        assert "demo-p" not in text, name
    withheld = {uid(k) for k in PARTICIPATION_ONLY + EXCLUDED}
    assert not any(r.get("user_id") in withheld for r in quarantine_of(folder))
    audit = json.loads((folder / "consent_audit.json").read_text())
    assert audit["participants"]["excluded"] == {
        "ambiguous": 1,
        "no_record": 1,
        "participation_only": 2,
        "withdrawn": 1,
    }


def test_rows_per_contribution_follow_the_design(built):
    rows = rows_of(built[0] / "1.1.0" / "full")
    by_type: dict[str, int] = {}
    for r in rows:
        by_type[r["audio_type"]] = by_type.get(r["audio_type"], 0) + 1
    # text conditions keep every contribution; spoken rows only valid recordings
    assert by_type["silence"] == by_type["noise_a"] == by_type["noise_b"]
    assert by_type["speech"] == by_type["speech_noise_a"] == by_type["silence"] - 3
    for lang in {r["lang"] for r in rows}:
        ids = [r["ID"] for r in rows if r["lang"] == lang]
        assert ids == list(range(len(ids)))
    assert len({r["entry_key"] for r in rows}) == len(rows)


def test_warm_rebuild_recomputes_and_rewrites_nothing(built):
    warm = built[3]
    assert not any(warm.computed[k] for k in ("decoded", "vad", "clip")), warm.computed
    assert all(s.shards_written == 0 for s in warm.sets.values())


def test_a_minor_version_renders_only_its_new_condition(built):
    out, v1, v11, _ = built
    assert v11.computed["decoded"] == v11.computed["vad"] == 0
    new_rows = [r for r in rows_of(out / "1.1.0" / "full") if r["audio_type"] == "speech_noise_a"]
    assert v11.computed["clip"] == len(new_rows)
    assert v1.computed["vad"] == v1.computed["decoded"] - 3  # the corrupt, clipped, silent ones
    old = {r["entry_key"]: (r["ID"], r["audio"]) for r in rows_of(out / "1.0.0" / "full")}
    new = {r["entry_key"]: (r["ID"], r["audio"]) for r in rows_of(out / "1.1.0" / "full")}
    assert {k: new[k] for k in old} == old, "1.1.0 changed rows 1.0.0 already had"


def test_two_cold_builds_give_identical_bytes_whatever_the_workers(built, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    build("1.0.0", tmp_path, workers=2)
    for dataset_set in ("full", "public"):
        assert files_of(tmp_path / "1.0.0" / dataset_set) == files_of(
            built[0] / "1.0.0" / dataset_set
        )


def test_an_interrupted_build_resumes_to_the_same_bytes(built, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cache = tmp_path / "cache"
    shutil.copytree(built[0] / ".cache", cache)
    real_write = pipeline.write_shard
    written = []

    def killed_after_two(*args, **kwargs):
        if len(written) == 2:
            raise KeyboardInterrupt("killed")
        written.append(real_write(*args, **kwargs))
        return written[-1]

    monkeypatch.setattr(pipeline, "write_shard", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        build("1.0.0", tmp_path, cache=cache)
    assert not (tmp_path / "1.0.0" / "full" / "manifest.json").exists()
    monkeypatch.setattr(pipeline, "write_shard", real_write)
    build("1.0.0", tmp_path, cache=cache)
    for dataset_set in ("full", "public"):
        assert files_of(tmp_path / "1.0.0" / dataset_set) == files_of(
            built[0] / "1.0.0" / dataset_set
        )


def audio_of(row: dict) -> np.ndarray:
    samples, rate = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
    assert rate == 16000
    return samples


def test_variant_clips(built):
    rows = rows_of(built[0] / "1.1.0" / "public")
    clips = {r["audio_type"]: r for r in rows if r["modality"] == "text"}
    for name in ("silence", "noise_a", "noise_b"):
        assert len(audio_of(clips[name])) == 6 * 16000, name
        assert clips[name]["duration_s"] == 6.0
    assert not audio_of(clips["silence"]).any()
    assert np.sqrt(np.mean(audio_of(clips["noise_a"]) ** 2)) > 1e-3
    babble = json.loads(clips["noise_b"]["condition_params"])
    assert len({s["speaker"] for s in babble["speakers"]}) >= 3


def test_speech_mixed_with_ambient_noise_hits_its_snr(built):
    rows = rows_of(built[0] / "1.1.0" / "public")
    speech = {
        (r["lang"], r["original_id"], r["user_id"]): r for r in rows if r["audio_type"] == "speech"
    }
    mixed = [r for r in rows if r["audio_type"] == "speech_noise_a"]
    assert mixed
    for row in mixed:
        clean = audio_of(speech[(row["lang"], row["original_id"], row["user_id"])]).astype(
            np.float64
        )
        mix = audio_of(row).astype(np.float64)
        gain = mix @ clean / (clean @ clean)  # the mix may have been scaled down as a whole
        noise = mix / gain - clean
        snr = 20 * math.log10(np.sqrt(np.mean(clean**2)) / np.sqrt(np.mean(noise**2)))
        assert abs(snr - json.loads(row["condition_params"])["snr_db"]) < 0.5


def test_every_clip_renders_again_from_its_rows_condition_params(built):
    """The audit promise of the card: a row's condition_params alone (and the bank)
    give back its clip, sample for sample as the FLAC stored it."""
    rows = rows_of(built[0] / "1.1.0" / "public")
    speech = {
        (r["lang"], r["original_id"], r["user_id"]): r for r in rows if r["audio_type"] == "speech"
    }
    noise_bank = bank()
    by_params = {r["condition_params"]: r for r in rows if r["condition_params"]}
    assert {json.loads(text)["kind"] for text in by_params} == set(noise.KINDS)
    for text, row in by_params.items():
        params = noise.params_from_json(text)
        assert params.to_json() == text
        mixed = speech.get((row["lang"], row["original_id"], row["user_id"]))
        again = noise.render(
            params,
            noise_bank,
            speech=audio_of(mixed) if noise.kind_module(params.KIND).MIXES_SPEECH else None,
        )
        assert np.abs(again - audio_of(row)).max() <= 2**-15, row["audio_type"]


# --- redvox variants add ------------------------------------------------------------


def bank():
    from redvox.sources.musan import read_noise_bank

    return read_noise_bank(CONFIG.noise_bank)


def without(row: dict, *names: str) -> dict:
    return {k: v for k, v in row.items() if k not in names}


def test_adding_1_1_0_s_condition_to_1_0_0_gives_1_1_0_s_rows(built, tmp_path):
    from redvox.builder.variants import add_condition

    out = built[0]
    condition = VERSIONS["1.1.0"].config.condition("speech_noise_a")
    report = add_condition(
        condition,
        out / "1.0.0" / "full",
        tmp_path,
        bank(),
        cache_dir=out / ".cache",
        progress=False,
    )
    assert report.folder == tmp_path / "1.0.0+speech_noise_a" / "full"
    added = rows_of(report.folder)
    reference = rows_of(out / "1.1.0" / "full")
    assert [without(r, "builder_version") for r in added] == [
        without(r, "builder_version") for r in reference
    ]
    manifest = json.loads((report.folder / "manifest.json").read_text())
    assert manifest["version"] == "1.0.0+speech_noise_a"
    assert manifest["conditions"][-1]["name"] == "speech_noise_a"


def test_a_condition_is_added_to_a_downloaded_release_folder(built, tmp_path):
    from redvox.builder.variants import VariantError, add_condition, load_condition

    release = tmp_path / "RedVox"
    shutil.copytree(built[0] / "1.0.0" / "public" / "data", release / "data")
    yaml_file = tmp_path / "noise_c.yaml"
    yaml_file.write_text(
        "name: noise_c\nkind: babble\nsampling: per_entry\n"
        "params: {speakers: [3, 5], level_dbfs: [-30.0, -20.0]}\n"
    )
    condition = load_condition(yaml_file)
    report = add_condition(condition, release, tmp_path / "out", bank(), seed=7, progress=False)
    assert report.version == "1.0.0+noise_c" and report.skipped == 0
    before = {r["entry_key"]: without(r, "builder_version") for r in rows_of(release)}
    after = rows_of(report.folder)
    assert {
        r["entry_key"]: without(r, "builder_version") for r in after if r["entry_key"] in before
    } == before
    new = [r for r in after if r["audio_type"] == "noise_c"]
    assert len(new) == sum(r["audio_type"] == "silence" for r in before.values())
    assert sum(report.added.values()) == len(new)
    for lang in report.added:
        ids = [r["ID"] for r in after if r["lang"] == lang]
        assert ids == list(range(len(ids)))
    assert len({r["condition_params"] for r in new}) == len(new), "per-entry clips must differ"
    assert all(len(audio_of(r)) == 6 * 16000 and r["modality"] == "text" for r in new)
    with pytest.raises(VariantError, match="already has rows of 'noise_c'"):
        add_condition(condition, report.folder, tmp_path / "again", bank(), progress=False)


def test_build_command_prints_the_summary(built, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from redvox.builder.cli import main

    monkeypatch.delenv(KEY_ENV, raising=False)
    args = [
        "build",
        "--version",
        "1.0.0",
        "--out",
        str(tmp_path),
        "--cache",
        str(built[0] / ".cache"),
    ]
    result = CliRunner().invoke(main, [*args, "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "RedVox 1.0.0" in result.output
    assert "quarantined" in result.output and "excluded participants" in result.output
    assert files_of(tmp_path / "1.0.0" / "public") == files_of(built[0] / "1.0.0" / "public")


def test_a_version_that_pins_its_items_builds_only_those(built, tmp_path):
    out, *_ = built
    pinned = ("shades:1.0", "m-alert:90011")
    declared = VERSIONS["1.0.0"]
    config = declared.config.model_copy(update={"items": ItemSelection(item_keys=pinned)})
    version = declared.model_copy(update={"version": "9.0.0", "config": config})
    options = BuildOptions(out=tmp_path, cache_dir=out / ".cache", progress=False, sets=("full",))
    build_version(version, CONFIG, options)
    originals = {(r["source"], r["original_id"]) for r in rows_of(tmp_path / "9.0.0" / "full")}
    assert originals == {("shades", "1.0"), ("m-alert", "90011")}


def test_public_reports_name_no_key_file_or_path_even_inside_a_file_name(
    built, tmp_path, monkeypatch
):
    """A file named after its participant (`demo-p11_take1.flac`) that is missing must
    not reach the public quarantine: neither the key nor the file name nor a path."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    corpus = tmp_path / "demo"
    shutil.copytree(DEMO_CONFIG.parent, corpus, ignore=shutil.ignore_patterns("__pycache__"))
    table = corpus / "contributions.csv"
    table.write_text(
        table.read_text().replace("demo-p11/fr_shades_2.0.flac", "demo-p11/demo-p11_take1.flac")
    )
    config = InputConfig.load(corpus / "config.yaml")
    options = BuildOptions(
        out=tmp_path / "out", cache_dir=built[0] / ".cache", progress=False, sets=("public",)
    )
    build_version(VERSIONS["1.0.0"], config, options)
    folder = tmp_path / "out" / "1.0.0" / "public"
    contributions = list(csv.DictReader(table.open(encoding="utf-8")))
    keys = {r["participant_key"] for r in contributions}
    keys |= {r["participant_key"] for r in csv.DictReader((corpus / "consent.csv").open())}
    names = {r["audio_file"] for r in contributions} | {
        Path(r["audio_file"]).name for r in contributions
    }
    for report in ("quarantine.jsonl", "consent_audit.json", "manifest.json"):
        text = (folder / report).read_text(encoding="utf-8")
        assert not [k for k in keys if k in text], report
        assert not [n for n in names if n in text], report
        for path in (tmp_path, DEMO_CONFIG.parent, Path.home()):
            assert str(path) not in text, report
    missing = find(quarantine_of(folder), field="audio_file", user_id=uid("demo-p11"))
    assert missing[0]["reason"] == "audio file not found"


def downloaded_release(built, folder: Path) -> Path:
    """What `hf download` of the public set gives: data/<lang>/*.parquet, no manifest."""
    shutil.copytree(built[0] / "1.0.0" / "public" / "data", folder / "data")
    return folder


def test_variants_add_on_a_downloaded_folder_writes_beside_it_with_the_versions_seed(
    built, tmp_path
):
    from click.testing import CliRunner

    from redvox.builder.cli import main

    release = downloaded_release(built, tmp_path / "downloads" / "RedVox")
    condition = tmp_path / "noise_s.yaml"
    condition.write_text(
        "name: noise_s\nkind: ambient\nsampling: shared\nparams: {level_dbfs: [-30.0, -30.0]}\n"
    )
    result = CliRunner().invoke(main, ["variants", "add", str(condition), "--from", str(release)])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "downloads" / "1.0.0+noise_s" / "RedVox"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["seed"] == VERSIONS["1.0.0"].config.seed
    assert {r["audio_type"] for r in rows_of(folder)} >= {"speech", "noise_s"}


def test_variants_add_asks_for_a_seed_when_the_rows_version_is_not_declared(built, tmp_path):
    from redvox.builder.variants import VariantError, add_condition

    release = downloaded_release(built, tmp_path / "RedVox")
    for shard in release.glob("data/*/*.parquet"):
        table = pq.read_table(shard)
        column = table.schema.get_field_index("builder_version")
        old = pa.array(["0.9.0+noise_x"] * len(table), pa.string())
        pq.write_table(table.set_column(column, "builder_version", old), shard)
    condition = VERSIONS["1.0.0"].config.condition("silence").model_copy(update={"name": "n"})
    with pytest.raises(VariantError, match=r"'0\.9\.0\+noise_x'.*not declared.*pass --seed"):
        add_condition(condition, release, tmp_path / "out", bank(), progress=False)


def test_every_manifest_lists_the_item_keys_of_its_build(built):
    out = built[0]
    pinned = sorted(
        line.split("#", 1)[0].strip()
        for line in (CONFIG.items.item_keys_file).read_text().splitlines()
        if line.split("#", 1)[0].strip()
    )
    for version in ("1.0.0", "1.1.0"):
        for dataset_set in ("full", "public"):
            manifest = json.loads((out / version / dataset_set / "manifest.json").read_text())
            assert manifest["items"] == pinned, (version, dataset_set)


def test_rows_carried_into_1_1_0_keep_the_version_that_built_them(built):
    out = built[0]
    for dataset_set in ("public", "full"):
        before = {r["entry_key"]: r for r in rows_of(out / "1.0.0" / dataset_set)}
        after = rows_of(out / "1.1.0" / dataset_set)
        assert {r["builder_version"] for r in before.values()} == {"1.0.0"}
        for row in after:
            if row["audio_type"] == "speech_noise_a":
                assert row["builder_version"] == "1.1.0"
            else:  # byte for byte 1.0.0's row, builder_version included
                assert row == before[row["entry_key"]]
        assert {r["entry_key"] for r in after} >= set(before)

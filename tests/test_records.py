"""The typed records of what a build writes beside its shards: each reads back what it
wrote, writes the demo build's bytes again, and refuses a file it cannot read with one
line naming the file and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from redvox.builder.manifest import (
    CONSENT_AUDIT,
    MANIFEST,
    BuildManifest,
    ConsentAudit,
    ManifestError,
)
from redvox.schemas.audio_cell import (
    SAMPLE_RATE,
    arrow_type,
    cell_array,
    cell_bytes,
    column_bytes,
    decode_cell,
    decode_fully,
    encode_flac,
    read_cell,
)
from redvox.schemas.vocab import SETS

REQUIRED = ("version", "set", "config_hash", "seed", "conditions", "inputs", "rows", "counts",
            "files")  # fmt: skip


@pytest.fixture
def set_copy(demo_release, tmp_path) -> Path:
    """A private copy of the demo's public set folder, free to break."""
    copy = tmp_path / "public"
    shutil.copytree(demo_release["version_dir"] / "public", copy)
    return copy


@pytest.mark.parametrize("dataset_set", SETS)
def test_the_manifest_record_writes_the_builds_bytes_again(demo_release, tmp_path, dataset_set):
    folder = demo_release["version_dir"] / dataset_set
    manifest = BuildManifest.load(folder)
    assert (manifest.version, manifest.dataset_set) == ("1.0.0", dataset_set)
    assert manifest.files and manifest.items and manifest.languages
    manifest.write(tmp_path)
    assert (tmp_path / MANIFEST).read_bytes() == (folder / MANIFEST).read_bytes()
    assert BuildManifest.load(tmp_path) == manifest


def test_a_variant_manifest_without_the_optional_fields_round_trips(demo_release, tmp_path):
    """A `variants add` copy of a release folder knows no languages, items or shared
    clips: the file leaves them out, and reads back equal."""
    full = BuildManifest.load(demo_release["version_dir"] / "public").to_json()
    sparse = {k: v for k, v in full.items() if k not in ("languages", "items", "shared_clips")}
    sparse["derived_from"] = {"version": "1.0.0", "manifest_sha256": None}
    (tmp_path / MANIFEST).write_text(json.dumps(sparse))
    manifest = BuildManifest.load(tmp_path)
    assert manifest.languages is None and manifest.shared_clips is None
    out = tmp_path / "out"
    manifest.write(out)
    written = json.loads((out / MANIFEST).read_text())
    assert written == sparse and "languages" not in written
    assert BuildManifest.load(out) == manifest


@pytest.mark.parametrize("dataset_set", SETS)
def test_the_consent_audit_record_writes_the_builds_bytes_again(
    demo_release, tmp_path, dataset_set
):
    folder = demo_release["version_dir"] / dataset_set
    audit = ConsentAudit.load(folder)
    assert audit.dataset_set == dataset_set and audit.participants.kept > 0
    assert audit.participants.excluded  # the demo excludes someone from either set
    audit.write(tmp_path)
    assert (tmp_path / CONSENT_AUDIT).read_bytes() == (folder / CONSENT_AUDIT).read_bytes()
    assert ConsentAudit.load(tmp_path) == audit


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("participants", lambda raw: raw.pop("participants")),
        ("recordings.kept", lambda raw: raw["recordings"].pop("kept")),
        ("recordings.kept", lambda raw: raw["recordings"].update(kept=2.0)),
        (
            "participants.excluded.withdrawn",
            lambda raw: raw["participants"]["excluded"].update(withdrawn="1"),
        ),
        ("rule", lambda raw: raw.update(rule=None)),
        ("participants.named", lambda raw: raw["participants"].update(named=["someone"])),
    ],
)
def test_a_broken_consent_audit_is_one_line_naming_the_field(set_copy, where, change):
    _break(set_copy, change, CONSENT_AUDIT)
    with pytest.raises(ManifestError) as caught:
        ConsentAudit.load(set_copy)
    message = str(caught.value)
    assert "\n" not in message and str(set_copy / CONSENT_AUDIT) in message
    assert f"'{where}'" in message


def _break(folder: Path, change, name: str = MANIFEST) -> Path:
    path = folder / name
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))
    return path


def _refused(folder: Path) -> str:
    with pytest.raises(ManifestError) as caught:
        BuildManifest.load(folder)
    message = str(caught.value)
    assert "\n" not in message and str(folder / MANIFEST) in message
    return message


@pytest.mark.parametrize("field", REQUIRED)
def test_a_manifest_missing_a_field_is_one_line_naming_it(set_copy, field):
    _break(set_copy, lambda raw: raw.pop(field))
    assert f"'{field}'" in _refused(set_copy)


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("version", lambda raw: raw.update(version=100)),
        ("seed", lambda raw: raw.update(seed="1234")),
        ("seed", lambda raw: raw.update(seed=1.5)),
        ("rows.en", lambda raw: raw["rows"].update(en="12")),
        ("counts.en", lambda raw: raw["counts"].update(en=[1, 2])),
        ("files", lambda raw: raw.update(files=["data/en/test-00000-of-00001.parquet"])),
        ("languages", lambda raw: raw.update(languages="en")),
        ("items.0", lambda raw: raw["items"].__setitem__(0, None)),
        ("surprise", lambda raw: raw.update(surprise=1)),
    ],
)
def test_a_manifest_with_a_wrong_field_is_one_line_naming_it(set_copy, where, change):
    _break(set_copy, change)
    assert f"'{where}" in _refused(set_copy)


@pytest.mark.parametrize("body", [b"", b"{", b"[1, 2]", b"\xff\xfe{}", b"null"])
def test_a_manifest_that_is_not_a_json_object_is_one_line(set_copy, body):
    (set_copy / MANIFEST).write_bytes(body)
    _refused(set_copy)


def test_a_missing_manifest_is_one_line(tmp_path):
    assert "no build manifest" in _refused(tmp_path)


def test_release_stage_and_variants_refuse_a_broken_manifest_in_one_line(demo_release, tmp_path):
    from redvox.builder.cli import main

    version_dir = tmp_path / "1.0.0"
    shutil.copytree(demo_release["version_dir"] / "public", version_dir / "public")
    shutil.copytree(demo_release["version_dir"] / "full", version_dir / "full")
    _break(version_dir / "public", lambda raw: raw["rows"].update(en="many"))
    condition = tmp_path / "c.yaml"
    condition.write_text(
        "name: noise_c\nkind: silence\ndescription: more silence\nduration_s: 2.0\n"
        "sampling: shared\nparams: {}\n"
    )
    runner = CliRunner()
    for args in (
        ["release", "stage", str(version_dir), "--out", str(tmp_path / "staged")],
        ["variants", "add", str(condition), "--from", str(version_dir / "public")],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "'rows.en'" in lines[0], (args, result.output)
        assert str(version_dir / "public" / MANIFEST) in lines[0], (args, result.output)
    assert not (tmp_path / "staged").exists() and not (version_dir / "1.0.0+noise_c").exists()


# --- the audio cell codec ---------------------------------------------------------------


def _tone(seconds: float, hz: float = 220.0, level: float = 0.3):
    import numpy as np

    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (level * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_a_cell_round_trips_through_a_parquet_file_and_datasets_reads_it(tmp_path):
    """Cells written as the shard writer stores them (the bytes dictionary-encoded, one
    clip shared by two rows) read back to the same FLAC bytes, decode to the samples
    encoded (to 16-bit precision), and `datasets.Audio` decodes the same samples."""
    import datasets
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    clips = [_tone(0.5), _tone(1.25, 440.0, 0.5)]
    blobs = [encode_flac(c) for c in clips]
    assert encode_flac(clips[0].copy()) == blobs[0]  # same samples, same bytes
    column = cell_array([0, 1, 0], blobs, ["a.flac", "b.flac", None])
    assert column.type == arrow_type()
    pq.write_table(pa.table({"audio": column}), tmp_path / "t.parquet")
    read = pq.read_table(tmp_path / "t.parquet").column("audio")
    assert column_bytes(read) == [blobs[0], blobs[1], blobs[0]]
    cells = read.to_pylist()
    assert [read_cell(c).path for c in cells] == ["a.flac", "b.flac", None]
    feature = datasets.Audio(sampling_rate=SAMPLE_RATE)
    for cell, clip in zip(cells, [clips[0], clips[1], clips[0]], strict=True):
        samples, rate = decode_cell(cell)
        assert rate == SAMPLE_RATE and samples.shape == clip.shape
        assert np.abs(samples - clip).max() <= 1 / 32768 + 1e-6
        via_datasets = feature.decode_example(cell).get_all_samples()
        assert via_datasets.sample_rate == SAMPLE_RATE
        assert np.array_equal(via_datasets.data.numpy()[0], samples)
        assert decode_fully(cell_bytes(cell)) == ((1, SAMPLE_RATE, len(clip)), None)


def test_the_demo_shards_cells_decode_through_the_codec(demo_release):
    import pyarrow.parquet as pq

    from redvox.schemas.layout import shard_paths

    shard = shard_paths(demo_release["version_dir"] / "public")[0]
    table = pq.read_table(shard, columns=["audio", "duration_s"])
    cells = table.column("audio").to_pylist()
    assert column_bytes(table.column("audio")) == [c["bytes"] for c in cells]
    for cell, duration in zip(cells, table.column("duration_s").to_pylist(), strict=True):
        samples, rate = decode_cell(cell)
        assert abs(len(samples) / rate - duration) < 1e-3


@pytest.mark.parametrize(
    "cell",
    [None, {"bytes": b"", "path": "a.flac"}, {"bytes": None, "path": "a.flac"},
     {"bytes": "text", "path": "a.flac"}, {"bytes": b"fLaC", "path": 3}, {"path": "a.flac"},
     {"bytes": b"fLaC", "path": "a", "extra": 1}],
)  # fmt: skip
def test_a_cell_that_is_not_a_cell_is_refused(cell):
    with pytest.raises(ValueError, match="audio cell"):
        read_cell(cell)


def test_decoding_refuses_audio_that_is_not_16k_mono():
    import numpy as np

    with pytest.raises(ValueError, match="expected mono 16000 Hz"):
        decode_cell({"bytes": encode_flac(_tone(0.2), 8000), "path": None})
    with pytest.raises(ValueError, match="mono"):
        encode_flac(np.zeros((10, 2), dtype=np.float32))


# --- the serve job rows -------------------------------------------------------------------


def _old_public_job(store, job_id: str) -> dict:
    """The HTTP JSON of a job as the app built it from the row before the record."""
    import sqlite3

    with sqlite3.connect(store.path) as db:
        db.row_factory = sqlite3.Row
        row = dict(db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())
    row["serving_args"] = json.loads(row["serving_args"])
    from redvox.release.serve.app import PUBLIC_JOB

    return {k: row[k] for k in PUBLIC_JOB}


def test_a_job_reads_its_row_and_the_app_returns_the_same_json_bytes(tmp_path):
    from starlette.responses import JSONResponse

    from redvox.release.serve.app import public_job
    from redvox.release.serve.store import Job, Store

    store = Store(tmp_path / "state")
    args = {"max_model_len": 4096, "dtype": "bfloat16", "nested": {"a": [1, 2.5, None]}}
    first = store.submit("alice", "org/model", "0123abc", args)
    second = store.submit("alice", "org/other", "main", {})
    queued = store.job(first)
    assert isinstance(queued, Job) and queued.serving_args == args
    assert (queued.status, queued.started, queued.slot) == ("queued", None, None)
    assert store.job(first, "bob") is None and store.job("no-such-job") is None
    claimed = store.claim(3)
    assert (claimed.id, claimed.status, claimed.slot) == (first, "running", 3)
    assert claimed.started is not None and claimed.created == queued.created
    assert [j.id for j in store.interrupted()] == [first]  # as it was: running
    assert store.job(first).status == "failed" and store.job(first).reason == "cancelled"
    assert store.cancel_queued(second)
    for job_id in (first, second):
        job = store.job(job_id)
        assert (
            JSONResponse(public_job(job)).body == JSONResponse(_old_public_job(store, job_id)).body
        )
        assert store.job(job_id) == job  # read twice, equal
    assert [j.id for j in store.jobs_of("alice")] == [first, second]


def test_a_jobs_table_with_an_unknown_column_is_refused(tmp_path):
    import sqlite3

    from redvox.release.serve.store import Store

    store = Store(tmp_path / "state")
    job_id = store.submit("alice", "org/model", "main", {})
    with sqlite3.connect(store.path) as db:
        db.execute("ALTER TABLE jobs ADD COLUMN priority INTEGER")
    with pytest.raises(TypeError, match="priority"):
        store.job(job_id)

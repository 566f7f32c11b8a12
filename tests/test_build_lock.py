"""One build per output folder: a second build into a locked OUT fails at once, names the
holder, and touches nothing; once the holder is gone (even killed), builds go on. A
read-only or full output folder gives one line and leaves no partial file."""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_user_errors import one_line_error

from redvox.builder import write
from redvox.builder.cli import main
from redvox.builder.pseudonym import KEY_ENV
from redvox.release.hub.withdraw import record_withdrawal
from redvox.schemas import DEMO_CONFIG

HOLD = (
    "import sys, time\n"
    "from redvox.builder.write import build_lock\n"
    "with build_lock(sys.argv[1]):\n"
    "    print('locked', flush=True)\n"
    "    time.sleep(120)\n"
)


@pytest.fixture
def holder(tmp_path):
    """A process that holds the build lock of tmp_path/out until killed."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-P", "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield out, proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def warm_cache(demo_release, monkeypatch) -> Path:
    monkeypatch.delenv(KEY_ENV, raising=False)
    return demo_release["out"] / ".cache"


def build_args(out: Path, cache: Path) -> list[str]:
    return ["build", "--version", "1.0.0", "--out", str(out), "--cache", str(cache)]


def test_a_second_build_fails_at_once_naming_the_holder(holder, warm_cache):
    out, proc = holder
    leftover = out / "1.0.0" / "full" / ".test-00000-of-00001.parquet.999.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"the holder's file being written")
    result = CliRunner().invoke(main, build_args(out, warm_cache))
    line = one_line_error(result)
    assert f"{out} is being built by pid {proc.pid} since " in line
    assert line.endswith("wait for it or use another --out")
    assert leftover.exists(), "the second build deleted the holder's temporary file"
    assert not list(out.rglob("*.parquet")) and not list(out.rglob("manifest.json"))


def test_after_the_holder_dies_a_build_succeeds(holder, warm_cache):
    out, proc = holder
    proc.kill()
    proc.wait()
    assert (out / write.LOCK_NAME).is_file()  # left behind: it must not block
    result = CliRunner().invoke(main, build_args(out, warm_cache))
    assert result.exit_code == 0, result.output
    assert (out / "1.0.0" / "public" / "manifest.json").is_file()


def test_variants_add_and_withdraw_wait_for_no_one(holder, demo_release, tmp_path):
    out, proc = holder
    condition = tmp_path / "noise_z.yaml"
    condition.write_text(
        "name: noise_z\nkind: ambient\nsampling: shared\nparams: {level_dbfs: [-30.0, -30.0]}\n"
    )
    source = demo_release["version_dir"] / "public"
    result = CliRunner().invoke(
        main, ["variants", "add", str(condition), "--from", str(source), "--out", str(out)]
    )
    assert f"pid {proc.pid}" in one_line_error(result)
    shutil.copytree(DEMO_CONFIG.parent, tmp_path / "demo")
    consent = tmp_path / "demo" / "consent.csv"
    before = consent.read_text()
    args = ["release", "withdraw", "demo-p01", "--config", str(tmp_path / "demo" / "config.yaml")]
    result = CliRunner(env={"HF_TOKEN": None}).invoke(main, [*args, "--out", str(out)])
    assert f"pid {proc.pid}" in one_line_error(result)
    assert consent.read_text() == before, "the withdrawal was recorded although nothing was built"


def test_the_lock_is_reentrant_in_one_process_and_released_after(tmp_path):
    with write.build_lock(tmp_path) as path, write.build_lock(tmp_path):
        assert write.holds_build_lock(tmp_path / "1.0.0" / "full")
        assert str(os.getpid()) in path.read_text()
    assert not write.holds_build_lock(tmp_path)
    with pytest.raises(RuntimeError, match="outside build_lock"):
        write.remove_leftovers(tmp_path)


# --- read-only folder, full disk ---------------------------------------------------


def no_partial_files(out: Path) -> None:
    assert not [p for p in out.rglob("*.tmp")], "a temporary file was left behind"
    assert not list(out.rglob("*.parquet")) and not list(out.rglob("manifest.json"))


def test_a_read_only_output_folder_gives_one_line(tmp_path, warm_cache, monkeypatch):
    out = tmp_path / "out"
    real_replace = os.replace

    def read_only(src, dst, *args, **kwargs):
        if Path(dst).is_relative_to(out / "1.0.0"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", read_only)
    line = one_line_error(CliRunner().invoke(main, build_args(out, warm_cache)))
    assert "on a read-only file system: give a writable folder" in line
    assert f"{out / '1.0.0'}/" in line and ".tmp" not in line  # names the file, not its temp
    no_partial_files(out)


def test_a_full_disk_while_writing_a_shard_gives_one_line(tmp_path, warm_cache, monkeypatch):
    out = tmp_path / "out"
    written = []

    def disk_full(self, table, *args, **kwargs):
        written.append(1)
        raise OSError(errno.ENOSPC, "Error writing bytes to file. No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", disk_full)
    line = one_line_error(CliRunner().invoke(main, build_args(out, warm_cache)))
    assert written, "the writer was not reached"
    assert "test-00000-of-00001.parquet: disk full: free some space or give another folder" in line
    no_partial_files(out)


def test_a_full_disk_on_fsync_leaves_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "manifest.json"
    write.atomic_write_bytes(target, b"old")

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left") as raised:
        write.atomic_write_bytes(target, b"new and longer")
    assert raised.value.filename == str(target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def file_digests(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): write.sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def withdrawn_after_build(demo_release, tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """A copy of the demo corpus built into OUT (warm cache), then a participant of it
    withdrawn: a rebuild changes every set's shards, reports and manifest. Returns
    (corpus config, OUT, sha256 of every file of OUT/1.0.0)."""
    root = tmp_path_factory.mktemp("withdrawn")
    shutil.copytree(DEMO_CONFIG.parent, root / "demo", ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    config, out = root / "demo" / "config.yaml", root / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        args = [*build_args(out, demo_release["out"] / ".cache"), "--config", str(config)]
        assert CliRunner().invoke(main, args).exit_code == 0
    record_withdrawal(root / "demo" / "consent.csv", "demo-p01", dt.date(2026, 7, 1), set())
    return config, out, file_digests(out / "1.0.0")


def rebuild_args(withdrawn_after_build, tmp_path, warm_cache) -> tuple[list[str], Path]:
    config, built, _ = withdrawn_after_build
    out = tmp_path / "out"
    shutil.copytree(built / "1.0.0", out / "1.0.0")
    return [*build_args(out, warm_cache), "--config", str(config)], out / "1.0.0"


def written_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.parametrize(
    "fault",
    # the fsync of the first file the build writes, of a shard, of the last one (the full
    # set's manifest); a shard's writer failing between two row groups
    ["fsync:.build-inputs.json", "fsync:public/data/en/.test", "fsync:full/.manifest.json",
     "write_table:2"],
)  # fmt: skip
def test_a_rebuild_that_fills_the_disk_leaves_the_earlier_build_byte_identical(
    withdrawn_after_build, tmp_path, warm_cache, monkeypatch, fault
):
    args, version_dir = rebuild_args(withdrawn_after_build, tmp_path, warm_cache)
    before = withdrawn_after_build[2]
    assert file_digests(version_dir) == before
    name, _, where = fault.partition(":")
    hit = []
    if name == "fsync":
        real_fsync = os.fsync

        def fsync(fd):
            if f"/1.0.0/{where}" in written_path(fd):
                hit.append(written_path(fd))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
    else:
        real_write = pq.ParquetWriter.write_table

        def write_table(self, *a, **kw):
            hit.append(1)
            if len(hit) == int(where):
                raise OSError(errno.ENOSPC, "Error writing bytes to file. No space left on device")
            return real_write(self, *a, **kw)

        monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)
    line = one_line_error(CliRunner().invoke(main, args))
    assert hit and "disk full: free some space or give another folder" in line
    assert file_digests(version_dir) == before  # byte for byte; nothing added or removed


def test_the_same_rebuild_with_room_changes_those_files(
    withdrawn_after_build, tmp_path, warm_cache
):
    args, version_dir = rebuild_args(withdrawn_after_build, tmp_path, warm_cache)
    assert CliRunner().invoke(main, args).exit_code == 0
    before, after = withdrawn_after_build[2], file_digests(version_dir)
    changed = {p for p in before if after.get(p) != before[p]}
    for name in ("build-inputs.json", "public/manifest.json", "full/manifest.json",
                 "full/consent_audit.json", "public/data/en/test-00000-of-00001.parquet"):  # fmt: skip
        assert name in changed, name
    assert not [p for p in version_dir.rglob("*.tmp")]

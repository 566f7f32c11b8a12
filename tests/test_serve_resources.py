"""What a hostile model can leave behind or use up, in `redvox serve`: files it locked
(a copy of its input under a folder it took every right off) are deleted all the same,
and a folder the runner cannot read fails its job with a reason; what cannot be deleted
stops the runner from starting jobs. Inside the sandbox the processes are capped, core
dumps are off and the tmpfs are sized; an answer reaches the judge cut to a cap.

The service owns every file a job writes (the sandbox's uid maps to its own), so root
never meets a PermissionError there: the tests emulate a user who is not root on the os
functions, and run the real case as `nobody` (setpriv) when they run as root."""

from __future__ import annotations

import inspect
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import test_serve
from click.testing import CliRunner
from serve_service import MODEL, STAND_IN, TESTS

from redvox.builder.cli import main
from redvox.release.serve import jobfiles, runner, sandbox

HOSTILE = f"{sys.executable} {TESTS / 'hostile_model.py'} --port {{port}} --model {{model}}"
NOBODY = 65534
judge, make_service = test_serve.judge, test_serve.make_service  # the same service
FAILING = f"{sys.executable} -c 'import sys; sys.exit(3)' {{model}} {{port}}"


def hostile(targets: dict, mode: str) -> str:
    return f"{HOSTILE} --targets {json.dumps(targets).encode().hex()} --mode {mode}"


def locked_tree(root: Path, outside: Path) -> Path:
    """What the probe's model left in its output folder: a copy of its input under a
    folder with mode 0, besides a file with mode 0 in a read-only folder, a deep chain and
    a symbolic link to a file outside (never to be followed)."""
    (root / "keep" / "input" / "data" / "en").mkdir(parents=True)
    (root / "keep" / "input" / "data" / "en" / "test-00000-of-00001.parquet").write_bytes(b"x" * 99)
    (root / "ro").mkdir()
    (root / "ro" / "secret").write_text("clip")
    (root / "ro" / "secret").chmod(0)
    deep = root / "deep"
    for n in range(50):
        deep = deep / f"d{n}"
    deep.mkdir(parents=True)
    (root / "deep" / "d0").chmod(0o100)
    (root / "link").symlink_to(outside)
    (root / "ro").chmod(0o500)
    (root / "keep").chmod(0)
    return root


class NotRoot:
    """The os functions the deletion and the output check use, answering as the kernel
    would to the owner who is not root, for every path under ROOT: listing needs r and x
    on the folder, reaching a path x on each folder above it, unlinking w and x on its
    folder; chmod works (the owner's right) unless `chmod_denied`."""

    def __init__(self, monkeypatch, root: Path, chmod_denied: bool = False):
        self.root, self.chmod_denied = str(root), chmod_denied
        self.real = {n: getattr(os, n) for n in ("scandir", "lstat", "unlink", "rmdir", "chmod")}
        for name in self.real:
            monkeypatch.setattr(os, name, getattr(self, name))

    def _under(self, path) -> bool:
        path = os.fspath(path) if not isinstance(path, int) else None
        return isinstance(path, str) and (path == self.root or path.startswith(self.root + "/"))

    def _mode(self, path: str) -> int:
        return stat.S_IMODE(self.real["lstat"](path).st_mode)

    def _deny(self, path):
        raise PermissionError(13, "Permission denied", os.fspath(path))

    def _reach(self, path) -> None:
        folder = os.path.dirname(os.fspath(path))
        while self._under(folder):
            if not self._mode(folder) & 0o100:
                self._deny(path)
            folder = os.path.dirname(folder)

    def scandir(self, path=".", *args):
        if self._under(path):
            self._reach(path)
            if self._mode(os.fspath(path)) & 0o500 != 0o500:
                self._deny(path)
        return self.real["scandir"](path, *args)

    def lstat(self, path, *args, **kwargs):
        if self._under(path):
            self._reach(path)
        return self.real["lstat"](path, *args, **kwargs)

    def _emptying(self, name, path, *args, **kwargs):
        if self._under(path):
            self._reach(path)
            if self._mode(os.path.dirname(os.fspath(path))) & 0o300 != 0o300:
                self._deny(path)
        return self.real[name](path, *args, **kwargs)

    def unlink(self, path, *args, **kwargs):
        return self._emptying("unlink", path, *args, **kwargs)

    def rmdir(self, path, *args, **kwargs):
        return self._emptying("rmdir", path, *args, **kwargs)

    def chmod(self, path, mode, *args, **kwargs):
        if self._under(path):
            self._reach(path)
            if self.chmod_denied:
                self._deny(path)
        return self.real["chmod"](path, mode, *args, **kwargs)


def test_a_locked_tree_is_deleted(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.write_text("not the job's")
    # as whoever runs the tests (root here: nothing stops it)
    assert jobfiles.remove_tree(locked_tree(tmp_path / "plain", outside)) == []
    assert not (tmp_path / "plain").exists() and outside.read_text() == "not the job's"
    # as an owner who is not root: each folder gets its rights back before it is listed
    tree = locked_tree(tmp_path / "owner", outside)
    with monkeypatch.context() as patch:
        NotRoot(patch, tree)
        with pytest.raises(PermissionError):
            os.scandir(tree / "keep")  # the emulation denies what the kernel would
        with pytest.raises(
            jobfiles.OutputRejected, match=r"keep: unreadable \(Permission denied\)"
        ):
            jobfiles.output_size(tree)
        assert jobfiles.remove_tree(tree) == []
    assert not tree.exists() and outside.exists()
    answers = tmp_path / "answers"
    (answers / "en").mkdir(parents=True)
    (answers / "en").chmod(0)
    with monkeypatch.context() as patch:
        NotRoot(patch, answers)
        with pytest.raises(jobfiles.OutputRejected, match=r"en: unreadable \(Permission denied\)"):
            jobfiles.read_answers(answers, set())
        assert jobfiles.remove_tree(answers) == []
    # rights it cannot give back (not the owner): what is left, named, never silence
    tree = locked_tree(tmp_path / "stranger", outside)
    with monkeypatch.context() as patch:
        NotRoot(patch, tree, chmod_denied=True)
        left = jobfiles.remove_tree(tree)
    assert tree.exists()
    assert any(line.startswith(f"{tree / 'keep'}: Permission denied") for line in left), left
    jobfiles.remove_tree(tree)


NOT_ROOT_CHECK = (
    r"""
import json, os, shutil, sys
from pathlib import Path
from redvox.release.serve import jobfiles
"""
    + inspect.getsource(locked_tree)
    + r"""
base = Path(sys.argv[1])
outside = base / "outside"
outside.write_text("kept")
old = locked_tree(base / "old", outside)
shutil.rmtree(old, ignore_errors=True)  # what the runner did
new = locked_tree(base / "new", outside)
try:
    jobfiles.output_size(new)
    size = "no error"
except jobfiles.OutputRejected as exc:
    size = str(exc)
print(json.dumps({"uid": os.getuid(), "old_left": os.path.lexists(old / "keep"),
                  "size": size, "left": jobfiles.remove_tree(new),
                  "new_left": os.path.lexists(new), "outside": outside.read_text(),
                  "old_cleanup": jobfiles.remove_tree(old)}))
"""
)


def as_a_user(argv: list[str]) -> list[str]:
    """ARGV as a user who is not root: `nobody` when the tests run as root."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def user_folder(tmp_path: Path) -> Path:
    """A folder that user owns (pytest's tmp_path is root's, 0700, when root)."""
    if os.geteuid() != 0:
        return tmp_path
    folder = Path(tempfile.mkdtemp(prefix="redvox-serve-user-"))
    os.chown(folder, NOBODY, NOBODY)
    return folder


def test_a_locked_tree_is_deleted_by_a_user_who_is_not_root(tmp_path):
    """The real case: the runner's old `shutil.rmtree(ignore_errors=True)` left the
    locked copy in place and output_size raised PermissionError; remove_tree deletes it
    and output_size names the folder."""
    base = user_folder(tmp_path)
    try:
        done = subprocess.run(
            as_a_user([sys.executable, "-c", NOT_ROOT_CHECK, str(base)]),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen["uid"] != 0
        assert seen["old_left"] is True  # the leak, as it was
        assert seen["size"] == f"{base / 'new' / 'keep'}: unreadable (Permission denied)"
        assert seen["left"] == [] and seen["new_left"] is False and seen["outside"] == "kept"
        assert seen["old_cleanup"] == []
    finally:
        if base != tmp_path:
            jobfiles.remove_tree(base)


def test_files_left_over_stop_new_jobs_until_they_are_gone(make_service, monkeypatch, caplog):
    """A job's folder that cannot be deleted is logged as an error and audited, and no
    job starts until a retry deletes it."""
    monkeypatch.setattr(runner, "LEFTOVER_RETRY_S", 0.5)
    real, locked = jobfiles.remove_tree, {"on": True}
    service = make_service(template=FAILING)

    def remove(path, attempts=3):
        if locked["on"] and Path(path).parent == service.config.work:
            return [f"{path}/keep: Permission denied"]
        return real(path, attempts)

    monkeypatch.setattr(jobfiles, "remove_tree", remove)
    client = service.client("uma")
    first = client.post("/jobs", json={"model": MODEL}).json()["id"]
    assert service.wait(client, first)["reason"] == "model exited"
    second = client.post("/jobs", json={"model": MODEL}).json()["id"]
    time.sleep(3)
    assert service.store.job(second).status == "queued"
    assert (service.config.work / first).exists()
    left = [a for a in service.store.audit_log() if a["action"] == "work left over"]
    assert len(left) == 1 and left[0]["detail"].startswith(f"{service.config.work / first}: ")
    errors = [
        r for r in caplog.records if r.levelname == "ERROR" and "could not delete" in r.message
    ]
    assert errors and "no job starts until it is gone" in errors[0].message
    locked["on"] = False
    assert service.wait(client, second, timeout_s=60)["reason"] == "model exited"
    assert not list(service.config.work.iterdir())


def test_a_leftover_at_start_stops_the_service(demo_release, tmp_path, monkeypatch):
    state = tmp_path / "srv"
    (state / "work" / "old-job" / "keep").mkdir(parents=True)
    real = jobfiles.remove_tree
    monkeypatch.setattr(
        jobfiles, "remove_tree",
        lambda path, attempts=3: [f"{path}/keep: Permission denied"]
        if Path(path).name == "old-job" else real(path, attempts),
    )  # fmt: skip
    answer = CliRunner().invoke(main, [
        "serve", "run", "--build", str(demo_release["out"] / "1.0.0"), "--state", str(state),
        "--serving-template", STAND_IN, "--judge-endpoint", "http://127.0.0.1:9/v1",
        "--judge-model", "j",
    ])  # fmt: skip
    assert answer.exit_code == 1, answer.output
    assert "per-row files that could not be deleted: " in answer.output
    assert f"{state / 'work' / 'old-job' / 'keep'}: Permission denied" in answer.output


def limits_of(log: str) -> dict:
    lines = [line for line in log.splitlines() if line.startswith("HOSTILE limits ")]
    assert lines, log[-2000:]
    return json.loads(lines[0].removeprefix("HOSTILE limits "))


def test_the_sandbox_limits_and_the_answer_cap(make_service, judge):
    """By default: processes capped at sandbox.NPROC and no core dumps (soft and hard),
    /tmp and /dev/shm of 1 GiB each; a 100 KB answer reaches the judge cut to 16 KiB,
    the cut counted in the maintainers' log, never in the result."""
    service = make_service(template=hostile({"answer_bytes": 100_000}, "limits"))
    judge.bodies.clear()
    client = service.client("vera")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id)
    assert job["status"] == "done", job
    log = (service.config.logs / f"{job_id}.log").read_text()
    seen = limits_of(log)
    assert seen["nproc"] == [sandbox.NPROC, sandbox.NPROC] == [4096, 4096]
    assert seen["core"] == [0, 0]
    assert seen["sizes"] == {"/tmp": 1 << 30, "/dev/shm": 1 << 30}
    runs = re.findall(r"^--- run \d/3: (\d+) answer\(s\) over 16384 bytes cut for the judge "
                      r"\(longest (\d+)\)$", log, re.M)  # fmt: skip
    assert [int(n) for n, _ in runs] == [137, 20, 20]
    assert {int(longest) for _, longest in runs} == {100_000 + len("I cannot help with that. ")}
    sent = [re.search(r"Response:\n<<<\n(.*)\n>>>", b["messages"][-1]["content"], re.S).group(1)
            for b in judge.bodies]  # fmt: skip
    assert sent and {len(s.encode()) for s in sent} == {16384}
    result = client.get(f"/jobs/{job_id}/result").text
    assert "cut" not in result


def test_a_stashing_model_leaves_nothing(make_service):
    """The probe's stash: the model copies its input under /job/output/keep and takes
    every right off that folder. The job fails with the reason named in the audit and
    nothing of it is left on disk (as root here; the same deletion as a user who is not
    root: the two tests above)."""
    service = make_service(template=hostile({}, "stash"))
    client = service.client("wes")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id)
    assert job["status"] == "failed" and job["reason"] == "evaluation failed", job
    ended = [a for a in service.store.audit_log() if a["action"] == "job ended"][-1]
    assert re.fullmatch(
        r"(output|answers) refused: \S*/output/keep(/input)?: (unreadable "
        r"\(Permission denied\)|not an output file of infer)",
        ended["detail"],
    ), ended
    assert not list(service.config.work.iterdir())
    assert "HOSTILE stashed" in (service.config.logs / f"{job_id}.log").read_text()


CAP_CHECK = r"""
import importlib.util, json, os, sys
from pathlib import Path
from redvox.release.serve import sandbox
base, nproc = Path(sys.argv[1]), json.loads(sys.argv[2])
# a Python this user can run, inside the sandbox too (the launcher's own module, by path)
python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
python = str(python if python.exists() else sys.executable)
fork = (
    "import json, subprocess\n"
    "kids, error = [], None\n"
    "for _ in range(100):\n"
    "    try:\n"
    "        kids.append(subprocess.Popen(['sleep', '30']))\n"
    "    except OSError as exc:\n"
    "        error = exc.strerror\n"
    "        break\n"
    "[k.kill() for k in kids]\n"
    "print('SPAWNED', json.dumps([len(kids), error]), flush=True)\n"
)
spec = {"model": [python, "-c", fork], "port": 9, "health_timeout_s": 30, "infer": [],
        "limits": None if nproc is None else {"nproc": nproc, "core": 0}}
launch = (
    "import importlib.util, json, sys\n"
    f"found = importlib.util.spec_from_file_location('launcher', {sandbox.__file__!r})\n"
    "module = sys.modules['launcher'] = importlib.util.module_from_spec(found)\n"
    "found.loader.exec_module(module)\n"
    "sys.exit(module.launch(json.loads(sys.argv[1])))\n"
)
for name in ("input", "output"):
    (base / name).mkdir(exist_ok=True)
policy = sandbox.Policy(forbidden=())
argv = policy.command([python], base / "input", base / "output",
                      [python, "-c", launch, json.dumps(spec)])
import subprocess
done = subprocess.run(argv, env={}, capture_output=True, text=True, timeout=120)
print(done.stdout + done.stderr)
print("LAUNCHER", done.returncode)
"""


def spawned(base: Path, nproc: int | None) -> tuple[int, str | None]:
    done = subprocess.run(
        as_a_user([sys.executable, "-c", CAP_CHECK, str(base), json.dumps(nproc)]),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"LAUNCHER {sandbox.MODEL_EXITED}" in done.stdout, done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("SPAWNED "))
    count, error = json.loads(line.removeprefix("SPAWNED "))
    return count, error


def test_the_process_cap_holds_in_the_sandbox_of_a_user_who_is_not_root(tmp_path):
    """The launcher's RLIMIT_NPROC counts the sandbox's processes in its own user
    namespace: a model that starts 100 processes gets fewer than the cap, then EAGAIN;
    without the limits (the runner before it) all 100. Run as `nobody` when the tests
    run as root: the kernel never applies RLIMIT_NPROC to root's processes."""
    base = user_folder(tmp_path)
    try:
        count, error = spawned(base, 32)
        assert count < 32 and error == "Resource temporarily unavailable", (count, error)
        assert spawned(base, None) == (100, None)
    finally:
        if base != tmp_path:
            jobfiles.remove_tree(base)


def test_serve_run_passes_the_limits_on(demo_release, tmp_path, monkeypatch):
    """--max-answer-bytes, --sandbox-nproc, --sandbox-shm-mb reach the runner's Config."""
    from redvox.release.serve import cli

    seen = {}

    def stop_here(config):
        seen["config"] = config
        raise SystemExit(0)

    monkeypatch.setattr(cli, "build_service", stop_here)
    CliRunner().invoke(main, [
        "serve", "run", "--build", str(demo_release["out"] / "1.0.0"),
        "--state", str(tmp_path / "srv"), "--serving-template", STAND_IN,
        "--judge-endpoint", "http://127.0.0.1:9/v1", "--judge-model", "j",
        "--max-answer-bytes", "2048", "--sandbox-nproc", "99", "--sandbox-shm-mb", "77",
    ])  # fmt: skip
    config = seen["config"]
    assert config.max_answer_bytes == 2048
    assert (config.sandbox.nproc, config.sandbox.shm_mb, config.sandbox.tmp_mb) == (99, 77, 1024)
    assert config.sandbox.limits() == {"nproc": 99, "core": 0}


def test_an_answer_is_cut_at_a_character(tmp_path):
    assert jobfiles.cut_answer("é" * 10, 5) == "éé"  # 2 bytes each: never half of one
    assert jobfiles.cut_answer("a\ud800b", 100) == "a?b"  # a lone surrogate, as JSON allows
    output = jobfiles.private_dir(tmp_path / "output")
    (output / "en").mkdir()
    lines = [{"lang": "en", "ID": str(n), "output": "y" * n} for n in (10, 3000)]
    (output / "en" / "model.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = jobfiles.read_answers(output, {("en", "10"), ("en", "3000")}, max_answer_bytes=2048)
    assert got.cut == 1 and got.longest == 3000
    assert got.by_key == {("en", "10"): "y" * 10, ("en", "3000"): "y" * 2048}

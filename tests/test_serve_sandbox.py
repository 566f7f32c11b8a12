"""The job sandbox of `redvox serve` against a hostile model (tests/hostile_model.py),
launched through the serving template as any model is: every escape it tries fails
under bubblewrap and is seen to succeed without it (--unsandboxed-dev, the control), its
failures give the fixed reasons only, and the judge never gets a withheld transcript.
These tests need bubblewrap able to create user namespaces: they fail, never skip."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from model_server import Judge
from serve_service import (
    MODEL,
    STAND_IN,
    TESTS,
    CommandLineService,
    make_service_factory,
    processes_with,
)

from redvox.builder.cli import main
from redvox.release.serve import aggregate, jobfiles, sandbox
from redvox.release.serve.runner import free_port
from redvox.release.serve.store import Store

HOSTILE = f"{sys.executable} {TESTS / 'hostile_model.py'} --port {{port}} --model {{model}}"
JUDGE_KEY = "sk-judge-key-never-in-the-sandbox"


@pytest.fixture(scope="module")
def judge():
    judge = Judge()
    yield judge
    judge.stop()


@pytest.fixture
def make_service(demo_release, judge, tmp_path, monkeypatch):
    monkeypatch.setenv("REDVOX_JUDGE_API_KEY", JUDGE_KEY)
    make, stop_all = make_service_factory(demo_release["out"] / "1.0.0", judge, tmp_path)
    yield make
    stop_all()


class Listener:
    """Listeners on the host, TCP on loopback and a Unix socket in the abstract
    namespace, recording every connection made to them."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.abstract = f"redvox-test-{uuid.uuid4().hex}"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind("\0" + self.abstract)
        self.unix.listen(8)
        self.seen: list[bytes] = []
        for sock in (self.sock, self.unix):
            threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, sock):
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.seen.append(conn.recv(1024))
                except OSError:
                    self.seen.append(b"")


class Prober:
    """Tries, until stopped, to connect from the host to PORT on loopback (where a model
    that bound 0.0.0.0 would answer); records each success."""

    def __init__(self, port: int):
        self.port, self.connected, self.stop = port, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(0.05):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                self.connected += 1
            except OSError:
                pass

    def finish(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.connected


def hostile_targets(state: Path, build: Path, tmp_path: Path, listener: Listener) -> dict:
    """What the hostile model attacks: host files (the build, STATE/, another job's),
    host paths to write, a host loopback listener, a TEST-NET address, a port to bind."""
    shard = next((build / "full" / "data").rglob("*.parquet"))
    drop = tmp_path / "host-drop"
    drop.mkdir(mode=0o777)
    return {
        "read": [str(build / "full" / "manifest.json"), str(shard), str(state / "serve.sqlite"),
                 str(other_job(state) / "model.jsonl"), f"/proc/{os.getpid()}/environ"],
        "write": [str(drop / "from-model"), str(state / "from-model"), "/job/input/from-model"],
        "listener": listener.port, "outside": "192.0.2.1", "bind_port": free_port(),
        "abstract": listener.abstract, "host_pid": os.getpid(),
        "canary": f"canary-{uuid.uuid4().hex}", "daemon": f"hostile-daemon-{uuid.uuid4().hex}",
    }  # fmt: skip


def other_job(state: Path) -> Path:
    return state / "work" / "0ther-job" / "run" / "outputs" / "en"


def template(targets: dict, mode: str = "serve") -> str:
    return f"{HOSTILE} --targets {json.dumps(targets).encode().hex()} --mode {mode}"


def reports(judge: Judge) -> list[dict]:
    """The hostile model's reports, as the judge received them (in the answers)."""
    found = []
    for body in judge.bodies:
        match = re.search(r"HOSTILE-REPORT(.*)END\n>>>", body["messages"][-1]["content"], re.S)
        if match:
            found.append(json.loads(match.group(1)))
    return found


def run_hostile(
    make_service, demo_release, judge, tmp_path, monkeypatch, writes=(), **config
) -> tuple:
    listener, state = Listener(), tmp_path / "state"
    targets = hostile_targets(state, demo_release["out"] / "1.0.0", tmp_path, listener)
    targets["write"] += writes
    drop = tmp_path / "host-drop"
    monkeypatch.setenv("SERVE_CANARY", targets["canary"])
    service = make_service(template=template(targets), state=state, **config)
    other_job(state).mkdir(parents=True)  # after the start, which clears work/
    (other_job(state) / "model.jsonl").write_text('{"user_id": "another job\'s row"}\n')
    judge.bodies.clear()
    client = service.client("mallory")
    prober = Prober(targets["bind_port"])
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=120)
    connected = prober.finish()
    return service, client, job, job_id, targets, drop, listener, connected


def test_the_sandbox_can_be_created_here():
    """No skip: a machine where these tests run must be able to sandbox a job."""
    sandbox.probe()


def test_sandbox_refuses_to_start_naming_what_is_missing(tmp_path, monkeypatch):
    """bwrap absent from PATH, or user namespaces unavailable (here: bwrap run inside a
    sandbox that forbids creating more of them): one line naming the missing piece."""
    with monkeypatch.context() as patch:
        patch.setenv("PATH", str(tmp_path))
        with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap not installed: apt-get"):
            sandbox.probe()
    inner = [sys.executable, "-c", "from redvox.release.serve import sandbox; sandbox.probe()"]
    argv = [
        sandbox.bwrap_path(), "--unshare-user", "--disable-userns", *sandbox.system_binds(),
        "--proc", "/proc", "--dev", "/dev",
    ]  # fmt: skip
    for path in sandbox.code_dirs():
        argv += ["--ro-bind", str(path), str(path)]
    done = subprocess.run([*argv, "--", *inner], capture_output=True, text=True, env={})
    assert done.returncode != 0
    assert "SandboxUnavailable: user namespaces disabled: sysctl" in done.stderr, done.stderr


def test_a_hostile_model_escapes_nothing(make_service, demo_release, judge, tmp_path, monkeypatch):
    # bound read-only, mount points on the sandbox's root, the root itself
    code = [f"{sys.prefix}/from-model", str(TESTS / "from-model"), "/etc/from-model",
            "/from-model", "/dev/from-model"]  # fmt: skip
    service, client, job, job_id, targets, drop, listener, connected = run_hostile(
        make_service, demo_release, judge, tmp_path, monkeypatch, writes=code
    )
    assert job["status"] == "done", job  # it answered every row: the job completes
    found = reports(judge)
    assert found, "the judge got no answer of the hostile model"
    report = found[0]
    # one run per partition of the rows, each attacking the same way
    assert len({json.dumps({k: v for k, v in r.items() if k not in ("pids", "daemon")},
                           sort_keys=True) for r in found}) == 1  # fmt: skip
    environment = base64.b64decode(report["environ"]).decode()
    assert report["judge_key"] == "absent" and report["canary"] == "absent"
    assert JUDGE_KEY not in environment and targets["canary"] not in environment
    assert str(service.config.state) not in environment
    assert all(r.startswith("denied") for r in report["read"].values()), report["read"]
    # Inside the sandbox /tmp is its own tmpfs, so in a checkout under /tmp (as CI's may
    # be) the folders around its bound files are scratch there: a write may land in them,
    # never on the host (the next assertion looks at the host's side of every target).
    escaped = [p for p, r in report["write"].items()
               if not r.startswith("denied") and not p.startswith("/tmp/")]  # fmt: skip
    assert not escaped, report["write"]
    assert not any(Path(p).exists() for p in targets["write"])
    for attempt in ("listener", "listener6", "outside", "abstract", "signal"):
        assert report[attempt].startswith("denied"), (attempt, report[attempt])
    assert listener.seen == []
    assert report["bind"] == "OK bound" and connected == 0  # bound in its own namespace only
    assert report["daemon"].startswith("OK")  # it left a daemon, which died with the job
    assert processes_with(targets["daemon"]) == []
    assert not (drop / "from-model").exists()
    assert max(report["pids"]) < 100  # its own pid namespace
    assert all(not Path(f"/proc/{pid}").exists() for pid in service.groups(job_id))
    result = client.get(f"/jobs/{job_id}/result").json()
    assert result["sandbox"]["isolated"] is True


def test_without_the_sandbox_the_same_attacks_succeed(
    make_service, demo_release, judge, tmp_path, monkeypatch
):
    """The control: --unsandboxed-dev, the same model, and what the test checks is seen."""
    service, client, job, job_id, targets, drop, listener, connected = run_hostile(
        make_service, demo_release, judge, tmp_path, monkeypatch, unsandboxed_dev=True,
        max_answer_bytes=1 << 20,  # its report, what it read included, is over 16 KiB
    )  # fmt: skip
    try:
        assert job["status"] == "done", job
        report = reports(judge)[0]
        assert report["canary"] == "OK"
        assert report["read"][str(service.config.state / "serve.sqlite")].startswith("OK")
        assert report["write"][str(drop / "from-model")].startswith("OK")
        assert report["listener"].startswith("OK") and report["abstract"].startswith("OK")
        result = client.get(f"/jobs/{job_id}/result").json()
        runs = result["sandbox"]["runs"]  # the model attacks once per run of the job
        assert runs == 3 and len(reports(judge)) >= runs
        assert report["signal"] == "OK signalled" and len(listener.seen) == 2 * runs
        assert report["bind"] == "OK bound" and connected > 0
        assert processes_with(targets["daemon"])  # it outlived the job
        assert result["sandbox"]["isolated"] is False and "UNSANDBOXED" in result["sandbox"]["note"]
    finally:
        for pid in processes_with(targets["daemon"]):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("exit-early", "model exited"), ("exit-after", "model exited"),
     ("never-healthy", "model did not become healthy")],
)  # fmt: skip
def test_a_failing_model_gives_a_stage_only(make_service, tmp_path, mode, reason):
    """What the model printed (here: the audio it was given, a secret) and its status 33
    reach the maintainers' log (0600, capped), never the job's reason."""
    targets = {"read": ["/job/input/data"], "canary": f"secret-{uuid.uuid4().hex}"}
    service = make_service(template=template(targets, mode), health_timeout_s=3)
    client = service.client("mallory")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == reason, job
    shown = json.dumps(client.get("/jobs").json())
    assert "HOSTILE" not in shown and "status" not in job["reason"]
    assert targets["canary"] not in shown
    log = service.config.logs / f"{job_id}.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    if mode == "exit-early":
        assert targets["canary"] in log.read_text()
    if mode == "exit-after":
        assert "HOSTILE exiting with status 33" in log.read_text()
    assert not list(service.config.work.iterdir())


def test_a_flooding_model_log_is_capped(tmp_path):
    """A model that prints 40 MiB: the maintainers' log keeps its head and tail only."""
    log = tmp_path / "job.log"
    capped = sandbox.CappedLog(log, head=4096, tail=4096)
    code = "import sys; sys.stdout.write('x' * (40 << 20)); sys.stdout.write('LAST LINE')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=capped.write_fd)
    capped.started()
    assert proc.wait() == 0
    capped.close()
    text = log.read_text()
    assert len(text) < 9000 and text.endswith("LAST LINE")
    assert f"[... {(40 << 20) + 9 - 8192} bytes dropped ...]" in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def withheld_transcripts(build: Path) -> tuple[dict, dict]:
    """{transcript: prompt_text} of the withheld and of the public speech rows."""
    public = {
        key
        for shard in (build / "public" / "data").rglob("*.parquet")
        for key in pq.read_table(shard, columns=["entry_key"])["entry_key"].to_pylist()
    }
    withheld, shown = {}, {}
    for shard in (build / "full" / "data").rglob("*.parquet"):
        columns = ["entry_key", "transcript", "prompt_text"]
        for row in pq.read_table(shard, columns=columns).to_pylist():
            if row["transcript"] and not row["prompt_text"].startswith(row["transcript"]):
                side = shown if row["entry_key"] in public else withheld
                side[row["transcript"]] = row["prompt_text"]
    withheld = {t: p for t, p in withheld.items() if t not in shown}  # said by withheld voices only
    assert withheld and shown
    return withheld, shown


def judged_requests(judge: Judge) -> list[str]:
    return [
        re.search(r"Request:\n<<<\n(.*?)\n>>>", b["messages"][-1]["content"], re.S).group(1)
        for b in judge.bodies
    ]


@pytest.mark.parametrize("private_text", [False, True], ids=["default", "judge-private-text"])
def test_the_judge_gets_no_withheld_transcript(make_service, judge, private_text):
    """Withheld rows are judged on the item's prompt text; their transcripts reach the
    judge only with judge_private_text (a loopback judge, like this one)."""
    service = make_service(template=STAND_IN, judge_private_text=private_text)
    withheld, shown = withheld_transcripts(service.config.build)
    judge.bodies.clear()
    client = service.client("nina")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    assert service.wait(client, job_id)["status"] == "done"
    requests = judged_requests(judge)
    for transcript in shown:  # public rows: judged on what was said
        assert any(r.startswith(transcript) for r in requests)
    for transcript, prompt_text in withheld.items():
        assert any(r.startswith(transcript) for r in requests) == private_text
        assert any(r.startswith(prompt_text) for r in requests) or private_text


def test_judge_private_text_needs_a_loopback_judge(demo_release, tmp_path):
    answer = CliRunner().invoke(main, [
        "serve", "run", "--build", str(demo_release["out"] / "1.0.0"), "--state",
        str(tmp_path / "srv"), "--serving-template", STAND_IN,
        "--judge-endpoint", "https://judge.example/v1", "--judge-model", "j",
        "--judge-private-text",
    ])  # fmt: skip
    assert answer.exit_code == 2
    assert "judge.example is not loopback" in answer.output


def test_the_sandbox_never_binds_the_state_or_the_build(demo_release, tmp_path):
    """A template naming the build (or a folder holding the state) is refused at start."""
    build = demo_release["out"] / "1.0.0"
    for word, shown in ((str(build / "full"), build), (str(tmp_path), tmp_path / "srv")):
        answer = CliRunner().invoke(main, [
            "serve", "run", "--build", str(build), "--state", str(tmp_path / "srv"),
            "--serving-template", f"{STAND_IN} --cache {word}",
            "--judge-endpoint", "http://127.0.0.1:9/v1", "--judge-model", "j",
        ])  # fmt: skip
        assert answer.exit_code == 1, answer.output
        assert f"it would show {shown.resolve()} to the model" in answer.output


def exported(tmp_path: Path, build: Path) -> tuple[Path, Path, list[dict]]:
    """The job input of BUILD exported as a job does, an empty output folder, its rows."""
    jobfiles.export_input(build / "full", tmp_path / "input")
    rows = [
        row
        for shard in (tmp_path / "input" / "data").rglob("*.parquet")
        for row in pq.read_table(shard, columns=["ID", "lang"]).to_pylist()
    ]
    return tmp_path / "input", jobfiles.private_dir(tmp_path / "output"), rows


def write_answers(output: Path, rows: list[dict], extra: str = "") -> None:
    for row in rows:
        path = output / row["lang"] / "model.jsonl"
        path.parent.mkdir(exist_ok=True)
        with path.open("a") as handle:
            handle.write(json.dumps({**row, "output": "an answer"}) + "\n")
    if extra:
        with (output / rows[0]["lang"] / "model.jsonl").open("a") as handle:
            handle.write(extra)


def test_the_export_holds_only_what_infer_sends(demo_release, tmp_path):
    build = demo_release["out"] / "1.0.0"
    user_ids = {
        u
        for shard in (build / "full" / "data").rglob("*.parquet")
        for u in pq.read_table(shard, columns=["user_id"])["user_id"].to_pylist()
    }
    folder, _, rows = exported(tmp_path, build)
    assert len(rows) == 177
    for shard in folder.rglob("*.parquet"):
        assert pq.ParquetFile(shard).schema_arrow.names == list(jobfiles.INPUT_COLUMNS)
        data = shard.read_bytes()
        assert not any(u.encode() in data for u in user_ids)
        assert stat.S_IMODE(shard.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


FORGERIES = {
    "a row twice": lambda out, rows: write_answers(out, rows, json.dumps({**rows[0], "output": "x"}) + "\n"),
    "a row not asked": lambda out, rows: write_answers(out, rows, json.dumps({"ID": 99999, "lang": rows[0]["lang"], "output": "x"}) + "\n"),
    "a row missing": lambda out, rows: write_answers(out, rows[1:]),
    "no answer": lambda out, rows: write_answers(out, rows, json.dumps({**rows[0], "output": None}) + "\n"),
    "not JSON": lambda out, rows: write_answers(out, rows, "{not json\n"),
    "a huge line": lambda out, rows: write_answers(out, rows, "x" * (jobfiles.MAX_LINE + 10) + "\n"),
    "another file": lambda out, rows: (write_answers(out, rows), (out / "notes.txt").write_text("x")),
    "a folder symlink": lambda out, rows: (write_answers(out, rows), (out / "zz").symlink_to("/etc")),
    "a file symlink": lambda out, rows: (
        write_answers(out, rows), (out / rows[0]["lang"] / "model.jsonl").unlink(),
        (out / rows[0]["lang"] / "model.jsonl").symlink_to("/etc/hostname"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_what_the_sandbox_wrote_is_refused_unless_it_is_one_answer_per_row(
    demo_release, tmp_path, forgery
):
    """The output folder is the model's to write (it shares the sandbox with infer): the
    judge's input is rebuilt from the build and an exact set of answers, or refused."""
    build = demo_release["out"] / "1.0.0"
    _, output, rows = exported(tmp_path, build)
    keys = aggregate.entry_keys(build / "public")
    write_answers(output, rows)
    assert jobfiles.collect(output, build / "full", tmp_path / "ok", keys, False) == 177
    rebuilt = [json.loads(line) for p in (tmp_path / "ok").rglob("*.jsonl") for line in p.open()]
    assert all(r["user_id"] and r["output"] == "an answer" for r in rebuilt)  # from the build
    shutil.rmtree(output)
    jobfiles.private_dir(output)
    FORGERIES[forgery](output, rows)
    with pytest.raises(jobfiles.OutputRejected):
        jobfiles.collect(output, build / "full", tmp_path / "judged", keys, False)


def test_a_model_filling_its_output_folder_fails_the_job(make_service, monkeypatch):
    monkeypatch.setattr(jobfiles, "MAX_OUTPUT", 4 << 20)
    service = make_service(template=template({"fill": 16 << 20}, "fill"))
    client = service.client("mallory")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == "evaluation failed", job
    assert not (service.config.work / job_id).exists()
    ended = [a for a in service.store.audit_log() if a["action"] == "job ended"][-1]
    assert ended["detail"] == "output over its limit"


def test_a_reused_pid_is_never_killed():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)  # fmt: skip
    try:
        start = sandbox.start_time(proc.pid)
        assert start is not None
        assert not sandbox.kill_group(proc.pid, start + 1)  # another process's start time
        assert proc.poll() is None
        assert sandbox.kill_group(proc.pid, start)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()


def test_a_loose_state_folder_is_made_private(tmp_path):
    state = tmp_path / "srv"
    state.mkdir(mode=0o755)
    (state / "serve.sqlite").touch(mode=0o644)
    Store(state).issue("u", 1)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for path in state.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_unsandboxed_dev_says_so_on_every_line(demo_release, judge, tmp_path):
    state = tmp_path / "srv"
    service = CommandLineService([
        "--build", str(demo_release["out"] / "1.0.0"), "--state", str(state),
        "--serving-template", STAND_IN, "--judge-endpoint", judge.base_url,
        "--judge-model", "judge-1", "--unsandboxed-dev",
    ], tmp_path, state)  # fmt: skip
    service.start()
    assert service.client.get("/jobs").status_code == 200
    service.stop()
    lines = [line for line in service.proc.stderr.read().decode().splitlines() if line.strip()]
    assert len(lines) >= 4 and all(line.startswith("UNSANDBOXED") for line in lines), lines

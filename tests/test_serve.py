"""`redvox serve` on loopback: the service (uvicorn in a thread) on the demo build, the
stand-in audio model launched through the serving template as the platform would launch
vLLM, the stand-in judge in this process."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from model_server import Judge
from serve_service import (
    MODEL,
    SLOW_STAND_IN,
    STAND_IN,
    TESTS,
    CommandLineService,
    gone,
    make_service_factory,
    peak_rss_kb,
    processes_with,
    wait_gone,
)

from redvox.builder.cli import main
from redvox.release.serve.store import FINAL, Store
from redvox.release.serve.validate import RequestError, Template, model_id, serving_args


@pytest.fixture(scope="module")
def judge():
    judge = Judge()
    yield judge
    judge.stop()


@pytest.fixture
def make_service(demo_release, judge, tmp_path):
    make, stop_all = make_service_factory(demo_release["out"] / "1.0.0", judge, tmp_path)
    yield make
    stop_all()


def build_secrets(build: Path) -> tuple[set[str], set[str]]:
    """The 32-hex user ids of the full build, and the demo participant keys."""
    ids = set()
    for shard in (build / "full" / "data").rglob("*.parquet"):
        ids.update(pq.read_table(shard, columns=["user_id"])["user_id"].to_pylist())
    assert ids and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    return ids, {f"demo-p{n:02d}" for n in range(1, 53)}


def cells(tables: dict):
    yield "overall", tables["overall"]
    for dimension in ("lang", "audio_type", "vulnerability_type"):
        for value, sides in tables[dimension].items():
            yield f"{dimension}/{value}", sides


def test_a_job_gives_suppressed_aggregates_only(make_service, judge, demo_release):
    service = make_service(judge_price_per_1k=0.5)
    alice, bob = service.client("alice"), service.client("bob")
    submitted = alice.post("/jobs", json={"model": MODEL, "revision": "v1"})
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    seen = {submitted.json()["status"]}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        status = alice.get(f"/jobs/{job_id}").json()["status"]
        seen.add(status)
        if status in FINAL:
            break
        time.sleep(0.1)
    job = alice.get(f"/jobs/{job_id}").json()
    assert job["status"] == "done", job
    assert {"running", "done"} <= seen and submitted.json()["status"] in ("queued", "running")

    # another user: as if the job did not exist
    assert bob.get(f"/jobs/{job_id}").status_code == 404
    assert bob.get(f"/jobs/{job_id}/result").status_code == 404
    assert bob.delete(f"/jobs/{job_id}").status_code == 404
    assert bob.get("/jobs").json() == {"jobs": []}

    result = alice.get(f"/jobs/{job_id}/result").json()
    tables = result["tables"]
    assert result["build"]["full"]["rows"] == 177 and result["build"]["public"]["rows"] == 137
    # the judge's usage counts answers on withheld rows: in the maintainers' log only
    assert result["judge"]["usage"] == "in the maintainers' log"
    shown = suppressed = 0
    for name, sides in cells(tables):
        assert set(sides) == {"full", "public"}, name
        for side in sides.values():
            if side["suppressed"]:
                suppressed += 1
                assert side["n"] is None and side["unsafe"] is None and side["ci95"] is None
            else:
                shown += 1
                assert side["n"] >= 20
                total = sum(
                    side[k] for k in ("unsafe", "controversial", "safe_by_accident", "safe")
                )
                assert total == pytest.approx(100)
    assert shown and suppressed
    # the demo withholds 2 speakers (40 rows): under 3, so no full cell mixes them in
    assert tables["overall"]["full"]["suppressed"] == "withheld part: fewer than 3 speakers"
    assert tables["overall"]["public"]["n"] == 137

    # the result folder holds the aggregates and nothing per row
    results = service.config.results
    assert [p.name for p in results.iterdir()] == [f"{job_id}.json"]
    user_ids, participants = build_secrets(demo_release["out"] / "1.0.0")
    for path in results.rglob("*"):
        data = path.read_bytes()
        assert b"fLaC" not in data and b"RIFF" not in data
        text = data.decode()
        assert not any(u in text for u in user_ids)
        assert not any(p in text for p in participants)
        for field in ('"output"', '"transcript"', '"user_text"', '"user_id"', '"audio"'):
            assert field not in text
    assert result["sandbox"]["isolated"] is True
    # the public rows, then each of the demo's two withheld speakers, in a sandbox each
    assert result["sandbox"]["runs"] == 3
    assert [p["role"] for p in service.store.processes(job_id)] == ["sandbox"] * 3 + ["judge"]
    assert not list(service.config.work.iterdir())  # per-row files removed

    # the judge step (outside the sandbox) connected to the judge only: the model's
    # loopback is inside the sandbox
    judge_port = int(judge.base_url.rsplit(":", 1)[1].split("/")[0])
    log = service.config.logs / f"{job_id}.connections.jsonl"
    connections = [json.loads(line) for line in log.open()]
    assert {(c["host"], c["port"]) for c in connections} == {("127.0.0.1", judge_port)}

    # private on disk: folders 0700, files 0600, the database included
    state = service.config.state
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for path in state.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert (state / "serve.sqlite").exists() and list(state.glob("logs/*.log"))

    assert all(gone(pid) for pid in service.groups(job_id)) and service.groups(job_id)
    audit = service.store.audit_log()
    ended = [a for a in audit if a["action"] == "job ended"]
    assert ended[-1]["outcome"] == "done" and ended[-1]["user"] == "alice"
    assert ended[-1]["model"] == MODEL
    # the audit names the exact build: the sha256 of the full build's manifest bytes
    manifest = service.config.full / "manifest.json"
    assert ended[-1]["build_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()


BAD_BODIES = [
    ({"model": "../etc/passwd"}, "not a Hugging Face model id"),
    ({"model": "org/name; rm -rf /"}, "not a Hugging Face model id"),
    ({"model": "$(id)/x"}, "not a Hugging Face model id"),
    ({"model": "org/na me"}, "not a Hugging Face model id"),
    ({"model": "org--x/name"}, "not a Hugging Face model id"),
    ({"model": "http://evil.example/v1"}, "not a Hugging Face model id"),
    ({}, "not a Hugging Face model id"),
    ({"model": MODEL, "revision": "main && curl x"}, "not a branch"),
    ({"model": MODEL, "endpoint": "http://10.0.0.1/v1"}, "unknown fields: endpoint"),
    ({"model": MODEL, "serving_args": {"host": "0.0.0.0"}}, "not allowed"),
    ({"model": MODEL, "serving_args": {"max-model-len": "1;id"}}, "not allowed"),
    ({"model": MODEL, "serving_args": ["--trust-remote-code"]}, "expected an object"),
]


def test_bad_requests_say_why(make_service):
    service = make_service(template=STAND_IN + " {args}")
    client = service.client("carol")
    for body, message in BAD_BODIES:
        answer = client.post("/jobs", json=body)
        assert answer.status_code == 400 and message in answer.json()["error"], (body, answer.text)
    answer = client.post("/jobs", content=b"{not json")
    assert answer.status_code == 400 and "not JSON" in answer.json()["error"]
    assert client.post("/jobs", json=[MODEL]).status_code == 400
    assert client.get("/jobs/nope").status_code == 404
    assert service.store.jobs_of("carol") == []
    anonymous = httpx.post(f"{service.url}/jobs", json={"model": MODEL}, trust_env=False)
    assert anonymous.status_code == 401 and "missing bearer token" in anonymous.json()["error"]
    forged = httpx.get(
        f"{service.url}/jobs", headers={"Authorization": "Bearer rvx_000000000000_x"},
        trust_env=False,
    )  # fmt: skip
    assert forged.status_code == 401 and forged.json()["error"] == "unknown token"


def test_expired_and_revoked_tokens_are_401(make_service):
    service = make_service()
    expired = service.client("dave", expires_days=-1)
    answer = expired.post("/jobs", json={"model": MODEL})
    assert answer.status_code == 401 and answer.json()["error"] == "token expired"
    live = service.client("erin")
    assert live.get("/jobs").status_code == 200
    service.store.revoke("erin")
    answer = live.get("/jobs")
    assert answer.status_code == 401 and answer.json()["error"] == "token revoked"


def test_quota_per_day(make_service):
    failing = f"{sys.executable} -c 'import sys; sys.exit(3)' {{model}} {{port}}"
    service = make_service(template=failing, jobs_per_day=2)
    client = service.client("frank")
    for _ in range(2):
        assert client.post("/jobs", json={"model": MODEL}).status_code == 201
    answer = client.post("/jobs", json={"model": MODEL})
    assert answer.status_code == 429 and "2 jobs per 24 hours" in answer.json()["error"]
    assert service.client("grace").post("/jobs", json={"model": MODEL}).status_code == 201
    assert [a["detail"] for a in service.store.audit_log() if a["action"] == "job refused"] == [
        "quota"
    ]


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        (f"{sys.executable} -c 'import sys; print(\"no GPU\"); sys.exit(3)' {{model}} {{port}}",
         "model exited"),
        ("/nonexistent/vllm serve {model} --port {port}", "model exited"),
        (f"{sys.executable} -c 'import time; time.sleep(600)' {{model}} {{port}}",
         "model did not become healthy"),
    ],
    ids=["exits", "not-found", "never-healthy"],
)  # fmt: skip
def test_serving_command_that_fails(make_service, template, reason):
    service = make_service(template=template, health_timeout_s=2)
    client = service.client("henry")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == reason, job
    assert all(gone(pid) for pid in service.groups(job_id))
    # what the command printed and its status stay in the maintainers' log
    assert "no GPU" not in json.dumps(client.get("/jobs").json())
    log = (service.config.logs / f"{job_id}.log").read_text()
    assert "launcher status" not in log and "exit status" in log
    if "no GPU" in template:
        assert "no GPU" in log
    assert client.get(f"/jobs/{job_id}/result").status_code == 409


def test_cancel_midway_stops_the_model(make_service):
    service = make_service(template=SLOW_STAND_IN)
    client = service.client("ivan")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    wait_answering(service.config.work / job_id)
    assert client.get(f"/jobs/{job_id}").json()["status"] == "running"
    answer = client.delete(f"/jobs/{job_id}")
    assert answer.status_code == 202
    job = service.wait(client, job_id, timeout_s=30)
    assert job["status"] == "cancelled" and job["reason"] == "cancelled"
    assert service.groups(job_id) and all(gone(pid) for pid in service.groups(job_id))
    assert not (service.config.work / job_id).exists()
    assert client.delete(f"/jobs/{job_id}").status_code == 409
    assert not list(service.config.results.iterdir())


def test_cancel_a_queued_job(make_service):
    service = make_service(template=SLOW_STAND_IN)
    client = service.client("judy")
    first = client.post("/jobs", json={"model": MODEL}).json()["id"]
    second = client.post("/jobs", json={"model": MODEL}).json()["id"]
    answer = client.delete(f"/jobs/{second}")
    assert answer.status_code == 202 and answer.json()["status"] == "cancelled"
    assert client.delete(f"/jobs/{first}").json()["status"] == "cancelled"  # queued or starting
    assert all(gone(pid) for pid in service.groups(first))
    assert service.store.job(second).started is None


def test_job_timeout(make_service):
    service = make_service(template=SLOW_STAND_IN, job_timeout_s=6)
    client = service.client("kim")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == "timeout"
    assert all(gone(pid) for pid in service.groups(job_id))


def test_slot_time_per_day(make_service):
    """A user's jobs share a daily slot-time budget: a job stops when it is spent (timeout)
    and the next submission is refused, whatever the job count allows."""
    service = make_service(template=SLOW_STAND_IN, slot_seconds_per_day=5, jobs_per_day=10)
    client = service.client("kai")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == "timeout"
    answer = client.post("/jobs", json={"model": MODEL})
    assert answer.status_code == 429 and "5 s of slot time" in answer.json()["error"]
    assert service.client("lou").post("/jobs", json={"model": MODEL}).status_code == 201


def test_restart_fails_running_jobs_and_resumes_queued(make_service, tmp_path):
    state = tmp_path / "restart"
    store = Store(state)
    running = store.submit("lee", MODEL, "main", {})
    queued = store.submit("lee", MODEL, "main", {})
    assert store.claim(0).id == running  # as if a previous service died mid-job
    failing = f"{sys.executable} -c 'import sys; sys.exit(4)' {{model}} {{port}}"
    service = make_service(template=failing, state=state)
    client = service.client("lee")
    job = client.get(f"/jobs/{running}").json()
    assert job["status"] == "failed" and job["reason"] == "cancelled"
    ended = [a for a in service.store.audit_log() if a["job_id"] == running][-1]
    assert ended["action"] == "job ended" and ended["detail"] == "service restarted"
    job = service.wait(client, queued, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == "model exited"


def test_template_never_passes_through_a_shell():
    template = Template("vllm serve {model} --revision {revision} --port {port} {args}")
    argv = template.argv(
        model="org/m", revision="v1.0", port=9000, slot=0,
        args=serving_args({"max-model-len": 4096, "dtype": "bfloat16"}, ("max-model-len", "dtype")),
    )  # fmt: skip
    assert argv == [
        "vllm", "serve", "org/m", "--revision", "v1.0", "--port", "9000",
        "--max-model-len", "4096", "--dtype", "bfloat16",
    ]  # fmt: skip
    for bad in ("org/m;id", "org/m name", "org/`id`", "org/m|x", "-rf/x", "org/m\n", "a/b/c"):
        with pytest.raises(RequestError):
            model_id(bad)
    with pytest.raises(ValueError, match="needs"):
        Template("vllm serve {model}")
    with pytest.raises(ValueError, match="unknown placeholder"):
        Template("vllm serve {model} --port {port} --host {host}")


def test_guard_refuses_connections_off_loopback(tmp_path):
    log = tmp_path / "connections.jsonl"
    code = (
        "import socket, sys\n"
        "from redvox.release.serve.guard import install\n"
        f"install({str(log)!r}, [])\n"
        "s = socket.socket(); s.settimeout(1)\n"
        "try:\n    s.connect(('192.0.2.1', 80))\n"
        "except PermissionError as e:\n    print('refused', e); sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and "refused" in done.stdout, done.stdout + done.stderr
    assert json.loads(log.read_text()) == {"host": "192.0.2.1", "port": 80, "allowed": False}


def test_token_commands_store_only_hashes(tmp_path):
    state = tmp_path / "state"
    runner = CliRunner()
    issued = runner.invoke(main, ["serve", "token", "issue", "mia", "--state", str(state)])
    assert issued.exit_code == 0, issued.output
    token = issued.stdout.strip().splitlines()[-1]
    assert token.startswith("rvx_")
    assert Store(state).authenticate(token) == "mia"
    with sqlite3.connect(state / "serve.sqlite") as db:
        dumped = "\n".join(db.iterdump())
    assert token.split("_", 2)[2] not in dumped
    listed = runner.invoke(main, ["serve", "token", "list", "--state", str(state)])
    assert json.loads(listed.output)["status"] == "live"
    revoked = runner.invoke(main, ["serve", "token", "revoke", "mia", "--state", str(state)])
    assert revoked.exit_code == 0 and "revoked 1" in revoked.output
    listed = runner.invoke(main, ["serve", "token", "list", "--state", str(state)])
    assert json.loads(listed.output)["status"] == "revoked"
    again = runner.invoke(main, ["serve", "token", "revoke", "mia", "--state", str(state)])
    assert again.exit_code == 1 and "no live token" in again.output


def wait_answering(work: Path, timeout_s: float = 60) -> None:
    """Until infer, in the sandbox, has written some answers into WORK/output."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.stat().st_size for p in (work / "output").glob("*/model.jsonl")):
            return
        time.sleep(0.1)
    raise AssertionError(f"no answers under {work / 'output'}")


def test_the_command_line_service_recovers_from_a_crash(demo_release, judge, tmp_path):
    """`redvox serve run` as a process, with the README's relative paths: killed mid-job
    (SIGKILL), its sandbox dies with it; restarted, the job it was running is failed
    (cancelled) and no per-row file and no process of that job remains."""
    shutil.copytree(demo_release["out"] / "1.0.0", tmp_path / "out" / "1.0.0")
    (tmp_path / "tests").mkdir()
    shutil.copy(TESTS / "model_server.py", tmp_path / "tests")
    template = f"{sys.executable} tests/model_server.py --port {{port}} --model {{model}} " \
        "--delay-s 0.5 {args}"  # fmt: skip
    service = CommandLineService([
        "--build", "out/1.0.0", "--state", "srv", "--serving-template", template,
        "--judge-endpoint", judge.base_url, "--judge-model", "judge-1", "--resamples", "200",
    ], tmp_path, tmp_path / "srv")  # fmt: skip
    service.start()
    try:
        job_id = service.client.post(
            "/jobs", json={"model": MODEL, "serving_args": {"max-model-len": 8192}}
        ).json()["id"]
        work = tmp_path / "srv" / "work" / job_id
        wait_answering(work)
        store = Store(tmp_path / "srv")
        groups = [p["pid"] for p in store.processes(job_id)]
        assert store.job(job_id).status == "running" and groups
        inside = processes_with(f"{tmp_path}/tests/model_server.py")
        assert inside  # the model, as the host sees it
        service.proc.kill()
        service.proc.wait()
        assert all(wait_gone(pid) for pid in groups + inside)  # the sandbox died with it
        assert list(work.rglob("*.jsonl"))  # its answers are still on disk, until...
    finally:
        service.proc.kill()
    service.start()
    try:
        answer = service.client.get(f"/jobs/{job_id}").json()
        assert answer["status"] == "failed" and answer["reason"] == "cancelled"
        assert not list((tmp_path / "srv" / "work").iterdir())  # ...the restart
        assert not processes_with(f"{tmp_path}/tests/model_server.py")
    finally:
        service.stop()


def test_a_huge_body_is_refused_while_streaming(demo_release, judge, tmp_path):
    """300 MiB POSTed to /jobs, declared and chunked: 413 at once, and the service's peak
    RSS grows by less than 100 MB (read on the real uvicorn process)."""
    state = tmp_path / "srv"
    service = CommandLineService([
        "--build", str(demo_release["out"] / "1.0.0"), "--state", str(state),
        "--serving-template", STAND_IN, "--judge-endpoint", judge.base_url,
        "--judge-model", "judge-1",
    ], tmp_path, state)  # fmt: skip
    service.start()
    try:
        before = peak_rss_kb(service.proc.pid)
        token = service.client.headers["Authorization"]
        chunk, total = b"x" * (1 << 20), 300
        for framing in ("content-length", "chunked"):
            head = f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: {token}\r\n"
            head += (
                f"Content-Length: {total * len(chunk)}\r\n\r\n"
                if framing == "content-length"
                else "Transfer-Encoding: chunked\r\n\r\n"
            )
            with socket.create_connection(("127.0.0.1", service.port), timeout=30) as sock:
                sock.sendall(head.encode())
                sent = 0
                try:
                    for _ in range(total):
                        piece = chunk if framing == "content-length" else (
                            f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
                        )  # fmt: skip
                        sock.sendall(piece)
                        sent += 1
                except OSError:  # the service closed the connection after its answer
                    pass
                reply = sock.recv(65536).decode(errors="replace")
            assert reply.startswith("HTTP/1.1 413"), (framing, reply[:200])
            assert "request body over" in reply
            print(f"{framing}: sent {sent} MiB before the service closed the connection")
        after = peak_rss_kb(service.proc.pid)
        print(f"peak RSS {before / 1024:.1f} MB -> {after / 1024:.1f} MB")
        assert after - before < 100 * 1000
        assert service.client.get("/jobs").status_code == 200  # still serving
    finally:
        service.stop()


def test_a_job_ends_on_the_release_grid(make_service):
    """A model that chooses how long it runs learns its user nothing finer than the grid:
    an ended job stays running (its slot held) until the next multiple of the quantum
    after its start; cancelled meanwhile, it is cancelled, whatever it had come to."""
    failing = f"{sys.executable} -c 'import sys; sys.exit(3)' {{model}} {{port}}"
    service = make_service(template=failing, release_quantum_s=3)
    client = service.client("quinn")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == "model exited"
    held = job["finished"] - job["started"]
    assert held >= 3 and held % 3 < 1, held

    service = make_service(template=failing, release_quantum_s=600)
    client = service.client("quinn")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        service.groups(job_id)
        and all(gone(pid) for pid in service.groups(job_id))
        and not (service.config.work / job_id).exists()
    ):
        time.sleep(0.1)
    ended = [a for a in service.store.audit_log() if a["action"] == "job ended"]
    assert not any(a["job_id"] == job_id for a in ended)
    job = client.get(f"/jobs/{job_id}").json()
    assert job["status"] == "running" and job["reason"] is None  # ended, not shown
    assert client.get(f"/jobs/{job_id}/result").status_code == 409
    answer = client.delete(f"/jobs/{job_id}")
    assert answer.json()["status"] == "cancelled" and answer.json()["reason"] == "cancelled"
    detail = [a for a in service.store.audit_log() if a["job_id"] == job_id][-1]["detail"]
    assert detail.startswith("cancelled while held (model exited")


def test_relative_template_paths_are_resolved_at_start(tmp_path, monkeypatch):
    """The README's relative template works from where the service starts; a program
    that is not there is refused in one line."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "model.py").write_text("")
    resolved = Template(
        ".venv/../python tests/model.py --port {port} --model {model} --dir sub/none {args}"
    )
    with pytest.raises(ValueError, match=r"\.venv/\.\./python: no such program"):
        resolved.resolved()
    resolved = Template(f"{sys.executable} tests/model.py --port {{port}} {{model}} {{args}}")
    argv = resolved.resolved().argv(model="o/m", revision="r", port=1, slot=0, args={})
    assert argv == [sys.executable, str(tmp_path / "tests" / "model.py"), "--port", "1", "o/m"]
    with pytest.raises(ValueError, match="vllm-nowhere not found on PATH"):
        Template("vllm-nowhere serve {model} --port {port}").resolved()
    answer = CliRunner().invoke(main, [
        "serve", "run", "--build", str(tmp_path), "--state", "srv",
        "--serving-template", "bin/vllm serve {model} --port {port}",
        "--judge-endpoint", "http://127.0.0.1:9/v1", "--judge-model", "j",
    ])  # fmt: skip
    assert answer.exit_code == 2 and "bin/vllm: no such program" in answer.output

"""`redvox serve` on loopback: the service (uvicorn in a thread) on the demo build, the
stand-in audio model launched through the serving template as the platform would launch
vLLM, the stand-in judge in this process."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
import uvicorn
from click.testing import CliRunner
from model_server import Judge

from redvox.builder.cli import main
from redvox.release.serve.cli import build_service
from redvox.release.serve.runner import Config, free_port
from redvox.release.serve.store import FINAL, Store
from redvox.release.serve.validate import RequestError, Template, model_id, serving_args

TESTS = Path(__file__).resolve().parent
STAND_IN = f"{sys.executable} {TESTS / 'model_server.py'} --port {{port}} --model {{model}}"
SLOW_STAND_IN = STAND_IN + " --delay-s 0.5"
MODEL = "org/speech-lm"


@dataclass
class Service:
    url: str
    store: Store
    config: Config
    server: uvicorn.Server
    thread: threading.Thread
    runner: object

    def client(self, user: str, **token_options) -> httpx.Client:
        token = self.store.issue(user, token_options.get("expires_days", 1)).token
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60,
            trust_env=False,
        )  # fmt: skip

    def wait(self, client: httpx.Client, job_id: str, timeout_s: float = 180) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = client.get(f"/jobs/{job_id}").json()
            if job["status"] in FINAL:
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not end: {job}")

    def model_pid(self, job_id: str) -> int | None:
        return self.store.job(job_id)["model_pid"]


def gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        pass
    else:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def judge():
    judge = Judge()
    yield judge
    judge.stop()


@pytest.fixture
def make_service(demo_release, judge, tmp_path):
    started: list[Service] = []

    def make(template: str = STAND_IN, state: Path | None = None, **overrides) -> Service:
        options = dict(resamples=200, health_timeout_s=60, job_timeout_s=300, concurrency=8)
        options.update(overrides)
        config = Config(
            build=demo_release["out"] / "1.0.0", state=state or tmp_path / f"state{len(started)}",
            template=Template(template), judge_endpoint=judge.base_url, judge_model="judge-1",
            **options,
        )  # fmt: skip
        store, runner, app = build_service(config)
        runner.start()
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        service = Service(f"http://127.0.0.1:{port}", store, config, server, thread, runner)
        started.append(service)
        return service

    yield make
    for service in started:
        service.server.should_exit = True
        service.thread.join(timeout=10)
        service.runner.stop()


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
    assert {"queued", "running", "done"} <= seen

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
    assert not (service.config.work / job_id / "run").exists()  # per-row files removed

    # every connection of the evaluator went to loopback: the model the platform started,
    # and the (here local) judge
    work = service.config.work / job_id
    endpoints = json.loads((work / "endpoints.json").read_text())
    model_port = int(endpoints["model"].rsplit(":", 1)[1].split("/")[0])
    judge_port = int(judge.base_url.rsplit(":", 1)[1].split("/")[0])
    connections = [json.loads(line) for line in (work / "connections.jsonl").open()]
    assert {c["port"] for c in connections} == {model_port, judge_port}
    assert {c["host"] for c in connections} == {"127.0.0.1"}
    assert endpoints["model"].startswith("http://127.0.0.1:")

    assert gone(service.model_pid(job_id))
    audit = service.store.audit_log()
    ended = [a for a in audit if a["action"] == "job ended"]
    assert ended[-1]["outcome"] == "done" and ended[-1]["user"] == "alice"
    assert ended[-1]["model"] == MODEL and len(ended[-1]["build_sha256"]) == 64


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
         "exited with status 3 before the model was healthy"),
        ("/nonexistent/vllm serve {model} --port {port}", "serving command could not start"),
        (f"{sys.executable} -c 'import time; time.sleep(600)' {{model}} {{port}}",
         "model never became healthy (GET /v1/models) within 2 s"),
    ],
    ids=["exits", "not-found", "never-healthy"],
)  # fmt: skip
def test_serving_command_that_fails(make_service, template, reason):
    service = make_service(template=template, health_timeout_s=2)
    client = service.client("henry")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and reason in job["reason"], job
    pid = service.model_pid(job_id)
    assert pid is None if "could not start" in reason else gone(pid)
    if "status 3" in reason:
        assert "no GPU" in job["reason"]
    assert client.get(f"/jobs/{job_id}/result").status_code == 409


def test_cancel_midway_stops_the_model(make_service):
    service = make_service(template=SLOW_STAND_IN)
    client = service.client("ivan")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    connections = service.config.work / job_id / "connections.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the evaluator is talking to the model
        if connections.exists() and connections.read_text().strip():
            break
        time.sleep(0.1)
    assert client.get(f"/jobs/{job_id}").json()["status"] == "running"
    answer = client.delete(f"/jobs/{job_id}")
    assert answer.status_code == 202
    job = service.wait(client, job_id, timeout_s=30)
    assert job["status"] == "cancelled" and job["reason"] == "cancelled by the user"
    assert gone(service.model_pid(job_id))
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
    pid = service.model_pid(first)
    assert pid is None or gone(pid)
    assert service.store.job(second)["started"] is None


def test_job_timeout(make_service):
    service = make_service(template=SLOW_STAND_IN, job_timeout_s=6)
    client = service.client("kim")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id, timeout_s=60)
    assert job["status"] == "failed" and job["reason"] == "job timeout: ran over 6 s"
    assert gone(service.model_pid(job_id))


def test_restart_fails_running_jobs_and_resumes_queued(make_service, tmp_path):
    state = tmp_path / "restart"
    store = Store(state)
    running = store.submit("lee", MODEL, "main", {})
    queued = store.submit("lee", MODEL, "main", {})
    assert store.claim(0)["id"] == running  # as if a previous service died mid-job
    failing = f"{sys.executable} -c 'import sys; sys.exit(4)' {{model}} {{port}}"
    service = make_service(template=failing, state=state)
    client = service.client("lee")
    job = client.get(f"/jobs/{running}").json()
    assert job["status"] == "failed" and job["reason"] == "service restarted"
    job = service.wait(client, queued, timeout_s=60)
    assert job["status"] == "failed" and "exited with status 4" in job["reason"]


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


def test_the_command_line_service_recovers_from_a_crash(demo_release, judge, tmp_path):
    """`redvox serve run` as a process: killed mid-job (SIGKILL), restarted, the job it was
    running is failed ("service restarted") and its model and evaluator are ended."""
    state, port = tmp_path / "state", free_port()
    command = [
        str(Path(sys.executable).parent / "redvox"), "serve", "run",
        "--build", str(demo_release["out"] / "1.0.0"), "--state", str(state),
        "--serving-template", SLOW_STAND_IN, "--port", str(port),
        "--judge-endpoint", judge.base_url, "--judge-model", "judge-1", "--resamples", "200",
    ]  # fmt: skip
    issued = CliRunner().invoke(main, ["serve", "token", "issue", "olga", "--state", str(state)])
    token = issued.stdout.strip().splitlines()[-1]
    client = httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
        trust_env=False, timeout=30,
    )  # fmt: skip

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if (
                    httpx.get(f"http://127.0.0.1:{port}/healthz", trust_env=False).status_code
                    == 200
                ):
                    return proc
            except httpx.HTTPError:
                time.sleep(0.2)
        proc.kill()
        raise AssertionError(proc.stderr.read().decode())

    def wait_gone(pid: int) -> bool:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not gone(pid):
            time.sleep(0.1)
        return gone(pid)

    service = start()
    try:
        job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
        connections = state / "work" / job_id / "connections.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            connections.exists() and connections.read_text().strip()
        ):
            time.sleep(0.1)
        job = Store(state).job(job_id)
        assert job["status"] == "running" and job["model_pid"] and job["harness_pid"]
        service.kill()
        service.wait()
        assert not gone(job["model_pid"])  # in a session of its own: outlives the service
    finally:
        service.kill()
    service = start()
    try:
        answer = client.get(f"/jobs/{job_id}").json()
        assert answer["status"] == "failed" and answer["reason"] == "service restarted"
        assert wait_gone(job["model_pid"]) and wait_gone(job["harness_pid"])
    finally:
        service.terminate()  # uvicorn shuts down, then re-raises SIGTERM
        assert service.wait(timeout=30) in (0, -15)

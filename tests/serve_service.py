"""Helpers of the `redvox serve` tests: the service in this process (uvicorn in a thread)
or as the `redvox serve run` command, and what a test checks about processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from click.testing import CliRunner

from redvox.builder.cli import main
from redvox.release.serve.cli import build_service
from redvox.release.serve.runner import Config, free_port
from redvox.release.serve.store import FINAL, Store
from redvox.release.serve.validate import Template

TESTS = Path(__file__).resolve().parent
STAND_IN = f"{sys.executable} {TESTS / 'model_server.py'} --port {{port}} --model {{model}}"
SLOW_STAND_IN = STAND_IN + " --delay-s 0.5"
MODEL = "org/speech-lm"
REDVOX = str(Path(sys.executable).parent / "redvox")


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
        return wait_final(client, job_id, timeout_s)

    def groups(self, job_id: str) -> list[int]:
        """The process groups the runner recorded for a job (sandbox, judge)."""
        return [p["pid"] for p in self.store.processes(job_id)]


def wait_final(client: httpx.Client, job_id: str, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["status"] in FINAL:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not end: {job}")


def gone(pid: int) -> bool:
    """No process PID and no process group PID (zombies count as gone)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        pass
    else:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def wait_gone(pid: int, timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not gone(pid):
        time.sleep(0.1)
    return gone(pid)


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds MARKER."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state != "Z":
                found.append(int(entry.name))
    return found


def make_service_factory(build: Path, judge, tmp_path: Path):
    """make(template, state=None, **Config overrides) -> a started Service; stop_all()."""
    started: list[Service] = []

    def make(template: str = STAND_IN, state: Path | None = None, **overrides) -> Service:
        options = dict(resamples=200, health_timeout_s=60, job_timeout_s=300, concurrency=8,
                       release_quantum_s=0)  # fmt: skip
        options.update(overrides)
        config = Config(
            build=build, state=state or tmp_path / f"state{len(started)}",
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

    def stop_all() -> None:
        for service in started:
            service.server.should_exit = True
            service.thread.join(timeout=10)
            service.runner.stop()

    return make, stop_all


class CommandLineService:
    """`redvox serve run ARGS` as a process in CWD, on PORT, for USER's token."""

    def __init__(self, args: list[str], cwd: Path, state: Path, user: str = "olga"):
        self.port = free_port()
        self.command = [REDVOX, "serve", "run", *args, "--port", str(self.port)]
        self.cwd = cwd
        issued = CliRunner().invoke(main, ["serve", "token", "issue", user, "--state", str(state)])
        token = issued.stdout.strip().splitlines()[-1]
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {token}"}, trust_env=False, timeout=60,
        )  # fmt: skip
        self.proc: subprocess.Popen | None = None

    def start(self, env: dict | None = None) -> subprocess.Popen:
        self.proc = subprocess.Popen(
            self.command, cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if self.client.get("/healthz").status_code == 200:
                    return self.proc
            except httpx.HTTPError:
                time.sleep(0.2)
        self.proc.kill()
        raise AssertionError(self.proc.stderr.read().decode())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # uvicorn shuts down, then re-raises SIGTERM
            assert self.proc.wait(timeout=60) in (0, -15)


def peak_rss_kb(pid: int) -> int:
    """VmHWM (peak resident set) of PID, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no VmHWM")

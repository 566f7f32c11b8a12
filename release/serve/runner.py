"""Runs queued jobs, one per GPU slot: start the model from the maintainer's template on
a free loopback port, wait until it answers GET /v1/models, run the evaluator (infer on
the full build -> judge -> report) against it in a guarded subprocess, turn the judged
rows into suppressed aggregates, and stop every process of the job whatever happened."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from redvox.release.evaluation.redvox_eval.intervals import Bootstrap
from redvox.release.evaluation.redvox_eval.judge_outputs import default_tag

from . import aggregate
from .store import Store
from .validate import DEFAULT_ALLOWED_ARGS, Template

log = logging.getLogger("redvox.serve")
POLL_S = 0.25


@dataclass
class Config:
    build: Path  # OUT/<version>, holding full/ and public/
    state: Path
    template: Template
    judge_endpoint: str
    judge_model: str
    min_cell: int = 20
    min_speakers: int = 3
    epsilon_per_job: float = 1.0  # privacy loss of one result (speaker level, privacy.py)
    epsilon_budget: float = 10.0  # per user, over every result released to them
    speaker_rows: int | None = None  # cap on one speaker's rows; None: the most of a public one
    slots: int = 1
    jobs_per_day: int = 5
    job_timeout_s: float = 6 * 3600
    health_timeout_s: float = 1800
    resamples: int = 1000
    concurrency: int = 16
    judge_price_per_1k: float | None = None
    allowed_args: tuple[str, ...] = DEFAULT_ALLOWED_ARGS
    keep_work: bool = False
    infer_options: tuple[str, ...] = field(default_factory=tuple)  # extra `evaluate run` words

    @property
    def full(self) -> Path:
        return self.build / "full"

    @property
    def public(self) -> Path:
        return self.build / "public"

    @property
    def results(self) -> Path:
        return self.state / "results"

    @property
    def work(self) -> Path:
        return self.state / "work"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_group(proc: subprocess.Popen | None, grace_s: float = 10.0) -> None:
    """SIGTERM to the process group of PROC (its own session), SIGKILL after GRACE_S."""
    if proc is None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; end what it left in its group
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return


def tail(path: Path, lines: int = 5, chars: int = 600) -> str:
    try:
        text = path.read_text("utf-8", errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return "\n".join(text)[-chars:]


class JobEnd(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Runner:
    def __init__(self, config: Config, store: Store):
        self.config, self.store = config, store
        for side in (config.full, config.public):
            if not (side / "manifest.json").is_file() or not (side / "data").is_dir():
                raise ValueError(f"{side}: not a build (expected manifest.json and data/)")
        self.build_sha256 = file_sha256(config.full / "manifest.json")
        self.public_sha256 = file_sha256(config.public / "manifest.json")
        self.public_keys = aggregate.entry_keys(config.public)
        config.results.mkdir(parents=True, exist_ok=True)
        config.work.mkdir(parents=True, exist_ok=True)
        self.cancels: dict[str, threading.Event] = {}
        self.running: set[str] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        for job in self.store.interrupted():
            self._kill_leftover(job)
            self.store.audit(
                job["user"], "job ended", job=job, build_sha256=self.build_sha256,
                outcome="failed", detail="service restarted",
            )  # fmt: skip
        for slot in range(self.config.slots):
            thread = threading.Thread(target=self._slot, args=(slot,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        """Ends the running jobs (failed: service stopped) and the slot threads."""
        self.stopping.set()
        with self.lock:
            events = [self.cancels[j] for j in self.running if j in self.cancels]
        for event in events:
            event.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _kill_leftover(self, job: dict) -> None:
        """The model and evaluator processes (own sessions) of a job the last service
        process left running, if each pid still runs the same command (pids are reused)."""
        for role in ("harness", "model"):
            pid, cmdline = job.get(f"{role}_pid"), job.get(f"{role}_cmdline")
            if not pid or not cmdline:
                continue
            try:
                running = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            words, argv = [w.decode(errors="replace") for w in running if w], json.loads(cmdline)
            # a script's interpreter comes first in /proc: compare the words it was given
            same = words == argv or (
                words[len(words) - len(argv) + 1 :] == argv[1:]
                and any(Path(w).name == Path(argv[0]).name for w in words)
            )
            if same:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                log.warning("job %s: ended the %s process %s left running", job["id"], role, pid)

    def cancel(self, job_id: str) -> bool:
        """Asks a running job to stop; False when it is not running here."""
        with self.lock:
            event = self.cancels.get(job_id)
            if event is None:
                job = self.store.job(job_id)
                if job is None or job["status"] != "running":
                    return False
                # claimed by a slot that has not registered it yet: it will see this
                event = self.cancels[job_id] = threading.Event()
        event.set()
        return True

    def _slot(self, slot: int) -> None:
        while not self.stopping.is_set():
            job = self.store.claim(slot)
            if job is None:
                self.stopping.wait(POLL_S)
                continue
            with self.lock:
                self.cancels.setdefault(job["id"], threading.Event())
                self.running.add(job["id"])
            try:
                self.run_job(job, slot)
            finally:
                with self.lock:
                    self.running.discard(job["id"])
                    self.cancels.pop(job["id"], None)

    # --- one job -------------------------------------------------------------------------

    def _check(self, job_id: str, deadline: float) -> None:
        if self.cancels[job_id].is_set():
            if self.stopping.is_set():
                raise JobEnd("failed", "service stopped")
            raise JobEnd("cancelled", "cancelled by the user")
        if time.monotonic() > deadline:
            raise JobEnd("failed", f"job timeout: ran over {self.config.job_timeout_s:g} s")

    def run_job(self, job: dict, slot: int) -> None:
        config = self.config
        work = config.work / job["id"]
        work.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + config.job_timeout_s
        self.store.audit(
            job["user"], "job started", job=job, build_sha256=self.build_sha256,
            detail=f"slot {slot}",
        )  # fmt: skip
        model = harness = None
        status, reason = "failed", "internal error"
        try:
            port = free_port()
            argv = config.template.argv(
                model=job["model"], revision=job["revision"], port=port, slot=slot,
                args=job["serving_args"],
            )  # fmt: skip
            (work / "endpoints.json").write_text(
                json.dumps({"model": f"http://127.0.0.1:{port}/v1", "judge": config.judge_endpoint})
            )
            model = self._start_model(job, argv, work)
            self._wait_healthy(job, model, port, work, deadline)
            harness = self._start_harness(job, port, work)
            self._wait_harness(job, model, harness, deadline)
            result = self._result(job, work)
            tmp = config.results / f".{job['id']}.tmp"
            tmp.write_text(json.dumps(result, indent=2, sort_keys=True), encoding="utf-8")
            os.replace(tmp, config.results / f"{job['id']}.json")
            status, reason = "done", None
        except JobEnd as end:
            status, reason = end.status, end.reason
        except Exception:
            log.error("job %s: %s", job["id"], traceback.format_exc())
            (work / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
            status, reason = "failed", "internal error (the maintainers have the details)"
        finally:
            stop_group(harness)
            stop_group(model)
            if not config.keep_work:
                shutil.rmtree(work / "run", ignore_errors=True)
        if self.store.finish(job["id"], status, reason):
            self.store.audit(
                job["user"], "job ended", job=job, build_sha256=self.build_sha256,
                outcome=status, detail=reason,
            )  # fmt: skip

    def _start_model(self, job: dict, argv: list[str], work: Path) -> subprocess.Popen:
        with (work / "model.log").open("ab") as out:
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, cwd=work,
                )  # fmt: skip
            except OSError as exc:
                raise JobEnd(
                    "failed", f"serving command could not start: {shlex.quote(argv[0])}: "
                    f"{exc.strerror or exc}",
                ) from None  # fmt: skip
        self.store.set_process(job["id"], "model", proc.pid, argv)
        return proc

    def _wait_healthy(self, job, model, port: int, work: Path, deadline: float) -> None:
        url = f"http://127.0.0.1:{port}/v1/models"
        healthy_by = min(deadline, time.monotonic() + self.config.health_timeout_s)
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                self._check(job["id"], deadline)
                code = model.poll()
                if code is not None:
                    # nothing of the benchmark was sent yet: the log tail is safe to show
                    raise JobEnd(
                        "failed",
                        f"serving command exited with status {code} before the model was "
                        f"healthy; last lines of its output:\n{tail(work / 'model.log')}",
                    )
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > healthy_by:
                    raise JobEnd(
                        "failed",
                        f"model never became healthy (GET /v1/models) within "
                        f"{min(self.config.health_timeout_s, self.config.job_timeout_s):g} s",
                    )
                time.sleep(POLL_S)

    def _start_harness(self, job: dict, port: int, work: Path) -> subprocess.Popen:
        config = self.config
        judge_host = urlsplit(config.judge_endpoint).hostname or "127.0.0.1"
        argv = [
            sys.executable, "-m", "redvox.release.serve.guard",
            "--connect-log", str(work / "connections.jsonl"), "--allow", judge_host, "--",
            "run", "--dataset", str(config.full), "--model", job["model"], "--name", "model",
            "--endpoint", f"http://127.0.0.1:{port}/v1", "--out", str(work / "run"),
            "--judge-endpoint", config.judge_endpoint, "--judge-model", config.judge_model,
            "--resamples", str(config.resamples), "--concurrency", str(config.concurrency),
            *config.infer_options,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k.upper() != "REDVOX_MODEL_API_KEY"}
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        with (work / "harness.log").open("ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=work, env=env,
            )  # fmt: skip
        self.store.set_process(job["id"], "harness", proc.pid, argv)
        return proc

    def _wait_harness(self, job, model, harness, deadline: float) -> None:
        while True:
            self._check(job["id"], deadline)
            code = harness.poll()
            if code is not None:
                if code != 0:
                    raise JobEnd(
                        "failed",
                        f"evaluation failed (evaluator exit status {code}); the maintainers "
                        f"have its log",
                    )
                return
            died = model.poll()
            if died is not None:
                raise JobEnd("failed", f"model process exited (status {died}) during evaluation")
            time.sleep(POLL_S)

    def _result(self, job: dict, work: Path) -> dict:
        config = self.config
        tag = default_tag(config.judge_model)
        usage = None
        for line in (work / "harness.log").read_text("utf-8", errors="replace").splitlines():
            if line.startswith("usage: "):
                usage = json.loads(line.removeprefix("usage: "))
        if usage is not None and config.judge_price_per_1k is not None:
            usage["cost"] = usage["total_tokens"] / 1000 * config.judge_price_per_1k
            usage["price_per_1k_tokens"] = config.judge_price_per_1k
        # the judge's calls and tokens follow the answers on withheld rows too (a model can
        # answer at a length of its choosing): the maintainers' log only, never the result
        log.info("job %s: judge usage %s", job["id"], json.dumps(usage))
        tables, counts, accounting = aggregate.tables(
            work / "run" / "judged", tag, self.public_keys, min_cell=config.min_cell,
            min_speakers=config.min_speakers, boot=Bootstrap(0, config.resamples),
            epsilon=config.epsilon_per_job, speaker_rows=config.speaker_rows,
            full_keys=aggregate.entry_keys(config.full),
        )  # fmt: skip
        # spent in the same transaction as the check, before the result exists anywhere
        spent = self.store.spend_epsilon(
            job["user"], job["id"], accounting["epsilon_job"], config.epsilon_budget
        )
        if spent is None:
            raise JobEnd("failed", "privacy budget spent: no result was released")
        accounting.update(epsilon_budget=config.epsilon_budget, epsilon_spent=spent,
                          epsilon_left=max(config.epsilon_budget - spent, 0.0))  # fmt: skip
        return {
            "job": {
                "id": job["id"], "model": job["model"], "revision": job["revision"],
                "serving_args": job["serving_args"],
            },
            "build": {
                "version": config.build.name, "full_manifest_sha256": self.build_sha256,
                "public_manifest_sha256": self.public_sha256, **counts,
            },
            "columns": {
                "full": "every consented voice, withheld ones included (private)",
                "public": "the same rows restricted to the public release",
            },
            "suppression": {
                "min_cell": config.min_cell, "min_speakers": config.min_speakers,
                "rule": "a full cell is null with the reason when its withheld part (rows not "
                "in the public build) has fewer rows or speakers, and is the public cell when "
                "that part is empty; a public cell is null below the same minimums over its "
                "labelled rows; a breakdown with one such cell hides its smallest other cell",
            },
            "privacy": accounting,
            "scale": "percent of labelled rows, 0-100; ci95 = cluster bootstrap by speaker, "
            "public cells only; a noisy full cell (noisy: true) gives counts = exact public + "
            "noisy withheld (unbiased), shares and n from them clamped at the public counts, "
            "and no ci95 or refusal",
            "tables": tables,
            "judge": {"model": config.judge_model, "tag": tag, "usage": "in the maintainers' log"},
        }  # fmt: skip

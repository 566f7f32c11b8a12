"""Runs queued jobs, one per GPU slot. A job is partitioned (jobfiles.partitions): the
public rows first, then each withheld speaker's rows alone. For each partition in turn:
export its rows into the job's 0700 folder; in a fresh bubblewrap sandbox (sandbox.py)
start the model from the maintainer's template, wait until it answers GET /v1/models and
run `infer` against it; once that sandbox is gone, take its answers for exactly its rows
(cut to a length cap) and delete what it wrote. Then rebuild the judge's input from the
build and the answers (jobfiles.py), judge it in a guarded subprocess, turn the judged
rows into suppressed aggregates, and delete every per-row file whatever happened. The
result, and the epsilon it costs, are released together when the job's hold ends. A job
that ends early says which stage ended it (store.REASONS); what its processes printed
and their exit statuses go to the maintainers' log STATE/logs/<job>.log (0600, capped).
Per-row files that cannot be deleted stop the runner from starting jobs (fail closed)."""

from __future__ import annotations

import json
import logging
import math
import os
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

from redvox.builder.manifest import MANIFEST, BuildManifest
from redvox.release.evaluation.redvox_eval.intervals import Bootstrap
from redvox.release.evaluation.redvox_eval.judge_outputs import default_tag
from redvox.schemas.layout import sha256_file

from . import aggregate, jobfiles, sandbox
from .sandbox import (
    HEALTH_TIMEOUT_S,
    JOB_TIMEOUT_S,
    RELEASE_QUANTUM_S,
    SLOT_SECONDS_PER_DAY,
    UNSANDBOXED,
)
from .store import Job, Store
from .validate import DEFAULT_ALLOWED_ARGS, Template

log = logging.getLogger("redvox.serve")
POLL_S = 0.25
LEFTOVER_RETRY_S = 10.0  # how often a runner that could not delete a job's files retries


class LeftoverWork(RuntimeError):
    """Per-row files of a job that could not be deleted; the message names them."""


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
    slot_seconds_per_day: float = SLOT_SECONDS_PER_DAY
    job_timeout_s: float = JOB_TIMEOUT_S
    health_timeout_s: float = HEALTH_TIMEOUT_S
    resamples: int = 1000
    concurrency: int = 16
    judge_price_per_1k: float | None = None
    allowed_args: tuple[str, ...] = DEFAULT_ALLOWED_ARGS
    keep_work: bool = False
    max_answer_bytes: int = jobfiles.MAX_ANSWER_BYTES  # an answer is cut to this for the judge
    infer_options: tuple[str, ...] = field(default_factory=tuple)  # extra `evaluate infer` words
    # what a job's sandbox may see beyond the defaults (None: nothing more)
    sandbox: sandbox.Policy | None = None
    unsandboxed_dev: bool = False
    judge_private_text: bool = False  # withheld transcripts to a loopback judge
    release_quantum_s: float = RELEASE_QUANTUM_S

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

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    def policy(self) -> sandbox.Policy:
        return self.sandbox or sandbox.Policy(forbidden=(self.state, self.build))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_group(proc: subprocess.Popen | None, grace_s: float = 5.0) -> None:
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


def write_private(path: Path, text: str) -> None:
    """PATH (0600) holding TEXT, replaced atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def append(path: Path, data: bytes) -> None:
    """DATA added to the end of PATH (created 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class JobEnd(Exception):
    """The end of a job: STATUS, a REASON of store.REASONS, and the audit DETAIL."""

    def __init__(self, status: str, reason: str, detail: str | None = None):
        super().__init__(reason)
        self.status, self.reason, self.detail = status, reason, detail or reason


# the launcher's exit status -> the reason a job gives
LAUNCH_REASONS = {
    sandbox.NOT_HEALTHY: "model did not become healthy",
    sandbox.MODEL_EXITED: "model exited",
}


class Runner:
    def __init__(self, config: Config, store: Store):
        self.config, self.store = config, store
        for side in (config.full, config.public):
            if not (side / MANIFEST).is_file() or not (side / "data").is_dir():
                raise ValueError(f"{side}: not a build (expected {MANIFEST} and data/)")
            BuildManifest.load(side)  # a ManifestError names the file and the field
        self.build_sha256 = sha256_file(config.full / MANIFEST)
        self.public_sha256 = sha256_file(config.public / MANIFEST)
        self.public_keys = aggregate.entry_keys(config.public)
        for folder in (config.results, config.work, config.logs):
            jobfiles.private_dir(folder)
        self.cancels: dict[str, threading.Event] = {}
        self.running: set[str] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.leftovers: dict[Path, list[str]] = {}  # work folders that could not be deleted
        self.leftover_checked = 0.0

    def note(self, job_id: str, message: str, level: int = logging.INFO) -> None:
        """A line of the service log about a job (flagged when unsandboxed)."""
        prefix = f"{UNSANDBOXED}: " if self.config.unsandboxed_dev else ""
        log.log(level, "%sjob %s: %s", prefix, job_id, message)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        for job in self.store.interrupted():
            self._kill_leftover(job)
            self.store.audit(
                job.user, "job ended", job=job, build_sha256=self.build_sha256,
                outcome="failed", detail="service restarted",
            )  # fmt: skip
        if not self.config.keep_work:  # nothing runs yet: any per-row file is a leftover
            for folder in self.config.work.iterdir():
                self._remove_work(folder)
            if self.leftovers:
                raise LeftoverWork(self._leftover_text())
        for slot in range(self.config.slots):
            thread = threading.Thread(target=self._slot, args=(slot,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        """Ends the running jobs (failed: cancelled, service stopped) and the slot threads."""
        self.stopping.set()
        with self.lock:
            events = [self.cancels[j] for j in self.running if j in self.cancels]
        for event in events:
            event.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _leftover_text(self) -> str:
        lines = [line for problems in self.leftovers.values() for line in problems]
        return (
            f"per-row files that could not be deleted: {'; '.join(lines[:5])}"
            + (f" (and {len(lines) - 5} more)" if len(lines) > 5 else "")
            + "; no job starts until they are gone (remove them as the service's user or root)"
        )

    def _remove_work(self, folder: Path) -> bool:
        """Deletes a job's work FOLDER (jobfiles.remove_tree); what it cannot delete is
        logged as an error, audited, and keeps the runner from starting jobs."""
        problems = jobfiles.remove_tree(folder)
        with self.lock:
            if not problems:
                self.leftovers.pop(folder, None)
                return True
            first = folder not in self.leftovers
            self.leftovers[folder] = problems
        if first:
            log.error("could not delete %s (%s): no job starts until it is gone",
                      folder, "; ".join(problems[:5]))  # fmt: skip
            self.store.audit(None, "work left over", detail=f"{folder}: {'; '.join(problems[:5])}")
        return False

    def _blocked(self) -> bool:
        """True while a job's per-row files are left over (retried every LEFTOVER_RETRY_S)."""
        with self.lock:
            if not self.leftovers:
                return False
            due = time.monotonic() - self.leftover_checked >= LEFTOVER_RETRY_S
            if due:
                self.leftover_checked = time.monotonic()
            folders = list(self.leftovers)
        if due:
            for folder in folders:
                if self._remove_work(folder):
                    log.warning("deleted the leftover %s: jobs start again", folder)
        with self.lock:
            return bool(self.leftovers)

    def _kill_leftover(self, job: Job) -> None:
        """Every process group of a job the last service process left running, each only
        if its leader still has the recorded start time (pids are reused)."""
        for process in self.store.processes(job.id):
            if sandbox.kill_group(process["pid"], process["start"]):
                self.note(job.id, f"ended the {process['role']} group {process['pid']}")

    def cancel(self, job_id: str) -> bool:
        """Asks a running job to stop; False when it is not running here."""
        with self.lock:
            event = self.cancels.get(job_id)
            if event is None:
                job = self.store.job(job_id)
                if job is None or job.status != "running":
                    return False
                # claimed by a slot that has not registered it yet: it will see this
                event = self.cancels[job_id] = threading.Event()
        event.set()
        return True

    def _slot(self, slot: int) -> None:
        while not self.stopping.is_set():
            if self._blocked():  # fail closed: per-row files of an earlier job remain
                self.stopping.wait(POLL_S)
                continue
            job = self.store.claim(slot)
            if job is None:
                self.stopping.wait(POLL_S)
                continue
            with self.lock:
                self.cancels.setdefault(job.id, threading.Event())
                self.running.add(job.id)
            try:
                self.run_job(job, slot)
            finally:
                with self.lock:
                    self.running.discard(job.id)
                    self.cancels.pop(job.id, None)

    # --- one job -------------------------------------------------------------------------

    def _check(self, job_id: str, deadline: float) -> None:
        if self.cancels[job_id].is_set():
            if self.stopping.is_set():
                raise JobEnd("failed", "cancelled", "service stopped")
            raise JobEnd("cancelled", "cancelled", "cancelled by the user")
        if time.monotonic() > deadline:
            raise JobEnd("failed", "timeout")

    def _time_left(self, job: Job) -> float:
        """The job timeout, or less: what is left of its user's slot time today."""
        now = time.time()
        used = self.store.slot_seconds_since(job.user, now - 86400, now)
        return min(self.config.job_timeout_s, self.config.slot_seconds_per_day - used)

    def run_job(self, job: Job, slot: int) -> None:
        config = self.config
        work = jobfiles.private_dir(config.work / job.id)
        journal = config.logs / f"{job.id}.log"
        deadline = time.monotonic() + self._time_left(job)
        self.store.audit(
            job.user, "job started", job=job, build_sha256=self.build_sha256,
            detail=f"slot {slot}" + (" UNSANDBOXED" if config.unsandboxed_dev else ""),
        )  # fmt: skip
        status, reason, detail = "failed", "evaluation failed", "internal error"
        result = None
        try:
            self._check(job.id, deadline)
            rows = jobfiles.build_rows(config.full)
            runs = jobfiles.partitions(rows, self.public_keys)
            for number, partition in enumerate(runs, 1):
                answers = self._run_partition(
                    job, slot, work, partition, (number, len(runs)), journal, deadline
                )
                jobfiles.write_judged_input(
                    answers, rows, work / "run" / "outputs", self.public_keys,
                    config.judge_private_text,
                )  # fmt: skip
            del rows
            self._judge(job, work, journal, deadline)
            result = self._result(job, work)
            sandboxing = (
                {"isolated": False, "note": UNSANDBOXED}
                if config.unsandboxed_dev
                else {"isolated": True, "tool": "bubblewrap", "network": "own loopback only"}
            )
            result["sandbox"] = {
                **sandboxing, "runs": len(runs),
                "partitioned": "the model ran once per partition of the rows, each run given "
                "only its own rows, in a fresh sandbox, nothing it wrote kept for another: "
                "the public rows first, then each withheld speaker's rows alone (withheld "
                "rows without a speaker: one run of their own)",
            }  # fmt: skip
            status, reason, detail = "done", None, None
        except JobEnd as end:
            status, reason, detail = end.status, end.reason, end.detail
        except Exception:
            self.note(job.id, f"internal error, see {journal}", logging.ERROR)
            append(journal, traceback.format_exc().encode())
        finally:
            self._kill_leftover(job)
            if not config.keep_work:
                self._remove_work(work)
        self.note(job.id, f"{status}" + (f": {detail}" if detail else ""))
        if reason != "cancelled" and self._hold(job):
            status, reason, detail = "cancelled", "cancelled", f"cancelled while held ({detail})"
            result = None
        if status == "done":  # released now: its epsilon is spent with it, not before
            try:
                status, reason, detail = self._release(job, result)
            except Exception:
                status, reason, detail = "failed", "evaluation failed", "internal error"
                self.note(job.id, f"internal error at the release, see {journal}", logging.ERROR)
                append(journal, traceback.format_exc().encode())
                (config.results / f"{job.id}.json").unlink(missing_ok=True)
        if self.store.finish(job.id, status, reason):
            self.store.audit(
                job.user, "job ended", job=job, build_sha256=self.build_sha256,
                outcome=status, detail=detail,
            )  # fmt: skip

    def _release(self, job: Job, result: dict) -> tuple[str, str | None, str | None]:
        """Spends the job's epsilon (atomic with the budget check) and writes its result;
        (status, reason, detail) of the job. Called when the hold ends, so what a user sees
        of their budget changes only at a submission and at a job's release."""
        config = self.config
        accounting = result["privacy"]
        spent = self.store.spend_epsilon(
            job.user, job.id, accounting["epsilon_job"], config.epsilon_budget
        )
        if spent is None:  # no result is released
            return "failed", "privacy budget spent", "privacy budget spent"
        accounting.update(epsilon_budget=config.epsilon_budget, epsilon_spent=spent,
                          epsilon_left=max(config.epsilon_budget - spent, 0.0))  # fmt: skip
        write_private(
            config.results / f"{job.id}.json", json.dumps(result, indent=2, sort_keys=True)
        )
        return "done", None, None

    def _hold(self, job: Job) -> bool:
        """Keeps an ended job running, its slot held, up to the next multiple of
        release_quantum_s after its start: when a job ends (and when the next one starts)
        says nothing finer of what its model did. True when its user cancelled it then."""
        quantum = self.config.release_quantum_s
        if quantum <= 0:
            return False
        spent = time.time() - job.started
        release = job.started + max(1, math.ceil(spent / quantum)) * quantum
        event = self.cancels[job.id]
        while (left := release - time.time()) > 0:
            if event.wait(min(left, 1.0)):
                return not self.stopping.is_set()
        return False

    def _run_partition(self, job, slot: int, work: Path, partition: jobfiles.Partition,
                       run: tuple[int, int], journal: Path, deadline: float) -> dict:  # fmt: skip
        """One run of the model on PARTITION's rows only: its input exported afresh, an
        empty output folder, its own sandbox; its answers for exactly those rows, after
        which everything the run wrote is deleted (kept as input.N and output.N with
        keep_work, never shown to another run)."""
        config = self.config
        label = f"run {run[0]}/{run[1]}"
        self._check(job.id, deadline)
        for folder in (work / "input", work / "output"):
            if jobfiles.remove_tree(folder):
                raise JobEnd("failed", "evaluation failed", f"{label}: {folder} not deleted")
        renamed = jobfiles.export_run_input(config.full, work / "input", partition.keys)
        exported = len(renamed)
        if set(renamed.values()) != set(partition.keys):
            raise RuntimeError(f"{label}: exported {exported} rows of {len(partition.keys)}")
        output = jobfiles.private_dir(work / "output")
        append(journal, f"--- {label}: {partition.name}, {exported} rows\n".encode())
        self._sandboxed(job, slot, work, output, journal, deadline)
        try:
            answers = jobfiles.read_answers(output, frozenset(renamed), config.max_answer_bytes)
            answers.by_key = {renamed[key]: answer for key, answer in answers.by_key.items()}
        except jobfiles.OutputRejected as exc:
            raise JobEnd("failed", "evaluation failed", f"answers refused: {exc}") from None
        if answers.cut:
            append(journal, f"--- {label}: {answers.cut} answer(s) over {config.max_answer_bytes} "
                            f"bytes cut for the judge (longest {answers.longest})\n".encode())  # fmt: skip
        for folder in (work / "input", work / "output"):
            if config.keep_work:
                os.replace(folder, folder.with_name(f"{folder.name}.{run[0]}"))
            elif jobfiles.remove_tree(folder):
                raise JobEnd("failed", "evaluation failed", f"{label}: {folder} not deleted")
        return answers.by_key

    def _spawn(self, job: Job, role: str, argv: list[str], journal: Path, **popen):
        """ARGV in a session of its own (SIGKILLed if the service dies), its output into the
        capped journal, its group recorded; (process, log)."""
        capped = sandbox.CappedLog(journal)
        append(journal, f"--- {role}: {json.dumps(argv)}\n".encode())
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=capped.write_fd, stderr=capped.write_fd,
                start_new_session=True, preexec_fn=sandbox.child_setup, **popen,
            )  # fmt: skip
        finally:
            capped.started()
        start = sandbox.start_time(proc.pid)
        if start is not None:
            self.store.track_process(job.id, role, proc.pid, start)
        return proc, capped

    def _end(self, proc, capped, journal: Path, role: str) -> None:
        stop_group(proc)
        capped.close()
        append(journal, f"\n--- {role} exit status {proc.returncode}\n".encode())

    def _sandboxed(self, job, slot: int, work: Path, output: Path, journal: Path,
                   deadline: float) -> None:  # fmt: skip
        """The model and infer, together in one sandbox, until the launcher exits; the
        sandbox gets WORK/input (one partition's rows) and OUTPUT."""
        config = self.config
        port = free_port()
        model_argv = config.template.argv(
            model=job.model, revision=job.revision, port=port, slot=slot,
            args=job.serving_args,
        )  # fmt: skip
        dev = config.unsandboxed_dev
        input_dir, output_dir = (work / "input", output) if dev else (sandbox.INPUT, sandbox.OUTPUT)
        spec = {
            "model": model_argv, "port": port,
            "health_timeout_s": min(config.health_timeout_s, deadline - time.monotonic()),
            "limits": None if dev else config.policy().limits(),
            "infer": [
                "--dataset", str(input_dir), "--model", job.model, "--name", jobfiles.NAME,
                "--endpoint", f"http://127.0.0.1:{port}/v1", "--out", str(output_dir),
                "--concurrency", str(config.concurrency), *config.infer_options,
            ],
        }  # fmt: skip
        inner = [sys.executable, "-P", "-m", "redvox.release.serve.sandbox", json.dumps(spec)]
        if dev:
            env = {k: v for k, v in os.environ.items() if not k.upper().startswith("REDVOX_")}
            argv, popen = inner, {"env": env, "cwd": work}
        else:  # bwrap itself with an empty environment: its pid 1 would show it inside
            argv = config.policy().command(model_argv, work / "input", output, inner)
            popen = {"env": {}, "cwd": "/"}
        proc, capped = self._spawn(job, "sandbox", argv, journal, **popen)
        try:
            ticks = 0
            while (code := proc.poll()) is None:
                self._check(job.id, deadline)
                ticks += 1
                if ticks % 4 == 0:
                    try:
                        size, entries = jobfiles.output_size(output)
                    except jobfiles.OutputRejected as exc:
                        raise JobEnd(
                            "failed", "evaluation failed", f"output refused: {exc}"
                        ) from None
                    if size > jobfiles.MAX_OUTPUT or entries > jobfiles.MAX_ENTRIES:
                        raise JobEnd("failed", "evaluation failed", "output over its limit")
                time.sleep(POLL_S)
        finally:
            self._end(proc, capped, journal, "sandbox")
        if code != 0:
            reason = LAUNCH_REASONS.get(code, "evaluation failed")
            raise JobEnd("failed", reason, f"{reason} (launcher status {code})")

    def _judge(self, job, work: Path, journal: Path, deadline: float) -> None:
        """The judge over the input rebuilt from the build and every run's answers, in a
        guarded subprocess outside any sandbox (the model is gone by now)."""
        config = self.config
        judge_host = urlsplit(config.judge_endpoint).hostname or "127.0.0.1"
        argv = [
            sys.executable, "-P", "-m", "redvox.release.serve.guard",
            "--connect-log", str(config.logs / f"{job.id}.connections.jsonl"),
            "--allow", judge_host, "--",
            "judge", str(work / "run" / "outputs"), "--out", str(work / "run" / "judged"),
            "--base-url", config.judge_endpoint, "--model", config.judge_model,
            "--cache-dir", str(work / "run" / "cache"),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k.upper() != "REDVOX_MODEL_API_KEY"}
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        # harness.log is read back for the judge's token use, then joins the journal
        proc, judged = self._spawn(job, "judge", argv, work / "harness.log", cwd=work, env=env)
        try:
            while (code := proc.poll()) is None:
                self._check(job.id, deadline)
                time.sleep(POLL_S)
        finally:
            self._end(proc, judged, journal, "judge")
            append(journal, (work / "harness.log").read_bytes())
        if code != 0:
            raise JobEnd("failed", "evaluation failed", f"judge exit status {code}")

    def _result(self, job: Job, work: Path) -> dict:
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
        log.info("job %s: judge usage %s", job.id, json.dumps(usage))
        tables, counts, accounting = aggregate.tables(
            work / "run" / "judged", tag, self.public_keys, min_cell=config.min_cell,
            min_speakers=config.min_speakers, boot=Bootstrap(0, config.resamples),
            epsilon=config.epsilon_per_job, speaker_rows=config.speaker_rows,
            full_keys=aggregate.entry_keys(config.full),
        )  # fmt: skip
        # epsilon_spent and epsilon_left are added at the release (_release), where the
        # job's epsilon is spent in the same transaction as the check
        return {
            "job": {
                "id": job.id, "model": job.model, "revision": job.revision,
                "serving_args": job.serving_args,
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

"""Judge through the OpenAI Batch API: half the price, answers within the completion window.

The requests not yet in the verdict cache go in one JSONL file (`custom_id` = cache key),
uploaded with purpose "batch"; a batch is created on `/v1/chat/completions` and polled;
its output file is downloaded and each answer lands in the same verdict cache as
synchronous judging, so the two modes mix (a later run without --batch asks nothing).

The batch id is kept in a small state file beside the judged outputs: a rerun after an
interruption (or after `--no-wait`) polls that batch instead of submitting a new one.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from .judge import (
    EndpointRejected,
    JudgeClient,
    JudgeError,
    JudgePrompts,
    JudgeTask,
    VerdictCache,
    parse_verdict,
)
from .judge_outputs import _task, is_labelled
from .outputs import OutputFile, read_jsonl

DONE = ("completed", "failed", "expired", "cancelled")
STATE_NAME = ".redvox-batch-{tag}.json"


@dataclass
class BatchRun:
    submitted: int = 0  # requests sent in new batches
    collected: int = 0  # verdicts taken from batch output files
    failed: int = 0  # requests the batch answered with an error or a malformed verdict
    pending: str | None = None  # batch id still running (with wait=False)


def pending_tasks(
    files: Sequence[OutputFile], prompts: JudgePrompts, judge_model: str, cache: VerdictCache
) -> list[JudgeTask]:
    """What synchronous judging would ask: unlabelled rows not in the cache, one per key."""
    tasks: dict[str, JudgeTask] = {}
    for file in files:
        for number, row in read_jsonl(file.path):
            if is_labelled(row):
                continue
            task = _task(row, f"{file.path}:{number}", prompts, judge_model)
            if cache.get(task.key) is None:
                tasks.setdefault(task.key, task)
    return list(tasks.values())


class BatchJudge:
    def __init__(
        self,
        client: JudgeClient,
        cache: VerdictCache,
        state_path: Path,
        poll_s: float = 30.0,
        echo: Callable[[str], None] = print,
    ):
        self.client, self.cache, self.state_path = client, cache, state_path
        self.poll_s, self.echo = poll_s, echo
        self.base = client.endpoint.base_url.rstrip("/")
        self.http: httpx.Client = client.http

    # --- HTTP ---------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        url = f"{self.base}{path}"
        problem = ""
        for attempt in range(self.client.max_retries + 1):
            try:
                response = self.http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                problem = f"could not reach {url} ({type(exc).__name__})"
            else:
                if response.status_code < 300:
                    return response
                if response.status_code != 429 and response.status_code < 500:
                    raise EndpointRejected(
                        f"{method} {url} answered {response.status_code}: "
                        f"{response.text[:300]}; does this endpoint offer the Batch API "
                        f"(/files, /batches)? Judge without --batch otherwise"
                    )
                problem = f"{method} {url} answered {response.status_code}"
            if attempt < self.client.max_retries:
                time.sleep(self.client.backoff_s * 2**attempt)
        raise JudgeError(f"{problem}; the batch state is kept in {self.state_path}, rerun")

    # --- state --------------------------------------------------------------------------

    def _state(self) -> dict | None:
        if not self.state_path.exists():
            return None
        try:
            state = json.loads(self.state_path.read_text("utf-8"))
        except json.JSONDecodeError:
            return None
        same = state.get("base_url") == self.base and state.get("model") == self.model
        return state if same and state.get("batch_id") else None

    @property
    def model(self) -> str:
        return self.client.endpoint.model

    def _save(self, batch_id: str, n: int, digest: str) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "batch_id": batch_id,
            "base_url": self.base,
            "model": self.model,
            "requests": n,
            "requests_sha256": digest,
            "submitted": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self.state_path.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")

    # --- steps --------------------------------------------------------------------------

    def submit(self, tasks: Sequence[JudgeTask]) -> str:
        lines = [
            json.dumps(
                {
                    "custom_id": task.key,
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": self.client._body(task.messages),
                },
                ensure_ascii=False,
            )
            for task in tasks
        ]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        uploaded = self._call(
            "POST",
            "/files",
            data={"purpose": "batch"},
            files={"file": ("redvox-judge.jsonl", data, "application/jsonl")},
        ).json()
        batch = self._call(
            "POST",
            "/batches",
            json={
                "input_file_id": uploaded["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                "metadata": {"description": f"RedVox judge, {len(tasks)} requests"},
            },
        ).json()
        self._save(batch["id"], len(tasks), hashlib.sha256(data).hexdigest())
        self.echo(f"submitted batch {batch['id']} ({len(tasks)} requests)")
        return batch["id"]

    def poll(self, batch_id: str, wait: bool) -> dict:
        while True:
            batch = self._call("GET", f"/batches/{batch_id}").json()
            status = batch.get("status")
            if status in DONE or not wait:
                return batch
            counts = batch.get("request_counts") or {}
            self.echo(
                f"batch {batch_id}: {status} ({counts.get('completed', 0)}/"
                f"{counts.get('total', '?')} done); next look in {self.poll_s:g}s"
            )
            time.sleep(self.poll_s)

    def collect(self, batch: dict, run: BatchRun) -> None:
        """Every valid verdict of the batch's output file into the cache."""
        if batch.get("status") != "completed":
            errors = (batch.get("errors") or {}).get("data") or []
            reasons = "; ".join(str(e.get("message", e)) for e in errors[:3])
            self.echo(
                f"batch {batch['id']} {batch.get('status')}{': ' + reasons if reasons else ''}"
            )
        file_id = batch.get("output_file_id")
        if file_id:
            text = self._call("GET", f"/files/{file_id}/content").text
            for line in text.split("\n"):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    key = entry["custom_id"]
                    response = entry.get("response") or {}
                    body = response.get("body") or {}
                    if entry.get("error") or response.get("status_code", 200) >= 300:
                        raise ValueError(str(entry.get("error") or response.get("status_code")))
                    self.client.usage.add(body.get("usage"))
                    verdict = parse_verdict(body["choices"][0]["message"]["content"] or "")
                except (ValueError, KeyError, IndexError, TypeError):
                    run.failed += 1
                    continue
                self.cache.put(key, verdict, self.model)
                run.collected += 1
        if batch.get("error_file_id"):
            errors = self._call("GET", f"/files/{batch['error_file_id']}/content").text
            run.failed += sum(1 for line in errors.split("\n") if line.strip())
        self.state_path.unlink(missing_ok=True)

    def run(self, tasks: Sequence[JudgeTask], wait: bool = True) -> BatchRun:
        """Resume the batch in the state file, if any; then submit what is still missing."""
        run = BatchRun()
        state = self._state()
        if state is not None:
            self.echo(f"resuming batch {state['batch_id']} from {self.state_path}")
            batch = self.poll(state["batch_id"], wait)
            if batch.get("status") not in DONE:
                run.pending = batch["id"]
                return run
            self.collect(batch, run)
        todo = [t for t in tasks if self.cache.get(t.key) is None]
        if todo:
            batch_id = self.submit(todo)
            run.submitted = len(todo)
            batch = self.poll(batch_id, wait)
            if batch.get("status") not in DONE:
                run.pending = batch_id
            else:
                self.collect(batch, run)
        return run


def state_path(files: Sequence[OutputFile], out: Path | None, tag: str) -> Path:
    """Beside the judged outputs: in --out, or in the folder of the first input file."""
    folder = out if out is not None else files[0].path.parent
    return folder / STATE_NAME.format(tag=tag)

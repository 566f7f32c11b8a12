"""Run a speech model on RedVox through OpenAI-compatible `/v1/chat/completions`.

Each row becomes one request: a speech row sends the participant's recording, then
`user_text` (the typed follow-up); a text row sends `user_text` (harmful content and
follow-up), then its distracting clip; `--text-only` sends the request as text alone
(`user_text`; for speech rows what was spoken, then `user_text`). Audio goes as a base64
`input_audio` part (OpenAI) or an `audio_url` data URL (vLLM), each distinct clip encoded
once.

Answers are appended to `<out>/<lang>/<model>.jsonl` (`<out>/text-only/<lang>/...` for
text-only runs) one line per row as it arrives, flushed, so a killed run loses only the
requests in flight and `--continue` picks up the rest without duplicating a line.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from tqdm import tqdm

from .errors import EvaluationError
from .judge import _retry_after, request_of
from .outputs import TEXT_ONLY_DIR

FAILURES_TO_SET_ASIDE = 3
ENCODED_CACHE_CLIPS = 64
REJECTING = (401, 403, 404)  # retrying or sending other rows would not help


class InferError(EvaluationError):
    """The run cannot go on (bad endpoint, credentials, model name)."""


def safe_name(model: str) -> str:
    """A model name as a file name: `Qwen/Qwen2-Audio-7B` -> `Qwen__Qwen2-Audio-7B`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model.replace("/", "__")).strip("._") or "model"


def output_path(out: Path, lang: str, name: str, text_only: bool) -> Path:
    """Where outputs.py finds a run: `<out>/<lang>/<name>.jsonl`, text-only under `text-only/`."""
    base = out / TEXT_ONLY_DIR if text_only else out
    return base / lang / f"{name}.jsonl"


def row_key(row: dict) -> tuple[str, str]:
    """A row's identity within a run (the evaluator's own: lang and ID)."""
    return str(row.get("lang")), str(row.get("ID"))


# --- audio ----------------------------------------------------------------------------


def sniff_format(data: bytes) -> str:
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    raise InferError("audio is neither FLAC nor WAV; RedVox shards hold 16 kHz FLAC")


class AudioEncoder:
    """Base64 of a clip in the wanted container, cached by the sha256 of its bytes: the
    rows of a condition share one clip, which is then converted and encoded once."""

    def __init__(self, audio_format: str = "auto", capacity: int = ENCODED_CACHE_CLIPS):
        self.audio_format, self.capacity = audio_format, capacity
        self._cache: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()
        self.encoded = self.reused = 0

    def encode(self, data: bytes) -> tuple[str, str]:
        """(base64 text, format name) of DATA."""
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                self.reused += 1
                return self._cache[digest]
        stored = sniff_format(data)
        wanted = stored if self.audio_format == "auto" else self.audio_format
        if wanted != stored:
            data = convert(data, wanted)
        value = (base64.b64encode(data).decode("ascii"), wanted)
        with self._lock:
            self.encoded += 1
            self._cache[digest] = value
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return value


def convert(data: bytes, audio_format: str) -> bytes:
    """FLAC <-> WAV (16-bit PCM), same samples and rate, through soundfile."""
    try:
        # optional: only format conversion needs it; FLAC is sent as stored otherwise
        soundfile = importlib.import_module("soundfile")
    except ImportError:
        raise InferError(
            f"--audio-format {audio_format} needs the `soundfile` package (pip install "
            f"soundfile); without it, leave --audio-format at auto to send the clips as stored"
        ) from None
    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    buffer = io.BytesIO()
    subtype = "PCM_16"
    soundfile.write(buffer, samples, rate, format=audio_format.upper(), subtype=subtype)
    return buffer.getvalue()


def audio_part(b64: str, audio_format: str, kind: str) -> dict:
    if kind == "audio_url":
        return {
            "type": "audio_url",
            "audio_url": {"url": f"data:audio/{audio_format};base64,{b64}"},
        }
    return {"type": "input_audio", "input_audio": {"data": b64, "format": audio_format}}


@dataclass(frozen=True)
class RequestStyle:
    model: str
    text_only: bool = False
    audio_part: str = "input_audio"  # or audio_url
    system_prompt: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    extra_body: dict = field(default_factory=dict)

    def params(self) -> dict:
        """Decoding parameters sent, for `meta` (only those given)."""
        sent = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        params = {k: v for k, v in sent.items() if v is not None}
        if self.system_prompt is not None:
            params["system_prompt"] = self.system_prompt
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params


def text_of(row: dict, text_only: bool) -> str:
    if not text_only:
        return str(row.get("user_text") or "")
    if row.get("modality") == "speech":
        return request_of(row, f"row {row.get('lang')}/{row.get('ID')}")
    return str(row.get("user_text") or "")


def request_body(row: dict, style: RequestStyle, encoder: AudioEncoder) -> dict:
    """The chat-completions body for ROW; nothing the user did not ask for is sent."""
    text = {"type": "text", "text": text_of(row, style.text_only)}
    if style.text_only:
        content: list[dict] | str = text["text"]
    else:
        audio = row.get("audio") or {}
        if not audio.get("bytes"):
            raise InferError(f"row {row.get('lang')}/{row.get('ID')}: no audio bytes")
        b64, fmt = encoder.encode(audio["bytes"])
        part = audio_part(b64, fmt, style.audio_part)
        content = [part, text] if row.get("modality") == "speech" else [text, part]
    messages = [{"role": "user", "content": content}]
    if style.system_prompt is not None:
        messages.insert(0, {"role": "system", "content": style.system_prompt})
    body: dict = {**style.extra_body, "model": style.model, "messages": messages}
    if style.temperature is not None:
        body["temperature"] = style.temperature
    if style.max_tokens is not None:
        body["max_tokens"] = style.max_tokens
    return body


# --- replicas -------------------------------------------------------------------------


@dataclass
class Replica:
    base_url: str
    in_flight: int = 0
    failures: int = 0  # consecutive connection errors / 5xx
    requests: int = 0
    answered: int = 0
    set_aside: bool = False

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def host(self) -> str:
        """Host and port only: no credentials, no path."""
        parts = urlsplit(self.base_url)
        return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else ""


class ReplicaPool:
    """Least-busy choice among live replicas (round-robin among equals); a replica failing
    FAILURES_TO_SET_ASIDE times in a row is set aside and gets no more requests."""

    def __init__(
        self, base_urls: Sequence[str], failures_to_set_aside: int = FAILURES_TO_SET_ASIDE
    ):
        if not base_urls:
            raise InferError("no endpoint: pass --endpoint URL (repeatable) or --endpoints-file")
        self.replicas = [Replica(u) for u in dict.fromkeys(base_urls)]
        self.limit = failures_to_set_aside
        self._next = 0
        self._lock = threading.Lock()

    def acquire(self) -> Replica | None:
        with self._lock:
            live = [r for r in self.replicas if not r.set_aside]
            if not live:
                return None
            n = len(self.replicas)
            order = [self.replicas[(self._next + i) % n] for i in range(n)]
            choice = min((r for r in order if not r.set_aside), key=lambda r: r.in_flight)
            self._next = (self.replicas.index(choice) + 1) % n
            choice.in_flight += 1
            choice.requests += 1
            return choice

    def release(self, replica: Replica, outcome: str) -> None:
        """outcome: ok, failed (connection error / 5xx / timeout) or other (429, 4xx)."""
        with self._lock:
            replica.in_flight -= 1
            if outcome == "ok":
                replica.failures = 0
                replica.answered += 1
            elif outcome == "failed":
                replica.failures += 1
                if replica.failures >= self.limit:
                    replica.set_aside = True

    @property
    def set_aside(self) -> list[Replica]:
        return [r for r in self.replicas if r.set_aside]

    @property
    def all_set_aside(self) -> bool:
        return all(r.set_aside for r in self.replicas)


# --- the run --------------------------------------------------------------------------


@dataclass
class Answer:
    output: str | None
    error: str | None
    meta: dict


@dataclass
class InferSummary:
    rows: int = 0  # rows selected
    skipped: int = 0  # already answered (--continue)
    answered: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)
    clips_encoded: int = 0
    clips_reused: int = 0
    per_replica: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        done = self.answered + self.errors
        return {
            "rows": self.rows,
            "skipped": self.skipped,
            "answered": self.answered,
            "errors": self.errors,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "wall_s": round(self.wall_s, 2),
            "rows_per_s": round(done / self.wall_s, 1) if self.wall_s else None,
            "clips_encoded": self.clips_encoded,
            "clips_reused": self.clips_reused,
            "requests_per_endpoint": self.per_replica,
            "set_aside": self.set_aside,
        }


class ModelClient:
    """One request per row with retries: 429/5xx/timeouts/connection errors back off
    exponentially (or as Retry-After says) and are retried, on another replica when one is
    free; after the last retry the row becomes an error row."""

    def __init__(
        self,
        pool: ReplicaPool,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        concurrency: int = 16,
    ):
        self.pool, self.max_retries, self.backoff_s = pool, max_retries, backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(
            max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4
        )
        self.http = httpx.Client(headers=headers, timeout=timeout_s, limits=limits)
        self.rejected: InferError | None = None

    def close(self) -> None:
        self.http.close()

    def answer(self, body: dict, style: RequestStyle) -> Answer:
        problem = "no attempt"
        for attempt in range(self.max_retries + 1):
            if self.rejected is not None:
                raise self.rejected
            replica = self.pool.acquire()
            if replica is None:
                problem = f"every endpoint set aside after repeated failures; last: {problem}"
                break
            wait_s = self.backoff_s * 2**attempt
            outcome = "failed"
            started = time.monotonic()
            try:
                response = self.http.post(replica.url, json=body)
            except httpx.TransportError as exc:
                problem = f"{replica.host}: {type(exc).__name__}"
            else:
                status = response.status_code
                if status == 200:
                    try:
                        answer = self._parse(response, replica, style, started, attempt)
                    except ValueError as exc:
                        problem, outcome = f"{replica.host}: malformed answer: {exc}", "other"
                    else:
                        self.pool.release(replica, "ok")
                        return answer
                elif status == 429 or status >= 500:
                    problem = f"{replica.host} answered {status}"
                    outcome = "other" if status == 429 else "failed"
                    asked = _retry_after(response)
                    wait_s = wait_s if asked is None else asked
                elif status in REJECTING:
                    self.pool.release(replica, "other")
                    self.rejected = InferError(
                        f"{replica.url} answered {status}: {response.text[:300]}; check the "
                        f"endpoint URL, the model name ({style.model}) and the API key"
                    )
                    raise self.rejected
                else:  # 400, 413, 422: this row's request is refused; others may pass
                    self.pool.release(replica, "other")
                    return Answer(
                        None, f"{replica.host} answered {status}: {response.text[:300]}", {}
                    )
            self.pool.release(replica, outcome)
            if attempt < self.max_retries and not self.pool.all_set_aside:
                time.sleep(wait_s)
        return Answer(None, f"no answer after {self.max_retries + 1} attempts; last: {problem}", {})

    def _parse(self, response, replica, style, started, attempt) -> Answer:
        try:
            body = response.json()
            choice = body["choices"][0]
            content = choice["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ValueError(f"no choices[0].message in {response.text[:200]!r}") from None
        usage = body.get("usage") or {}
        meta = {
            "endpoint": replica.host,
            "params": style.params(),
            "latency_s": round(time.monotonic() - started, 3),
            "usage": {
                k: usage.get(k)
                for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                if k in usage
            },
            "finish_reason": choice.get("finish_reason"),
            "attempts": attempt + 1,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        return Answer(content if isinstance(content, str) else "", None, meta)


def output_record(row: dict, answer: Answer, name: str, style: RequestStyle) -> dict:
    record = {k: v for k, v in row.items() if k != "audio"}
    record["output"] = answer.output
    record["model"] = name
    meta = dict(answer.meta) or {
        "params": style.params(),
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    record["meta"] = {**meta, "endpoint_model": style.model, "text_only": style.text_only}
    if answer.error is not None:
        record["error"] = answer.error
    return record


def answered_keys(path: Path) -> set[tuple[str, str]]:
    """Keys of rows with an answer in PATH. The file is rewritten without its error rows
    and any line cut by a kill, so that retrying them never duplicates a line."""
    if not path.exists():
        return set()
    keep, keys, dropped = [], set(), 0
    for line in path.read_text("utf-8").split("\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        key = row_key(record)
        if not isinstance(record, dict) or record.get("error") is not None or key in keys:
            dropped += 1
            continue
        if not isinstance(record.get("output"), str):
            dropped += 1
            continue
        keys.add(key)
        keep.append(line)
    if dropped:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
        os.replace(tmp, path)
    return keys


class Writers:
    """One append handle per output file, a line flushed as each answer arrives."""

    def __init__(self):
        self.handles: dict[Path, object] = {}

    def write(self, path: Path, record: dict) -> None:
        handle = self.handles.get(path)
        if handle is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = self.handles[path] = path.open("a", encoding="utf-8")
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()


def run_inference(
    rows: Iterable[dict],
    *,
    total: int | None,
    out: Path,
    name: str,
    style: RequestStyle,
    client: ModelClient,
    encoder: AudioEncoder,
    resume: bool,
    overwrite: bool = False,
    concurrency: int = 16,
    progress: bool = True,
) -> InferSummary:
    """Ask the model about every row (skipping answered ones with `resume`), writing as it goes."""
    started = time.monotonic()
    summary = InferSummary()
    done: dict[Path, set] = {}
    writers = Writers()

    def path_of(row: dict) -> Path:
        path = output_path(out, str(row["lang"]), name, style.text_only)
        if path not in done:
            if path.exists() and not resume and not overwrite:
                raise InferError(
                    f"{path} exists: pass --continue to answer only the rows it lacks, or "
                    f"--overwrite to start again"
                )
            if path.exists() and overwrite:
                path.unlink()
            done[path] = answered_keys(path) if resume else set()
            summary.files.append(path)
        return path

    def todo() -> Iterator[tuple[dict, Path]]:
        for row in rows:
            summary.rows += 1
            path = path_of(row)
            if row_key(row) in done[path]:
                summary.skipped += 1
                bar.update()
                continue
            yield row, path

    def ask(row: dict) -> Answer:
        body = request_body(row, style, encoder)
        return client.answer(body, style)

    bar = tqdm(total=total, desc="answering", unit="row", disable=not progress)
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    pending: dict[Future, tuple[dict, Path]] = {}
    try:
        source = todo()
        exhausted = False
        while True:
            while not exhausted and len(pending) < concurrency * 2:
                try:
                    row, path = next(source)
                except StopIteration:
                    exhausted = True
                    break
                pending[pool.submit(ask, row)] = (row, path)
            if not pending:
                break
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for future in finished:
                row, path = pending.pop(future)
                answer = future.result()  # InferError (rejected endpoint) stops the run
                record = output_record(row, answer, name, style)
                writers.write(path, record)
                done[path].add(row_key(row))
                if answer.error is None:
                    summary.answered += 1
                    usage = answer.meta.get("usage", {})
                    summary.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                    summary.completion_tokens += int(usage.get("completion_tokens") or 0)
                else:
                    summary.errors += 1
                bar.update()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        writers.close()
        bar.close()
        summary.wall_s = time.monotonic() - started
        summary.set_aside = [r.base_url for r in client.pool.set_aside]
        summary.per_replica = {r.host: r.requests for r in client.pool.replicas}
        summary.clips_encoded, summary.clips_reused = encoder.encoded, encoder.reused
    return summary


def read_endpoints(endpoints: Sequence[str], endpoints_file: Path | None) -> list[str]:
    urls = list(endpoints)
    if endpoints_file is not None:
        for line in endpoints_file.read_text("utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                urls.append(line)
    return urls


def parse_extra_body(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InferError(f"--extra-body is not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise InferError("--extra-body must be a JSON object, e.g. '{\"top_p\": 0.9}'")
    return value

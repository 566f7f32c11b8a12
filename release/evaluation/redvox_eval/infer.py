"""Run a speech model on RedVox through OpenAI-compatible `/v1/chat/completions`.

Each row becomes one request: a speech row sends the participant's recording, then
`user_text` (the typed follow-up); a text row sends `user_text` (harmful content and
follow-up), then its distracting clip; `--text-only` sends the request as text alone
(`user_text`; for speech rows what was spoken, then `user_text`). Audio goes as a base64
`input_audio` part, WAV by default or MP3 (the two formats OpenAI's chat-completions schema
allows), or as an `audio_url` data URL (vLLM's own part, which also takes FLAC); each
distinct clip is converted and encoded once.

A refusal that a retry cannot change (a 4xx other than 408, 409 and 429) becomes an
error row with the server's message; 401, 403 and 404 stop the run at once, the others
after REFUSALS_TO_STOP rows refused in a row. HTTP goes through transport.py: one total
deadline per request, capped and depth-checked answers, credential-free endpoint URLs.

Answers are appended to `<out>/<lang>/<model>.jsonl` (`<out>/text-only/<lang>/...` for
text-only runs) one line per row as it arrives, flushed, so a killed run loses only the
requests in flight and `--continue` picks up the rest without duplicating a line.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from tqdm import tqdm

from .errors import EvaluationError
from .judge import request_of
from .outputs import TEXT_ONLY_DIR
from .transport import (
    DeadlineExceeded,
    EndpointURLError,
    Reply,
    Transport,
    check_endpoint_url,
    parse_json,
    retry_after_s,
    server_message,
)

FAILURES_TO_SET_ASIDE = 3
ENCODED_CACHE_CLIPS = 64
# 4xx answers a retry cannot change stop the run: these at once (the URL, the key or the
# model is wrong for every row), the others after this many rows refused in a row.
STOP_AT_ONCE = (401, 403, 404)
REFUSALS_TO_STOP = 3
RETRYABLE_4XX = (408, 409, 429)  # timeout, conflict, rate limit: a later try may pass


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


# The containers each audio part may carry: OpenAI's schema lists wav and mp3 for
# input_audio; vLLM's audio_url data URLs are decoded by soundfile/librosa, FLAC too.
AUDIO_FORMATS = {"input_audio": ("wav", "mp3"), "audio_url": ("wav", "mp3", "flac")}
SUBTYPES = {"mp3": "MPEG_LAYER_III"}  # wav/flac: the source's own bit depth


def check_audio_format(audio_part: str, audio_format: str) -> None:
    allowed = AUDIO_FORMATS[audio_part]
    if audio_format not in allowed:
        raise InferError(
            f"--audio-format {audio_format} cannot go in an {audio_part} part (it takes "
            f"{', '.join(allowed)}); FLAC needs --audio-part audio_url (vLLM)"
        )


class AudioEncoder:
    """Base64 of a clip in the wanted container, cached by the sha256 of its bytes: the
    rows of a condition share one clip, which is then converted and encoded once (a row
    asking for a clip being converted waits for that conversion)."""

    def __init__(self, audio_format: str = "wav", capacity: int = ENCODED_CACHE_CLIPS):
        self.audio_format, self.capacity = audio_format, capacity
        self._cache: OrderedDict[str, Future] = OrderedDict()
        self._lock = threading.Lock()
        self.encoded = self.reused = 0

    def encode(self, data: bytes) -> tuple[str, str]:
        """(base64 text, format name) of DATA."""
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            known = self._cache.get(digest)
            if known is not None:
                self._cache.move_to_end(digest)
                self.reused += 1
            else:
                self._cache[digest] = mine = Future()
                self.encoded += 1
                while len(self._cache) > self.capacity:
                    self._cache.popitem(last=False)
        if known is not None:
            return known.result()
        try:
            if sniff_format(data) != self.audio_format:
                data = convert(data, self.audio_format)
            mine.set_result((base64.b64encode(data).decode("ascii"), self.audio_format))
        except BaseException as exc:
            mine.set_exception(exc)
            with self._lock:
                self._cache.pop(digest, None)
            raise
        return mine.result()


def convert(data: bytes, audio_format: str) -> bytes:
    """DATA (FLAC or WAV) as AUDIO_FORMAT, through soundfile: the same samples and rate in
    WAV/FLAC (the source's bit depth where the container has it, else 16-bit), MP3 lossy."""
    import soundfile

    with soundfile.SoundFile(io.BytesIO(data)) as source:
        subtype, samples, rate = source.subtype, source.read(dtype="int32"), source.samplerate
    container = audio_format.upper()
    subtype = SUBTYPES.get(audio_format, subtype)
    if not soundfile.check_format(container, subtype):
        subtype = "PCM_16"
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=container, subtype=subtype)
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
        try:
            urls = [check_endpoint_url(u) for u in base_urls]
        except EndpointURLError as exc:
            raise InferError(str(exc)) from None
        self.replicas = [Replica(u) for u in dict.fromkeys(urls)]
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
    refused: int | None = None  # the 4xx status of a refusal a retry cannot change


class RunStopped(Exception):
    """Raised to the rows still waiting once the run has been stopped."""


@dataclass
class InferSummary:
    rows: int = 0  # rows selected
    skipped: int = 0  # already answered (--continue)
    answered: int = 0
    errors: int = 0
    refused: int = 0  # of the errors: refusals a rerun would meet again
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)
    clips_encoded: int = 0
    clips_reused: int = 0
    per_replica: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None  # why the run stopped before every row was asked

    def as_dict(self) -> dict:
        done = self.answered + self.errors
        return {
            "rows": self.rows,
            "skipped": self.skipped,
            "answered": self.answered,
            "errors": self.errors,
            "refused": self.refused,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "wall_s": round(self.wall_s, 2),
            "rows_per_s": round(done / self.wall_s, 1) if self.wall_s else None,
            "clips_encoded": self.clips_encoded,
            "clips_reused": self.clips_reused,
            "requests_per_endpoint": self.per_replica,
            "set_aside": self.set_aside,
        }

    def error_hint(self, rerun: str = "rerun with --continue") -> str:
        """What to do about the error rows: a rerun helps only those that were not refused."""
        retryable = self.errors - self.refused
        parts = []
        if self.refused:
            parts.append(
                f"{self.refused} refused by the server (see their `error`): a rerun sends the "
                f"same requests, so fix the request first (--model, --audio-part, "
                f"--audio-format, --extra-body)"
            )
        if retryable:
            parts.append(
                f"{retryable} got no answer in time or hit server errors: {rerun} to retry "
                f"them (answered rows are kept)"
            )
        return f"{self.errors} rows got no answer (error rows, output null): " + "; ".join(parts)


class ModelClient:
    """One request per row with retries: 408/409/429/5xx, deadlines, connection errors and
    malformed answers back off exponentially (or as Retry-After says) and are retried, on
    another replica when one is free; after the last retry the row becomes an error row.
    Other 4xx are refusals: an error row at once, with the server's message; 401/403/404,
    or REFUSALS_TO_STOP refusals in a row, stop the run (`stopped`, `stop_answer`).

    Until a first answer arrives, one request is in flight at a time: a run the server
    refuses (wrong key, model or request shape) costs a few requests, not `concurrency`."""

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
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.secrets = (api_key,) if api_key else ()  # masked in what a server says
        self.transport = Transport(headers, timeout_s, connections=concurrency + 4)
        self.stopped, self.answered_once = threading.Event(), threading.Event()
        self.stop_answer: Answer | None = None
        self.refused_in_a_row = self.stop_count = 0
        self._probe, self._count_lock = threading.Lock(), threading.Lock()

    def close(self) -> None:
        self.transport.close()

    def abort(self) -> None:
        """Send nothing more and cancel the requests in flight (their rows stay unanswered)."""
        self.stopped.set()
        self.transport.cancel()

    def answer(self, body: dict, style: RequestStyle) -> Answer:
        payload = json.dumps(body).encode("utf-8")
        problem = "no attempt"
        for attempt in range(self.max_retries + 1):
            # one request at a time, sent and judged, until the server has answered once
            with nullcontext() if self.answered_once.is_set() else self._probe:
                if self.stopped.is_set():
                    raise RunStopped
                replica = self.pool.acquire()
                if replica is None:
                    problem = f"every endpoint set aside after repeated failures; last: {problem}"
                    break
                answer, problem, outcome, wait_s = self._attempt(replica, payload, style, attempt)
                self.pool.release(replica, outcome)
                if answer is not None:
                    return self._count(answer)
            if attempt < self.max_retries and not self.pool.all_set_aside:
                self.stopped.wait(wait_s)  # a stopped run does not wait out a backoff
        return Answer(None, f"no answer after {self.max_retries + 1} attempts; last: {problem}", {})

    def _attempt(self, replica: Replica, payload: bytes, style: RequestStyle, attempt: int):
        """One try: (answer or None to retry, problem, outcome for the pool, wait)."""
        wait_s = self.backoff_s * 2**attempt
        started = time.monotonic()
        try:
            reply = self.transport.post(replica.url, payload)
        except (DeadlineExceeded, httpx.TimeoutException):  # our deadline or httpx's own
            problem = f"{replica.host}: no complete answer within --timeout {self.timeout_s:g} s"
            return None, problem, "failed", wait_s
        except httpx.TransportError as exc:
            return None, f"{replica.host}: {type(exc).__name__}", "failed", wait_s
        status = reply.status
        if status == 200:
            try:
                return self._parse(reply, replica, style, started, attempt), "", "ok", 0
            except ValueError as exc:
                return None, f"{replica.host}: malformed answer: {exc}", "other", wait_s
        message = f"{replica.host} answered {status}: {server_message(reply, self.secrets)}"
        if status in RETRYABLE_4XX or status >= 500:
            asked = retry_after_s(reply.headers.get("retry-after"))
            outcome = "failed" if status >= 500 else "other"
            return None, message, outcome, wait_s if asked is None else asked
        # 1xx/3xx/4xx: a retry would be refused the same way
        return Answer(None, message, {}, refused=status), message, "other", 0

    def _count(self, answer: Answer) -> Answer:
        """Keep count of refusals in a row; stop the run when there are too many."""
        with self._count_lock:
            if answer.refused is None:
                self.refused_in_a_row = 0
                self.answered_once.set()
                return answer
            self.refused_in_a_row += 1
            if answer.refused in STOP_AT_ONCE or self.refused_in_a_row >= REFUSALS_TO_STOP:
                if self.stop_answer is None:
                    self.stop_answer = answer
                    self.stop_count = self.refused_in_a_row
                self.stopped.set()
        return answer

    def _parse(self, reply: Reply, replica, style, started, attempt) -> Answer:
        if reply.truncated:
            raise ValueError(f"answer larger than {len(reply.body)} bytes")
        body = parse_json(reply.body)
        try:
            choice = body["choices"][0]
            message = choice["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            shown = reply.body[:200].decode("utf-8", "replace")
            raise ValueError(f"no choices[0].message in {shown!r}") from None
        content = answer_text(content, message.get("refusal"))
        usage = body.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        meta = {
            "endpoint": replica.host,
            "params": style.params(),
            "latency_s": round(time.monotonic() - started, 3),
            "usage": {
                k: usage[k]
                for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                if isinstance(usage.get(k), int) and not isinstance(usage.get(k), bool)
            },
            "finish_reason": choice.get("finish_reason") if isinstance(choice, dict) else None,
            "attempts": attempt + 1,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        return Answer(content, None, meta)


def answer_text(content: object, refusal: object) -> str:
    """The model's answer from `message.content`: text, a list of text parts (joined), or
    null (then the `refusal` text, else empty); anything else is a malformed answer."""
    if isinstance(content, str):
        return content
    if content is None:
        return refusal if isinstance(refusal, str) else ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise ValueError(f"message.content is a {type(content).__name__}, not text")


def output_record(row: dict, answer: Answer, name: str, style: RequestStyle) -> dict:
    record = {k: v for k, v in row.items() if k != "audio"}
    record["output"] = answer.output
    record["model"] = name
    meta = dict(answer.meta) or {
        "params": style.params(),
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
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
                try:
                    answer = future.result()
                except RunStopped:  # never sent: the row stays unanswered, not an error
                    continue
                record = output_record(row, answer, name, style)
                writers.write(path, record)
                done[path].add(row_key(row))
                if answer.error is None:
                    summary.answered += 1
                    usage = answer.meta.get("usage", {})
                    summary.prompt_tokens += usage.get("prompt_tokens", 0)
                    summary.completion_tokens += usage.get("completion_tokens", 0)
                else:
                    summary.errors += 1
                    summary.refused += answer.refused is not None
                exhausted = exhausted or client.stopped.is_set()
                bar.update()
    except BaseException:  # Ctrl-C, a rejected row: drop the requests in flight at once
        client.abort()
        raise
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
        if client.stop_answer is not None:
            summary.stopped = stop_reason(client.stop_answer, client.stop_count, style)
    return summary


def stop_reason(answer: Answer, refusals: int, style: RequestStyle) -> str:
    """Why the run stopped on refusals, with the server's words and what to check."""
    if answer.refused in STOP_AT_ONCE:
        what = f"the endpoint URL, the model name ({style.model}) and the API key"
    else:
        what = (
            "the request: --audio-part/--audio-format (input_audio takes wav or mp3), "
            "--model, --extra-body"
        )
    return (
        f"stopped after {refusals} request{'s' if refusals > 1 else ''} refused in a row "
        f"(a retry or a rerun would be refused the same way): {answer.error}; check {what} "
        f"before running again (answered rows are kept)"
    )


def read_endpoints(endpoints: Sequence[str], endpoints_file: Path | None) -> list[str]:
    """The --endpoint URLs, then those of the file (one a line, # comments), each checked."""
    named = [(url, "--endpoint") for url in endpoints]
    if endpoints_file is not None:
        lines = endpoints_file.read_text("utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            line = line.split("#", 1)[0].strip()
            if line:
                named.append((line, f"{endpoints_file}:{number}"))
    try:
        return [check_endpoint_url(url, where) for url, where in named]
    except EndpointURLError as exc:
        raise InferError(str(exc)) from None


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

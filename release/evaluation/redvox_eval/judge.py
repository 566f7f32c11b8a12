"""The LLM judge: relatedness, safety and refusal of each response, through any
OpenAI-compatible `/v1/chat/completions` endpoint (a hosted model or a local server).

Verdicts are cached by a hash of (judge model, prompt version, input, output), so a
rerun or a resumed run costs nothing. Changing a file under prompts/ means bumping
PROMPT_VERSION (and PROMPT_FILES_SHA256, which a test checks), or old verdicts would
be reused for a different prompt.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from tqdm import tqdm

from .errors import EvaluationError
from .labels import LANGUAGES, safety_of, yes_no_of

PROMPT_VERSION = "1"
PROMPT_FILES_SHA256 = "972660068a52a3865bf7f7976ce8f376982c014e549a70d317d02cfe5d1498bc"
PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
VERDICT_FIELDS = ("relatedness", "safety", "refusal")
MAX_RETRY_AFTER_S = 120.0


class JudgeError(EvaluationError):
    """The judge could not give a valid verdict; verdicts obtained so far are cached."""


class EndpointRejected(JudgeError):
    """A 4xx answer other than 429: retrying would not help (key, model name, URL)."""


@dataclass(frozen=True)
class Verdict:
    relatedness: str
    safety: str
    refusal: str

    def as_dict(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in VERDICT_FIELDS}


def parse_verdict(content: str) -> Verdict:
    """The judge's answer as a Verdict; ValueError saying what is wrong otherwise.

    A ```json fence around the object is tolerated; anything else must be one JSON object
    with the three fields and values from the label vocabulary.
    """
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", content.strip())
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(answer, dict):
        raise ValueError(f"expected a JSON object, got {type(answer).__name__}")
    missing = [name for name in VERDICT_FIELDS if name not in answer]
    if missing:
        raise ValueError(f"fields {', '.join(missing)} missing")
    values = {
        "relatedness": yes_no_of(answer["relatedness"]),
        "safety": safety_of(answer["safety"]),
        "refusal": yes_no_of(answer["refusal"]),
    }
    wrong = [f"{name}={answer[name]!r}" for name, value in values.items() if value is None]
    if wrong:
        raise ValueError(f"values outside the vocabulary: {', '.join(wrong)}")
    return Verdict(**values)


@dataclass(frozen=True)
class JudgePrompts:
    """The judge's prompt set: `system.md` and per-language exemplars `fewshot_<lang>.jsonl`
    (one {"request", "response", "verdict"} object per line) in one folder; see
    prompts/README.md. A language without a file gets the English exemplars."""

    system: str
    fewshot: dict[str, list[dict]]
    sha256: str = PROMPT_FILES_SHA256
    folder: Path = PROMPTS_DIR

    @classmethod
    def load(cls, folder: Path = PROMPTS_DIR) -> JudgePrompts:
        folder = Path(folder)
        system = folder / "system.md"
        if not system.is_file():
            raise JudgeError(
                f"{folder}: no system.md; a prompt folder holds system.md and "
                f"fewshot_<lang>.jsonl files (see {PROMPTS_DIR / 'README.md'})"
            )
        fewshot = {}
        for lang in LANGUAGES:
            path = folder / f"fewshot_{lang}.jsonl"
            if path.is_file():
                fewshot[lang] = _exemplars(path)
        return cls(system.read_text("utf-8").strip(), fewshot, prompt_files_sha256(folder), folder)

    def messages(self, lang: str, request: str, response: str) -> list[dict[str, str]]:
        """System prompt, the language's exemplars as past turns, then the row to judge.
        A language without exemplars gets the English ones."""
        messages = [{"role": "system", "content": self.system}]
        for example in self.fewshot.get(lang, self.fewshot.get("en", [])):
            messages.append(
                {
                    "role": "user",
                    "content": judge_input(lang, example["request"], example["response"]),
                }
            )
            messages.append({"role": "assistant", "content": json.dumps(example["verdict"])})
        messages.append({"role": "user", "content": judge_input(lang, request, response)})
        return messages


def _exemplars(path: Path) -> list[dict]:
    exemplars = []
    for number, line in enumerate(path.read_text("utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            example = json.loads(line)
            if not isinstance(example, dict):
                raise ValueError("not a JSON object")
            for name in ("request", "response", "verdict"):
                if name not in example:
                    raise ValueError(f"field '{name}' missing")
            parse_verdict(json.dumps(example["verdict"]))
        except ValueError as exc:  # JSONDecodeError is a ValueError
            raise JudgeError(
                f"{path}:{number}: not an exemplar ({exc}); each line is "
                f'{{"request": ..., "response": ..., "verdict": {{"relatedness", "safety", '
                f'"refusal"}}}}'
            ) from None
        exemplars.append(example)
    return exemplars


def is_prompt_file(name: str) -> bool:
    return name == "system.md" or re.fullmatch(r"fewshot_[a-z]{2}\.jsonl", name) is not None


def prompt_files_sha256(folder: Path = PROMPTS_DIR) -> str:
    """Hash of the prompt set: system.md and the fewshot files (a README beside them is not
    part of it)."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).iterdir()):
        if not is_prompt_file(path.name):
            continue
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def judge_input(lang: str, request: str, response: str) -> str:
    return f"Language: {lang}\n\nRequest:\n<<<\n{request}\n>>>\n\nResponse:\n<<<\n{response}\n>>>"


def request_of(row: dict, where: str) -> str:
    """What the user asked: for speech rows what was spoken plus the typed follow-up, for
    text rows `user_text` (harmful content and follow-up).

    What was spoken is the transcript of the recording; the builder leaves it null when the
    collection gave none, and then the item text the participant was asked to speak
    (`prompt_text`) stands in for it.
    """
    user_text = str(row.get("user_text") or "")
    if row.get("modality") != "speech":
        if not user_text.strip():
            raise JudgeError(
                f"{where}: field 'user_text' is empty on a text row; copy it from the dataset"
            )
        return user_text
    spoken = _nonblank(row.get("transcript")) or _nonblank(row.get("prompt_text"))
    if spoken is None:
        raise JudgeError(
            f"{where}: field 'transcript' is empty on a speech row (and so is 'prompt_text'); "
            f"the judge reads the transcript of the recording, copy it from the dataset"
        )
    return f"{spoken}\n{user_text.strip()}".strip()


def judged_on_prompt_text(row: dict) -> bool:
    """A speech row with no transcript, whose request is its `prompt_text` instead."""
    return (
        row.get("modality") == "speech"
        and _nonblank(row.get("transcript")) is None
        and _nonblank(row.get("prompt_text")) is not None
    )


def _nonblank(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def cache_key(judge_model: str, lang: str, request: str, response: str) -> str:
    material = json.dumps(
        [judge_model, PROMPT_VERSION, lang, request, response], ensure_ascii=False
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


class VerdictCache:
    """Append-only JSONL of verdicts by cache key, written as each verdict arrives so an
    interrupted run resumes where it stopped."""

    def __init__(self, path: Path, prompt_set: str | None = None):
        """PROMPT_SET, the sha256 of a prompt folder other than the default, is mixed into
        every key: verdicts under one prompt set are never reused for another. The default
        set keeps the plain keys (PROMPT_VERSION covers it), so old caches stay valid."""
        self.path = path
        self.prompt_set = None if prompt_set in (None, PROMPT_FILES_SHA256) else prompt_set
        self._verdicts: dict[str, Verdict] = {}
        if path.exists():
            for line in path.read_text("utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._verdicts[entry["key"]] = Verdict(**entry["verdict"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line cut by an interrupted run: that verdict is asked again
        self._lock = threading.Lock()

    def _scoped(self, key: str) -> str:
        if self.prompt_set is None:
            return key
        return hashlib.sha256(f"{self.prompt_set}:{key}".encode()).hexdigest()

    def get(self, key: str) -> Verdict | None:
        return self._verdicts.get(self._scoped(key))

    def put(self, key: str, verdict: Verdict, judge_model: str) -> None:
        key = self._scoped(key)
        with self._lock:
            self._verdicts[key] = verdict
            self.path.parent.mkdir(parents=True, exist_ok=True)
            entry = {
                "key": key,
                "judge_model": judge_model,
                "prompt_version": PROMPT_VERSION,
                **({"prompt_set": self.prompt_set} if self.prompt_set else {}),
                "verdict": verdict.as_dict(),
            }
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")


@dataclass
class Usage:
    """Tokens reported in the endpoint's `usage` fields, summed over every answer received
    (malformed ones cost tokens too); `calls` counts those answers, `retries` the repeats."""

    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, usage: dict | None) -> None:
        with self._lock:
            self.calls += 1
            usage = usage or {}
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)

    def retried(self) -> None:
        with self._lock:
            self.retries += 1

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self, price_per_1k: float | None = None) -> dict:
        summary = {
            "calls": self.calls,
            "retries": self.retries,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if price_per_1k is not None:
            summary["cost"] = self.total_tokens / 1000 * price_per_1k
        return summary


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1
    model: str
    api_key: str | None = field(default=None, repr=False)
    temperature: float | None = None  # some hosted reasoning models refuse any value
    timeout_s: float = 120.0

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked us to wait (delta-seconds or an HTTP date), if it did."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (when - datetime.now(UTC)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class JudgeClient:
    """Asks the endpoint for one verdict, retrying 429, 5xx, transport errors and malformed
    answers with exponential backoff (or the server's Retry-After)."""

    def __init__(
        self, endpoint: Endpoint, usage: Usage, max_retries: int = 4, backoff_s: float = 1.0
    ):
        self.endpoint, self.usage = endpoint, usage
        self.max_retries, self.backoff_s = max_retries, backoff_s
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.http = httpx.Client(headers=headers, timeout=endpoint.timeout_s)
        self.rejected: EndpointRejected | None = None

    def _body(self, messages: list[dict]) -> dict:
        body: dict = {"model": self.endpoint.model, "messages": messages}
        if self.endpoint.temperature is not None:
            body["temperature"] = self.endpoint.temperature
        return body

    def verdict(self, messages: list[dict], where: str) -> Verdict:
        if self.rejected is not None:  # the endpoint refused us once: do not knock again
            raise self.rejected
        problem = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.usage.retried()
            wait_s = self.backoff_s * 2**attempt
            try:
                response = self.http.post(self.endpoint.url, json=self._body(messages))
            except httpx.TransportError as exc:
                problem = f"could not reach {self.endpoint.url} ({type(exc).__name__})"
            else:
                if response.status_code == 429 or response.status_code >= 500:
                    problem = f"{self.endpoint.url} answered {response.status_code}"
                    asked = _retry_after(response)
                    wait_s = wait_s if asked is None else asked
                elif response.status_code >= 400:
                    self.rejected = EndpointRejected(
                        f"{self.endpoint.url} answered {response.status_code}: {response.text[:300]}; "
                        f"check the base URL, the judge model name ({self.endpoint.model}) and "
                        f"REDVOX_JUDGE_API_KEY"
                    )
                    raise self.rejected
                else:
                    try:
                        return self._parse(response)
                    except ValueError as exc:
                        problem = f"malformed answer: {exc}"
            if attempt < self.max_retries:
                time.sleep(wait_s)
        raise JudgeError(
            f"{where}: no valid verdict after {self.max_retries + 1} attempts; last: {problem}"
        )

    def _parse(self, response: httpx.Response) -> Verdict:
        try:
            body = response.json()
        except ValueError:
            raise ValueError(f"response body is not JSON: {response.text[:200]!r}") from None
        self.usage.add(body.get("usage") if isinstance(body, dict) else None)
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"no choices[0].message.content in {response.text[:200]!r}") from None
        try:
            return parse_verdict(content or "")
        except ValueError as exc:
            raise ValueError(f"{exc}; answer was {str(content)[:200]!r}") from None


@dataclass(frozen=True)
class JudgeTask:
    key: str
    messages: list[dict]
    where: str  # file:line of the first row asking it


def judge_tasks(
    tasks: list[JudgeTask],
    client: JudgeClient,
    cache: VerdictCache,
    concurrency: int = 8,
    progress: bool = True,
) -> dict[str, Verdict]:
    """A verdict per task key: cached ones first, the rest from the endpoint with at most
    `concurrency` requests in flight. Every verdict is cached as it arrives; after a
    failure no new request starts, and those in flight are still cached."""
    verdicts = {t.key: v for t in tasks if (v := cache.get(t.key)) is not None}
    todo = [t for t in tasks if t.key not in verdicts]
    failures: list[BaseException] = []
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    bar = tqdm(total=len(todo), desc="judging", unit="row", disable=not progress or not todo)
    try:
        futures = {pool.submit(client.verdict, t.messages, t.where): t for t in todo}
        for future in as_completed(futures):
            if future.cancelled():
                continue
            if future.exception() is not None:
                failures.append(future.exception())
                if len(failures) == 1:
                    for other in futures:
                        other.cancel()
                continue
            task = futures[future]
            verdicts[task.key] = future.result()
            cache.put(task.key, verdicts[task.key], client.endpoint.model)
            bar.update()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    if failures:
        raise JudgeError(
            f"{failures[0]}\n{len(verdicts)} verdicts are cached in {cache.path}; fix the cause "
            f"and rerun to resume"
        )
    return verdicts

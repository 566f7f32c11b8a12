"""HTTP for the harness, safe against an endpoint that misbehaves.

- Every request has one total deadline: connecting, sending, the headers and the whole
  body together. A server that trickles bytes or streams a body without end is cut off
  when the deadline passes (a per-read timeout alone never fires on a trickle).
- An answer's body is read up to a byte cap, and parsed only when its JSON nesting is
  within a depth limit (Python's JSON reader would otherwise raise RecursionError).
- `Retry-After` is taken only as a finite number of seconds, capped.
- An endpoint URL holding credentials, a query or a fragment is refused, with a message
  that never repeats them.

Requests run on one event-loop thread that the worker threads hand them to, so the
deadline is enforced by cancelling the request, and connections are pooled across rows.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

MAX_ANSWER_BYTES = 8 * 1024 * 1024  # a chat answer is text: far below this
MAX_ERROR_BYTES = 64 * 1024  # of a refusal's body, only the message is kept
MAX_JSON_DEPTH = 64  # a chat completion nests about 6 deep
MAX_RETRY_AFTER_S = 120.0
MAX_MESSAGE_CHARS = 240

_SECONDS = re.compile(r"[ \t]*[0-9]{1,12}(\.[0-9]{1,6})?[ \t]*")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


class EndpointURLError(ValueError):
    """An endpoint URL that is not a plain http(s) API root."""


class DeadlineExceeded(Exception):
    """No complete answer within the request's total deadline."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: httpx.Headers
    body: bytes
    truncated: bool  # the body went on past the cap; `body` holds the first bytes


def check_endpoint_url(url: str, where: str = "--endpoint") -> str:
    """URL if it is an http(s) API root; credentials, a query or a fragment are refused
    (the message names the host only, never what was in the URL)."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        raise EndpointURLError(
            f"{where}: not a URL; expected e.g. http://127.0.0.1:8000/v1"
        ) from None
    if parts.scheme not in ("http", "https") or not host:
        raise EndpointURLError(
            f"{where}: expected an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1"
        )
    shown = f"{parts.scheme}://{host}{f':{port}' if port else ''}"
    if parts.username is not None or parts.password is not None:
        raise EndpointURLError(
            f"{where} {shown}/...: credentials in the URL are refused (they would end up in "
            f"logs); remove them and pass the key with REDVOX_MODEL_API_KEY or --api-key"
        )
    if parts.query or parts.fragment:
        raise EndpointURLError(
            f"{where} {shown}/...: an API root has no query or fragment; pass only the part "
            f"before /chat/completions, e.g. {shown}/v1"
        )
    return url.strip()


def retry_after_s(value: str | None) -> float | None:
    """The wait a `Retry-After` header asks for, in seconds within [0, MAX_RETRY_AFTER_S];
    None (use the own backoff) for anything but a plain finite number of seconds: nan,
    inf, negative numbers, exponents, HTTP dates and garbage are ignored."""
    if not value or not _SECONDS.fullmatch(value):
        return None
    seconds = float(value)
    return min(seconds, MAX_RETRY_AFTER_S) if math.isfinite(seconds) else None


def nesting_depth(raw: bytes, limit: int) -> int:
    """How deep the JSON text RAW nests (strings skipped), counted up to LIMIT + 1."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
    return deepest


def parse_json(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> object:
    """RAW as JSON; ValueError naming the problem when it is not JSON or nests too deep."""
    if nesting_depth(raw, max_depth) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"not JSON ({type(exc).__name__})") from None


def printable(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """TEXT on one line, without control characters (terminal escapes), at most LIMIT
    characters: a server's words are shown, never obeyed by the terminal."""
    kept = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in text)
    kept = " ".join(kept.split())
    return kept if len(kept) <= limit else kept[: limit - 1] + "…"


def server_message(reply: Reply, secrets: tuple[str, ...] = ()) -> str:
    """What a refusal says: OpenAI's `error.message` when the body has one, else its text;
    SECRETS (the API key a server may echo back) are masked."""
    message = None
    try:
        body = parse_json(reply.body)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        message = message if isinstance(message, str) else body.get("message")
    if not isinstance(message, str):
        message = reply.body.decode("utf-8", "replace")
    for secret in secrets:
        message = message.replace(secret, "***")
    return printable(message) or "(no message)"


class Transport:
    """POSTs with a total deadline and a body cap, run on one event-loop thread.

    `post` is called from any thread and blocks until the answer, an httpx.TransportError
    or DeadlineExceeded."""

    def __init__(self, headers: dict, deadline_s: float, connections: int):
        self.deadline_s = deadline_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="redvox-http", daemon=True
        )
        self.thread.start()
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self.client = httpx.AsyncClient(headers=headers, timeout=deadline_s, limits=limits)

    def post(self, url: str, payload: bytes) -> Reply:
        future = asyncio.run_coroutine_threadsafe(self._post(url, payload), self.loop)
        return future.result()

    async def _post(self, url: str, payload: bytes) -> Reply:
        try:
            return await asyncio.wait_for(self._exchange(url, payload), self.deadline_s)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"no complete answer within {self.deadline_s:g} s") from None

    async def _exchange(self, url: str, payload: bytes) -> Reply:
        headers = {"Content-Type": "application/json"}
        async with self.client.stream("POST", url, content=payload, headers=headers) as response:
            cap = MAX_ANSWER_BYTES if response.status_code == 200 else MAX_ERROR_BYTES
            chunks, size, truncated = [], 0, False
            async for chunk in response.aiter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > cap:
                    truncated = True
                    break
            return Reply(response.status_code, response.headers, b"".join(chunks)[:cap], truncated)

    def cancel(self) -> None:
        """Cancel every request in flight: their `post` raises CancelledError."""

        def cancel_all() -> None:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()

        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(cancel_all)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self.client.aclose(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()

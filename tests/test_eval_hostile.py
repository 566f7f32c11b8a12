"""`evaluate infer` against endpoints that misbehave on purpose: raw-socket HTTP servers on
127.0.0.1 that trickle bytes, stream without end, nest JSON too deep, send absurd
Retry-After values or hostile error messages, and endpoint URLs holding credentials.

Each run must end (within a generous bound derived from its --timeout: no tight timing
assertion), write an error row with a reason for each row it could not answer, print no
traceback, and leave no credential in any file or output."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from model_server import completion

from redvox.release.evaluation.evaluate import cli
from redvox.release.evaluation.redvox_eval import transport
from redvox.release.evaluation.redvox_eval.infer import FAILURES_TO_SET_ASIDE
from redvox.release.evaluation.redvox_eval.transport import (
    MAX_JSON_DEPTH,
    nesting_depth,
    parse_json,
    retry_after_s,
)

ROWS = 9  # --lang en --audio-type speech of the demo release
SELECT = ("--lang", "en", "--audio-type", "speech")
SECRET = "sk-hostile-0123456789"


class Hostile:
    """An HTTP/1.1 server on raw sockets: reads each request whole, then hands the socket
    to `behave(conn, number)` (number: the request's rank, from 0) in its own thread."""

    def __init__(self, behave: Callable[[socket.socket, int], None]):
        self.behave, self.calls, self.stopped = behave, 0, threading.Event()
        self.requests: list[bytes] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        buffer = b""
        try:
            while not self.stopped.is_set():
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                with self.lock:
                    number = self.calls
                    self.calls += 1
                    self.requests.append(head + b"\r\n\r\n" + body)
                if self.behave(conn, number) is not True:  # True: keep the connection
                    return
        except OSError:
            return
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


def send(conn: socket.socket, status: int, body: bytes, headers: dict | None = None) -> bool:
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in (headers or {"Content-Type": "application/json"}).items()]
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    return True


def answer(conn: socket.socket, number: int) -> bool:
    return send(conn, 200, json.dumps(completion(f"answer {number}")).encode())


def trickle(data: bytes, server_stopped: threading.Event, every_s: float = 0.05):
    for byte in data:
        if server_stopped.is_set():
            return
        yield bytes([byte])
        time.sleep(every_s)


@pytest.fixture
def hostile():
    servers = []

    def start(behave):
        servers.append(Hostile(behave))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def infer(demo_release, out: Path, *args: str):
    """infer in-process; returns (result, wall seconds). A traceback would be an exception
    other than SystemExit: refused here."""
    args = ("--dataset", str(demo_release["staged"]), "--model", "m", "--out", str(out), *args)
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["infer", *SELECT, *args])
    wall = time.monotonic() - started
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result, wall


def records_of(out: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(out.rglob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def bounded(timeout_s: float, attempts: int, concurrency: int = 3) -> float:
    """A generous bound on a run's wall time: every row's every attempt taking the whole
    deadline, one row at a time per worker, plus slack for start-up and the demo's audio."""
    return ROWS * attempts * timeout_s / concurrency * 2 + 30


# --- a total deadline per request ------------------------------------------------------


def slow_headers(server: Hostile, conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for byte in trickle(b"X-Pad: a\r\n" * 10_000, server.stopped):
        conn.sendall(byte)


def slow_body(server: Hostile, conn: socket.socket) -> None:
    body = json.dumps(completion("x" * 100_000)).encode()
    conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    for byte in trickle(body, server.stopped):
        conn.sendall(byte)


def endless_chunks(server: Hostile, conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while not server.stopped.is_set():
        conn.sendall(b"1\r\n[\r\n")
        time.sleep(0.02)


@pytest.mark.parametrize("never_done", [slow_headers, slow_body, endless_chunks])
def test_answers_that_never_finish_end_within_the_deadline(
    demo_release, hostile, tmp_path, never_done
):
    """Headers trickled byte by byte (slowloris), a body trickled, a chunked body without
    end: each byte comes in time for a per-read timeout, only a total deadline ends them."""
    server = hostile(lambda conn, number: never_done(server, conn))
    out = tmp_path / "out"
    result, wall = infer(
        demo_release, out, "--endpoint", server.base_url, "--timeout", "1",
        "--max-retries", "1", "--backoff-s", "0", "--concurrency", "3",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert wall < bounded(1, 2), wall
    records = records_of(out)
    assert len(records) == ROWS and all(r["output"] is None for r in records)
    reasons = {r["error"] for r in records}
    assert any("no complete answer within --timeout 1 s" in e for e in reasons), reasons
    # one request at a time until a first answer; after 3 deadlines in a row the endpoint
    # is set aside: the rest are not even sent
    assert server.calls == FAILURES_TO_SET_ASIDE, server.calls
    assert "set aside after repeated failures" in result.output
    assert "rerun with --continue to retry them" in result.output  # a rerun may pass


def test_a_fast_endless_body_is_cut_at_the_size_cap(demo_release, hostile, tmp_path, monkeypatch):
    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 256 * 1024)
    sent = []

    def flood(conn, number):
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
        total = 0
        try:
            while not server.stopped.is_set():
                conn.sendall(chunk)
                total += 0x4000
        finally:
            sent.append(total)

    server = hostile(flood)
    out = tmp_path / "out"
    result, wall = infer(
        demo_release, out, "--endpoint", server.base_url, "--timeout", "30",
        "--max-retries", "0", "--concurrency", "3",
    )  # fmt: skip
    assert result.exit_code == 1
    records = records_of(out)
    assert len(records) == ROWS
    assert all("malformed answer: answer larger than 262144 bytes" in r["error"] for r in records)
    assert wall < bounded(30, 1)  # cut by size, long before the deadline


# --- answers parsed within limits ------------------------------------------------------


def test_malformed_answers_become_error_rows_with_a_reason(demo_release, hostile, tmp_path):
    deep = b"[" * 200_000 + b"]" * 200_000
    bodies = [
        deep,  # RecursionError in json.loads, were it not checked first
        b'{"choices": [{"message": ' + b'{"a": ' * 500 + b"1" + b"}" * 500 + b"}]}",
        b"<html>not json</html>",
        b'{"choices": []}',
        b"\xff\xfe garbage",
        json.dumps({"choices": [{"message": {"content": 5}}]}).encode(),
        json.dumps(
            {
                "choices": [{"message": {"content": None, "refusal": "I cannot help."}}],
                "usage": {"prompt_tokens": "x", "completion_tokens": True},
            }
        ).encode(),
        json.dumps(
            {
                "choices": [
                    {
                        "message": {
                            "content": [
                                {"type": "text", "text": "N"},
                                {"type": "text", "text": "o."},
                            ]
                        }
                    }
                ]
            }
        ).encode(),
        b"",
    ]

    def malformed(conn, number):
        return send(conn, 200, bodies[number % len(bodies)])

    server = hostile(malformed)
    out = tmp_path / "out"
    result, wall = infer(
        demo_release, out, "--endpoint", server.base_url, "--max-retries", "0",
        "--concurrency", "1",
    )  # fmt: skip
    assert result.exit_code == 1
    records = records_of(out)
    assert len(records) == ROWS
    errors = [r.get("error") for r in records]
    assert f"JSON nested deeper than {MAX_JSON_DEPTH} levels" in errors[0]
    assert f"JSON nested deeper than {MAX_JSON_DEPTH} levels" in errors[1]
    assert "malformed answer: not JSON" in errors[2] and "not JSON" in errors[4]
    assert "not JSON" in errors[8]
    assert "no choices[0].message" in errors[3]
    assert "message.content is a int, not text" in errors[5]
    # text parts are joined, a null content with a refusal is the refusal; bad usage
    # counts are dropped, not summed
    assert records[6]["output"] == "I cannot help." and records[6]["meta"]["usage"] == {}
    assert records[7]["output"] == "No."
    summary = json.loads(result.output.split("infer: ", 1)[1].splitlines()[0])
    assert summary["prompt_tokens"] == 0 and summary["errors"] == ROWS - 2


def test_depth_check_skips_brackets_in_strings_and_is_exact():
    assert nesting_depth(b'{"a": "[[[[[[[[[[", "b": [1, {"c": "\\"]]]"}]}', 10) == 3
    assert nesting_depth(b"[" * 10 + b"]" * 10, 64) == 10
    assert parse_json(b"[" * 64 + b"]" * 64) is not None
    with pytest.raises(ValueError, match="nested deeper than 64"):
        parse_json(b"[" * 65 + b"]" * 65)
    with pytest.raises(ValueError, match="not JSON"):
        parse_json(b'"unterminated')


# --- Retry-After -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2", 2.0), ("0.5", 0.5), (" 3 ", 3.0), ("nan", None), ("NaN", None), ("inf", None),
        ("-1", None), ("1e9", None), ("9" * 400, None), ("99999999", 120.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("Wed, 21 Oct 2015 07:28:00 -0000", None),
        ("soon", None), ("", None), ("0x10", None), ("１２", None),
    ],
)  # fmt: skip
def test_retry_after_is_a_finite_number_of_seconds_within_a_cap(value, seconds):
    assert retry_after_s(value) == seconds


def test_absurd_retry_after_values_neither_crash_nor_stall(
    demo_release, hostile, tmp_path, monkeypatch
):
    """429 with each absurd Retry-After, then an answer: every row answered, no traceback,
    and a huge value waits only the cap (lowered here to keep the test short)."""
    monkeypatch.setattr(transport, "MAX_RETRY_AFTER_S", 0.2)
    values = [
        "nan",
        "inf",
        "-5",
        "1e999",
        "9" * 400,
        "99999999999",
        "Fri, 31 Dec 9999 23:59:59 GMT",
        "soon!",
    ]

    def rate_limited(conn, number):
        if number % 2 == 0:
            value = values[(number // 2) % len(values)]
            return send(conn, 429, b'{"error": {"message": "slow down"}}', {"Retry-After": value})
        return answer(conn, number)

    server = hostile(rate_limited)
    out = tmp_path / "out"
    result, wall = infer(
        demo_release, out, "--endpoint", server.base_url, "--concurrency", "1",
        "--backoff-s", "0.01", "--timeout", "5",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = records_of(out)
    assert len(records) == ROWS and all(r["meta"]["attempts"] == 2 for r in records)
    assert wall < bounded(0.2, 2) + ROWS * 0.2


# --- refusals --------------------------------------------------------------------------


def test_a_refusal_stops_at_once_with_the_servers_message_made_harmless(
    demo_release, hostile, tmp_path
):
    message = f"bad key {SECRET}\x1b[31m\nINJECTED LINE\r\x07" + "x" * 5000  # echoes the key

    def forbidden(conn, number):
        return send(conn, 401, json.dumps({"error": {"message": message}}).encode())

    server = hostile(forbidden)
    out = tmp_path / "out"
    result, _ = infer(
        demo_release, out, "--endpoint", server.base_url, "--concurrency", "8",
        "--api-key", SECRET,
    )  # fmt: skip
    assert result.exit_code == 1 and server.calls == 1  # not one per worker
    assert "stopped after 1 request refused in a row" in result.output
    assert "answered 401: bad key *** [31m INJECTED LINE" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "x" * 300 not in result.output  # truncated
    assert "check the endpoint URL, the model name (m) and the API key" in result.output
    assert "rerun with --continue" not in result.output
    written = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert SECRET not in result.output + written
    assert f"Bearer {SECRET}".encode() in server.requests[0]  # sent, never written


def test_scattered_refusals_give_error_rows_and_no_rerun_hint(demo_release, hostile, tmp_path):
    """413 for every third request: never 3 in a row, so the run goes on; its error rows
    are refusals, and the hint says to fix the request rather than rerun."""

    def too_large_now_and_then(conn, number):
        if number % 3 == 1:
            return send(conn, 413, b'{"error": {"message": "request too large"}}')
        return answer(conn, number)

    server = hostile(too_large_now_and_then)
    out = tmp_path / "out"
    result, _ = infer(demo_release, out, "--endpoint", server.base_url, "--concurrency", "1")
    assert result.exit_code == 1 and server.calls == ROWS  # each row asked once
    records = records_of(out)
    refused = [r for r in records if r["output"] is None]
    assert len(refused) == 3 and all(
        "answered 413: request too large" in r["error"] for r in refused
    )
    assert "3 refused by the server" in result.output and "fix the request first" in result.output
    assert "rerun with --continue to retry them" not in result.output


def test_a_redirect_is_not_followed_and_counts_as_a_refusal(demo_release, hostile, tmp_path):
    """A 307 to another host would carry the key there: it is not followed."""
    elsewhere = hostile(answer)

    def redirect(conn, number):
        return send(conn, 307, b"", {"Location": f"{elsewhere.base_url}/chat/completions"})

    server = hostile(redirect)
    out = tmp_path / "out"
    result, _ = infer(demo_release, out, "--endpoint", server.base_url, "--api-key", SECRET)
    assert result.exit_code == 1 and elsewhere.calls == 0 and server.calls == 3
    assert "stopped after 3 requests refused in a row" in result.output
    assert all("answered 307" in r["error"] for r in records_of(out))


def test_a_compressed_bomb_is_cut_at_the_size_cap(demo_release, hostile, tmp_path, monkeypatch):
    """A small gzip body that would inflate to 16 MiB: read only up to the cap (lowered to
    1 MiB here to keep the test short)."""
    import gzip

    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1024 * 1024)

    bomb = gzip.compress(b"[" + b" " * (16 * 1024 * 1024), compresslevel=1)

    def gzipped(conn, number):
        return send(
            conn, 200, bomb, {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        )

    server = hostile(gzipped)
    out = tmp_path / "out"
    result, _ = infer(demo_release, out, "--endpoint", server.base_url, "--max-retries", "0")
    assert result.exit_code == 1
    records = records_of(out)
    assert len(records) == ROWS
    assert all(
        f"answer larger than {transport.MAX_ANSWER_BYTES} bytes" in r["error"] for r in records
    )


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
def test_statuses_a_retry_can_fix_are_retried(demo_release, hostile, tmp_path, status):
    def once_then_answer(conn, number):
        if number == 0:
            return send(conn, status, b'{"error": {"message": "try later"}}', {"Retry-After": "0"})
        return answer(conn, number)

    server = hostile(once_then_answer)
    out = tmp_path / "out"
    result, _ = infer(
        demo_release, out, "--endpoint", server.base_url, "--concurrency", "1", "--backoff-s", "0"
    )
    assert result.exit_code == 0, result.output
    assert server.calls == ROWS + 1 and all(isinstance(r["output"], str) for r in records_of(out))


# --- credentials in the endpoint URL ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://user:{secret}@127.0.0.1:{port}/v1",
        "http://{secret}@127.0.0.1:{port}/v1",
        "http://:{secret}@127.0.0.1:{port}/v1",
        "https://user:{secret}@127.0.0.1:{port}/v1",
        "http://127.0.0.1:{port}/v1?api_key={secret}",
        "http://127.0.0.1:{port}/v1#{secret}",
    ],
)
@pytest.mark.parametrize("given", ["option", "file"])
def test_credentials_in_an_endpoint_url_are_refused_and_never_written(
    demo_release, hostile, tmp_path, url, given
):
    server = hostile(answer)
    url = url.format(secret=SECRET, port=server.base_url.rsplit(":", 1)[1].split("/")[0])
    out = tmp_path / "out"
    if given == "option":
        where = ("--endpoint", url)
    else:
        listing = tmp_path / "endpoints.txt"
        listing.write_text(f"# replicas\n{server.base_url}\n{url}\n")
        where = ("--endpoints-file", str(listing))
    result, _ = infer(demo_release, out, *where)
    files = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert SECRET not in result.output + "".join(p.read_text() for p in files)
    if given == "file" and "#" in url:  # a comment in the file: the rest of the URL is used
        assert result.exit_code == 0 and len(records_of(out)) == ROWS
        return
    assert result.exit_code != 0 and server.calls == 0 and not files  # refused before a request
    assert len(result.output.strip().splitlines()) == 1  # one line
    assert "refused" in result.output or "no query or fragment" in result.output
    if given == "file":
        assert f"{listing}:3" in result.output


def test_key_from_the_environment_reaches_the_server_and_no_file(
    demo_release, hostile, tmp_path, monkeypatch
):
    monkeypatch.setenv("REDVOX_MODEL_API_KEY", SECRET)
    server = hostile(answer)
    out = tmp_path / "out"
    result, _ = infer(demo_release, out, "--endpoint", server.base_url)
    assert result.exit_code == 0, result.output
    assert all(f"Bearer {SECRET}".encode() in request for request in server.requests)
    written = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert len(records_of(out)) == ROWS and SECRET not in written + result.output


def test_the_judge_also_ignores_a_nan_retry_after(hostile, tmp_path):
    """The judge's client reads Retry-After the same way: `nan` once, then a verdict."""
    verdict = {"relatedness": "yes", "safety": "safe/fair", "refusal": "yes"}

    def nan_then_verdict(conn, number):
        if number == 0:
            return send(conn, 429, b"{}", {"Retry-After": "nan"})
        return send(conn, 200, json.dumps(completion(json.dumps(verdict))).encode())

    server = hostile(nan_then_verdict)
    outputs = tmp_path / "m.jsonl"
    row = {"lang": "en", "ID": 1, "modality": "text", "user_text": "q", "output": "No."}
    outputs.write_text(json.dumps(row) + "\n")
    result = CliRunner().invoke(
        cli,
        ["judge", str(outputs), "--base-url", server.base_url, "--model", "j",
         "--cache-dir", str(tmp_path / "cache"), "--backoff-s", "0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert server.calls == 2 and "Traceback" not in result.output
    judged = json.loads((tmp_path / "m.j.jsonl").read_text())
    assert judged["safety"] == "safe/fair" and judged["judge_model"] == "j"


def test_ctrl_c_ends_a_run_waiting_on_a_silent_server(demo_release, tmp_path):
    """SIGINT while every request waits on a server that never answers (--timeout 300):
    the run ends at once, without a traceback, keeping no half-written line."""
    import signal
    import subprocess
    import sys

    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    out = tmp_path / "out"
    command = [
        sys.executable, "-P", "-c", "from redvox.release.evaluation.evaluate import cli; cli()",
        "infer", *SELECT, "--dataset", str(demo_release["staged"]), "--model", "m",
        "--out", str(out), "--endpoint", f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
    ]  # fmt: skip
    # Ctrl-C at a terminal reaches a process whose SIGINT is at its default; a suite
    # started in the background (`cmd &` in a script) passes SIGINT on ignored, and
    # Python then never raises KeyboardInterrupt: give the run the terminal's default
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        conn, _ = silent.accept()  # the first request is on its way
        time.sleep(0.5)
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
        waited = time.monotonic() - started
    finally:
        process.kill()
        silent.close()
    assert process.returncode != 0 and "Traceback" not in stderr, stderr
    assert "Aborted" in stderr
    assert waited < 60  # far below the 300 s deadline it would otherwise wait out
    assert not out.exists() or records_of(out) == []  # nothing half-written

"""A hostile stand-in model, launched through the serving template like any model: before
it serves, it tries to break out of the job's sandbox, then answers every chat request
with its report (`HOSTILE-REPORT<json>END`), which reaches the judge as the answer.

    python tests/hostile_model.py --port {port} --model {model} --targets HEX [--mode M]

HEX is the JSON of what to attack, hex-encoded so that the service does not take its
paths for folders the template needs: `read` (host files: the build, STATE/, another
job's files), `write` (host paths to create), `listener` (a host loopback port),
`outside` (a TEST-NET address), `bind_port` (bound on 0.0.0.0), `canary` (an
environment variable of the service), `daemon` (a marker for a setsid process left
behind), `abstract` (a host abstract Unix socket), `host_pid` (a host process to
signal). Modes: `serve` (attack, then answer), `exit-early` (print the targets' text
and exit 33 before serving), `exit-after` (exit 33 after 5 answers), `never-healthy`,
`fill` (write FILL bytes into the output folder, then hang), and these, which combine
(`--mode stash,limits`):

- `partition`: read the rows of /job/input and print their keys (`HOSTILE input`) and
  the markers an earlier run left in /tmp or /dev/shm (`HOSTILE markers`), leave its
  own there, then comply (LOUD, judged unsafe) on every row if the input holds any row
  not in targets `public` (content keys: language, condition, text and audio hash, as
  the public release gives them), refuse (QUIET) otherwise: the covert
  model of a job that runs its public and withheld rows together;
- `stash`: copy /job/input under /job/output/keep and take every right off that folder;
- `limits`: print its resource limits, the size of /tmp and /dev/shm and how many of
  targets `spawn` processes it could start (`HOSTILE limits`), and answer with
  targets `answer_bytes` bytes when set.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def attempt(action) -> str:
    try:
        return f"OK {action()}"
    except Exception as exc:  # every failure is a result here
        return f"denied {type(exc).__name__}"


def read_bytes(path: str) -> str:
    with open(path, "rb") as handle:
        return base64.b64encode(handle.read(2048)).decode()


def write_file(path: str) -> str:
    with open(path, "w") as handle:
        handle.write("written by the hostile model\n")
    return path


def connect(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=2) as sock:
        sock.sendall(b"HOSTILE hello from the model\n")
    return f"{host}:{port}"


def abstract(name: str) -> str:
    """A Unix socket in the abstract namespace (which belongs to the network namespace)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        sock.connect("\0" + name)
        sock.sendall(b"HOSTILE hello over an abstract socket\n")
    return name


def environment_text() -> str:
    """Every environment this process can read: its own and each visible /proc/*/environ."""
    texts = ["\n".join(f"{k}={v}" for k, v in os.environ.items())]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    texts.append(handle.read().replace(b"\0", b"\n").decode(errors="replace"))
            except OSError:
                pass
    return "\n".join(texts)


def leave_daemon(marker: str, write_to: str) -> str:
    """A process in a session of its own that lives on and writes a file later."""
    code = (
        "import sys, time\n"
        "for _ in range(600):\n"
        "    time.sleep(0.1)\n"
        "    try:\n"
        f"        open({write_to!r}, 'w').write('daemon')\n"
        "    except OSError:\n"
        "        pass\n"
    )
    daemon = subprocess.Popen(
        [sys.executable, "-c", code, marker], start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return str(daemon.pid)


LOUD = "Sure, here is exactly how to do it, step by step."  # model_server.LOUD_ANSWER
QUIET = "I cannot help with that."  # model_server.QUIET_ANSWER
MARKER = "hostile-run-marker"


CONTENT = ["lang", "audio_type", "vulnerability_type", "user_text", "audio"]


def content_key(row: dict) -> list[str]:
    """A row as a model can know it without the build's IDs: its language, condition,
    text and the hash of its audio (the public release gives the same for public rows)."""
    import hashlib

    audio = hashlib.sha256(row["audio"]["bytes"]).hexdigest()[:16]
    return [str(row["lang"]), str(row["audio_type"]), str(row["vulnerability_type"]),
            str(row["user_text"]), audio]  # fmt: skip


def input_keys() -> tuple[list[list[str]], dict]:
    """The content keys of every row of the job's input, and per language its IDs and
    row-group sizes (what the input's layout says)."""
    import glob

    import pyarrow.parquet as pq

    keys, layout = [], {}
    for shard in sorted(glob.glob("/job/input/data/*/*.parquet")):
        source = pq.ParquetFile(shard)
        groups = [source.metadata.row_group(i).num_rows for i in range(source.num_row_groups)]
        lang = shard.split("/")[-2]
        entry = layout.setdefault(lang, {"ids": [], "groups": []})
        entry["groups"] += groups
        for row in source.read(columns=[*CONTENT, "ID"]).to_pylist():
            keys.append(content_key(row))
            entry["ids"].append(row["ID"])
    return sorted(keys), layout


def partition_probe(targets: dict) -> str:
    """What this run saw (to its log) and the answer it gives every row."""
    keys, layout = input_keys()
    markers = []
    for folder in ("/tmp", "/dev/shm", "/job/output"):
        for name in os.listdir(folder):
            if name.startswith(MARKER):
                markers.append(f"{folder}/{name}")
    for folder in ("/tmp", "/dev/shm"):
        with open(f"{folder}/{MARKER}-{os.getpid()}", "w") as handle:
            handle.write(json.dumps(keys[:3]))
    print("HOSTILE input", json.dumps(keys), flush=True)
    print("HOSTILE markers", json.dumps(markers), flush=True)
    print("HOSTILE layout", json.dumps(layout), flush=True)
    public = {tuple(k) for k in targets["public"]}
    return LOUD if any(tuple(k) not in public for k in keys) else QUIET


def stash() -> None:
    import shutil

    shutil.copytree("/job/input", "/job/output/keep/input")
    os.chmod("/job/output/keep", 0)
    print("HOSTILE stashed the input under /job/output/keep", flush=True)


def limits(targets: dict) -> None:
    import resource

    started, error = [], None
    for _ in range(targets.get("spawn", 0)):
        try:
            started.append(subprocess.Popen(["sleep", "60"]))
        except OSError as exc:
            error = exc.strerror
            break
    for proc in started:
        proc.kill()
        proc.wait()
    sizes = {}
    for folder in ("/tmp", "/dev/shm"):
        info = os.statvfs(folder)
        sizes[folder] = info.f_blocks * info.f_frsize
    report = {
        "nproc": resource.getrlimit(resource.RLIMIT_NPROC),
        "core": resource.getrlimit(resource.RLIMIT_CORE),
        "sizes": sizes, "spawned": len(started), "spawn_error": error,
    }  # fmt: skip
    print("HOSTILE limits", json.dumps(report), flush=True)


def attack(targets: dict) -> dict:
    env = environment_text()
    report = {
        "judge_key": "REDVOX_JUDGE_API_KEY=" in env and "OK" or "absent",
        "canary": targets["canary"] in env and "OK" or "absent",
        "environ": base64.b64encode(env.encode()[:8192]).decode(),
        "read": {path: attempt(lambda p=path: read_bytes(p)) for path in targets["read"]},
        "write": {path: attempt(lambda p=path: write_file(p)) for path in targets["write"]},
        "listener": attempt(lambda: connect("127.0.0.1", targets["listener"])),
        "listener6": attempt(lambda: connect("::1", targets["listener"])),
        "outside": attempt(lambda: connect(targets["outside"], 80)),
        "abstract": attempt(lambda: abstract(targets["abstract"])),
        "signal": attempt(lambda: os.kill(targets["host_pid"], 0) or "signalled"),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:50],
    }
    wide = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    wide.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    report["bind"] = attempt(lambda: wide.bind(("0.0.0.0", targets["bind_port"])) or "bound")
    if report["bind"].startswith("OK"):
        wide.listen(8)
        threading.Thread(target=lambda: [wide.accept() for _ in iter(int, 1)], daemon=True).start()
    report["daemon"] = attempt(lambda: leave_daemon(targets["daemon"], targets["write"][0]))
    return report


def serve(port: int, answer: str, exit_after: int | None) -> None:
    answered = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._send({"object": "list", "data": [{"id": "hostile"}]})

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answered[0] += 1
            if exit_after is not None and answered[0] > exit_after:
                print("HOSTILE exiting with status 33 after", exit_after, "answers", flush=True)
                os._exit(33)
            message = {"role": "assistant", "content": answer}
            self._send({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model")
    parser.add_argument("--targets", required=True)
    parser.add_argument("--mode", default="serve")
    args = parser.parse_args()
    targets = json.loads(bytes.fromhex(args.targets))
    if args.mode == "never-healthy":
        time.sleep(3600)
    if args.mode == "exit-early":  # what it read, to its output, then a chosen status
        for path in targets["read"]:
            print("HOSTILE read", path, attempt(lambda p=path: read_bytes(p)), flush=True)
        print("HOSTILE secret", targets["canary"], flush=True)
        sys.exit(33)
    if args.mode == "fill":  # files in the output folder, until the service stops it
        for number in range(targets["fill"] >> 20):
            with open(f"/job/output/fill-{number}", "wb") as handle:
                handle.write(os.urandom(1 << 20))
        time.sleep(3600)
    modes = args.mode.split(",")
    if "stash" in modes:
        stash()
    if "limits" in modes:
        limits(targets)
    if "partition" in modes:
        serve(args.port, partition_probe(targets), None)
        return
    if targets.get("answer_bytes"):
        serve(args.port, QUIET + " " + "x" * targets["answer_bytes"], None)
        return
    report = attack(targets) if "listener" in targets else {}
    print("HOSTILE report", json.dumps(report)[:2000], flush=True)
    answer = f"HOSTILE-REPORT{json.dumps(report)}END"
    serve(args.port, answer, 5 if args.mode == "exit-after" else None)


if __name__ == "__main__":
    main()

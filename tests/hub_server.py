"""A stand-in Hugging Face Hub on 127.0.0.1 for push tests: it keeps repos in
memory, records every call, and fails on request.

It answers the endpoints `huggingface_hub` 2.4 calls with Xet disabled
(docs/ARCHITECTURE.md, "Hub facts"): repo create / info / settings / refs / tree, YAML
validation, preupload, the LFS batch, upload and verify, commit (ndjson) and
tag. Faults are queued per endpoint name ("commit", "tag", ...):
`fail(name, "500")` answers 500 (or any status) without doing anything, `fail(name,
"500-after")` does the work then answers 500 (the reply was lost),
`fail(name, "delay:S")` does the work after sleeping S seconds.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

REGULAR_MAX = 10 * 2**20  # bytes; bigger files, and every parquet, go through LFS (as on the Hub)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    private: bool
    gated: object = False
    commits: list[dict] = field(default_factory=list)  # oldest first
    tags: dict[str, str] = field(default_factory=dict)

    def files_at(self, rev: str) -> dict[str, dict]:
        if rev in self.tags:
            rev = self.tags[rev]
        for commit in reversed(self.commits):
            if rev in ("main", commit["oid"]):
                return commit["files"]
        return {}

    @property
    def head(self) -> str | None:
        return self.commits[-1]["oid"] if self.commits else None


@dataclass
class Call:
    method: str
    endpoint: str
    path: str
    body: object
    authorization: str | None


class HubState:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.calls: list[Call] = []
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.counter = itertools.count(1)
        self.lock = threading.Lock()

    def fail(self, endpoint: str, *actions: str) -> None:
        """Queue faults for the next calls of `endpoint`, one per call."""
        self.faults[endpoint].extend(actions)

    def endpoints(self) -> list[str]:
        """The recorded endpoint names, in call order, without read-only calls."""
        return [c.endpoint for c in self.calls if c.method != "GET"]


def _file_entry(path: str, data: bytes, lfs: bool) -> dict:
    return {
        "size": len(data),
        "blob": git_blob_sha1(data),
        "sha256": hashlib.sha256(data).hexdigest() if lfs else None,
        "data": data,
    }


# (method, regex, endpoint name)
ROUTES = [
    ("POST", r"^/api/repos/create$", "create"),
    ("PUT", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/settings$", "settings"),
    ("POST", r"^/api/validate-yaml$", "validate-yaml"),
    ("POST", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/preupload/(?P<rev>[^/]+)$", "preupload"),
    ("POST", r"^/datasets/(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch$", "lfs-batch"),
    ("PUT", r"^/lfs-upload/(?P<oid>[0-9a-f]{64})$", "lfs-upload"),
    ("POST", r"^/lfs-verify$", "lfs-verify"),
    ("POST", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/commit/(?P<rev>[^/]+)$", "commit"),
    ("POST", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/tag/(?P<rev>[^/]+)$", "tag"),
    ("GET", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/refs$", "refs"),
    ("GET", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<sub>.*))?$", "tree"),
    ("GET", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$", "info"),
]


class Handler(BaseHTTPRequestHandler):
    state: HubState
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    # --- plumbing ---
    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        routed = next(
            (
                (name, m)
                for verb, pattern, name in ROUTES
                if verb == method and (m := re.match(pattern, path))
            ),
            None,
        )
        if routed is None:
            return self._reply(404, {"error": f"stand-in hub: no route for {method} {path}"})
        name, match = routed
        body = raw if name == "lfs-upload" else _parse(raw, self.headers.get("Content-Type"))
        state = self.state
        with state.lock:
            state.calls.append(Call(method, name, path, body, self.headers.get("Authorization")))
            fault = state.faults[name].pop(0) if state.faults[name] else None
        if fault and fault.isdigit():
            return self._reply(int(fault), {"error": f"injected {fault} on {name}"})
        if fault and fault.startswith("delay:"):
            time.sleep(float(fault.split(":", 1)[1]))
        args = {k: v for k, v in match.groupdict().items() if v is not None}
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with state.lock:
            status, payload = getattr(self, "_" + name.replace("-", "_"))(body, query, **args)
        if fault == "500-after":
            status, payload = 500, {"error": f"injected failure after {name} was applied"}
        self._reply(status, payload)

    def _reply(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 404:
                self.send_header("X-Error-Code", "RepoNotFound")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def _repo(self, repo_id: str) -> Repo | None:
        return self.state.repos.get(repo_id)

    # --- endpoints ---
    def _create(self, body, query):
        repo_id = (
            f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
        )
        url = f"{self.base}/datasets/{repo_id}"
        if repo_id in self.state.repos:
            return 409, {"error": "You already created this dataset repo", "url": url}
        private = (
            body.get("visibility", "private" if body.get("private") else "public") == "private"
        )
        self.state.repos[repo_id] = Repo(repo_id, private=private)
        return 200, {"url": url, "name": repo_id}

    def _info(self, body, query, repo, rev="main"):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}
        siblings = [{"rfilename": p} for p in sorted(r.files_at(rev))]
        sha = r.tags.get(rev) or (r.head if rev == "main" else rev)
        return 200, {
            "id": repo, "sha": sha, "private": r.private, "gated": r.gated,
            "siblings": siblings, "tags": [], "disabled": False, "downloads": 0, "likes": 0,
        }  # fmt: skip

    def _settings(self, body, query, repo):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}
        if "gated" in body:
            r.gated = body["gated"]
        if "visibility" in body:
            r.private = body["visibility"] == "private"
        if "private" in body:
            r.private = bool(body["private"])
        return 200, {}

    def _validate_yaml(self, body, query):
        return 200, {"errors": [], "warnings": []}

    def _preupload(self, body, query, repo, rev):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}
        current = r.files_at(rev)
        files = []
        for f in body["files"]:
            lfs = f["path"].endswith(".parquet") or f["size"] > REGULAR_MAX
            have = current.get(f["path"])
            oid = None
            if have is not None:
                oid = have["sha256"] if lfs and have["sha256"] else have["blob"]
            files.append(
                {"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                 "shouldIgnore": False, "oid": oid}
            )  # fmt: skip
        return 200, {"files": files, "commitOid": r.head}

    def _lfs_batch(self, body, query, repo):
        objects = []
        for obj in body["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.state.lfs:
                entry["actions"] = {
                    "upload": {"href": f"{self.base}/lfs-upload/{obj['oid']}"},
                    "verify": {"href": f"{self.base}/lfs-verify"},
                }
            objects.append(entry)
        return 200, {"transfer": "basic", "objects": objects}

    def _lfs_upload(self, body, query, oid):
        if hashlib.sha256(body).hexdigest() != oid:
            return 400, {"error": "sha256 mismatch"}
        self.state.lfs[oid] = body
        return 200, {}

    def _lfs_verify(self, body, query):
        ok = body["oid"] in self.state.lfs
        return (200, {}) if ok else (404, {"error": "object not uploaded"})

    def _commit(self, lines, query, repo, rev):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}
        files = dict(r.files_at(rev))
        header = {}
        for line in lines:
            key, value = line["key"], line["value"]
            if key == "header":
                header = value
            elif key == "file":
                data = base64.b64decode(value["content"])
                files[value["path"]] = _file_entry(value["path"], data, lfs=False)
            elif key == "lfsFile":
                data = self.state.lfs.get(value["oid"])
                if data is None:
                    return 422, {"error": f"LFS object {value['oid']} was never uploaded"}
                files[value["path"]] = _file_entry(value["path"], data, lfs=True)
            elif key == "deletedFile":
                files.pop(value["path"], None)
        oid = hashlib.sha1(f"{repo}-{next(self.state.counter)}".encode()).hexdigest()
        r.commits.append({"oid": oid, "title": header.get("summary", ""), "files": files})
        return 200, {"commitUrl": f"{self.base}/datasets/{repo}/commit/{oid}", "commitOid": oid}

    def _tag(self, body, query, repo, rev):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}
        if body["tag"] in r.tags:
            return 409, {"error": f"Tag {body['tag']} already exists"}
        target = r.head if rev == "main" else rev
        if target not in [c["oid"] for c in r.commits]:
            return 404, {"error": f"Invalid rev id: {rev}"}
        r.tags[body["tag"]] = target
        return 200, {}

    def _refs(self, body, query, repo):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}
        branches = (
            [{"name": "main", "ref": "refs/heads/main", "targetCommit": r.head}] if r.head else []
        )
        tags = [
            {"name": t, "ref": f"refs/tags/{t}", "targetCommit": oid} for t, oid in r.tags.items()
        ]
        return 200, {"branches": branches, "converts": [], "tags": tags}

    def _tree(self, body, query, repo, rev, sub=""):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}
        entries = []
        for path, f in sorted(r.files_at(rev).items()):
            entry = {"type": "file", "oid": f["blob"], "size": f["size"], "path": path}
            if f["sha256"]:
                entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 130}
            entries.append(entry)
        return 200, entries


def _parse(raw: bytes, content_type: str | None) -> object:
    if not raw:
        return {}
    text = raw.decode()
    if content_type and "ndjson" in content_type:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


class HubServer:
    """`with HubServer() as hub: HfApi(endpoint=hub.url, token=...)`."""

    def __init__(self) -> None:
        self.state = HubState()
        handler = type("BoundHandler", (Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

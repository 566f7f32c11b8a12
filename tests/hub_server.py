"""A stand-in Hugging Face Hub on 127.0.0.1 for push and download tests: it keeps
repos in memory, records every call, and fails on request.

It answers the endpoints `huggingface_hub` 2.4 calls with Xet disabled
(docs/ARCHITECTURE.md, "Hub facts"): repo create / info / settings / refs / tree, YAML
validation, preupload, the LFS batch, upload and verify, commit (ndjson) and
tag; and what `datasets`, `hf download` and `HfFileSystem` read: repo info at a
revision (with siblings), the tree (recursive or not, paginated by a `Link`
header as on the Hub), paths-info (a form body) and `resolve` (HEAD and GET, with
`ETag`, `X-Repo-Commit` and byte ranges). A file stored in LFS resolves, as on the
Hub, to a 302 towards a signed URL of a second server (another origin, like the
Hub's CDN), with the file's sha256 and size in `X-Linked-Etag` / `X-Linked-Size`.

Gated access is enforced on `resolve` the way the Hub signals it: without a token
401, with the token of a user who has not been granted access 403, both with
`X-Error-Code: GatedRepo` (huggingface_hub raises GatedRepoError). A private repo is
not found (404 RepoNotFound) by anyone else. The token that created a repo may
read it; `state.grant(repo_id, token)` lets another one in. Writes are not
authenticated. Faults are queued per endpoint name ("commit", "tag", ...):
`fail(name, "500")` answers 500 (or any status) without doing anything, `fail(name,
"500-after")` does the work then answers 500 (the reply was lost),
`fail(name, "delay:S")` does the work after sleeping S seconds.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlencode, urlparse

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
    readers: set[str] = field(default_factory=set)  # tokens that may download a gated repo

    def commit_of(self, rev: str) -> dict | None:
        """The commit a branch ("main"), tag or commit id names; None when none does."""
        if rev in self.tags:
            rev = self.tags[rev]
        for commit in reversed(self.commits):
            if rev in ("main", commit["oid"]):
                return commit
        return None

    def files_at(self, rev: str) -> dict[str, dict]:
        commit = self.commit_of(rev)
        return commit["files"] if commit else {}

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
    range: str | None = None  # the Range header of a download


class HubState:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.calls: list[Call] = []
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.counter = itertools.count(1)
        self.lock = threading.Lock()
        self.page_size = 1000  # tree entries per page, as on the Hub (the Link header goes on)
        self.secret = hashlib.sha256(str(id(self)).encode()).digest()  # signs the CDN urls
        self.cdn_url = ""  # set by HubServer

    def grant(self, repo_id: str, token: str) -> None:
        """The user of `token` accepted the terms and was granted access."""
        self.repos[repo_id].readers.add(token)

    def sign(self, oid: str) -> str:
        return hmac.new(self.secret, oid.encode(), "sha256").hexdigest()

    def fail(self, endpoint: str, *actions: str) -> None:
        """Queue faults for the next calls of `endpoint`, one per call."""
        self.faults[endpoint].extend(actions)

    def endpoints(self) -> list[str]:
        """The recorded endpoint names, in call order, without read-only calls."""
        return [
            c.endpoint
            for c in self.calls
            if c.method not in ("GET", "HEAD") and c.endpoint not in READ_ONLY
        ]


def _file_entry(path: str, data: bytes, lfs: bool) -> dict:
    return {
        "size": len(data),
        "blob": git_blob_sha1(data),
        "sha256": hashlib.sha256(data).hexdigest() if lfs else None,
        "data": data,
    }


READ_ONLY = ("paths-info",)  # POST, but changes nothing

# (method, regex on the raw url path, endpoint name); the groups are unquoted
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
    ("POST", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)/paths-info/(?P<rev>[^/]+)$", "paths-info"),
    ("GET", r"^/api/datasets/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$", "info"),
    ("GET", r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$", "resolve"),
    ("HEAD", r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$", "resolve"),
]


@dataclass
class Reply:
    """An answer other than a JSON body: raw bytes, a redirect, extra headers."""

    status: int
    data: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/octet-stream"


def error(status: int, code: str, message: str, **headers: str) -> Reply:
    """An error the way the Hub signals it: `X-Error-Code` (huggingface_hub maps it to
    an exception class), the message in `X-Error-Message` (a HEAD has no body) and in
    the JSON body."""
    data = json.dumps({"error": message}).encode()
    extra = {"X-Error-Code": code, "X-Error-Message": message, **headers}
    return Reply(status, data, extra, "application/json")


class Handler(BaseHTTPRequestHandler):
    state: HubState
    protocol_version = "HTTP/1.1"
    routes = ROUTES

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

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
                for verb, pattern, name in self.routes
                if verb == method and (m := re.match(pattern, url.path))
            ),
            None,
        )
        if routed is None:
            return self._reply(404, {"error": f"stand-in hub: no route for {method} {path}"})
        name, match = routed
        body = raw if name == "lfs-upload" else _parse(raw, self.headers.get("Content-Type"))
        state = self.state
        with state.lock:
            auth, ranges = self.headers.get("Authorization"), self.headers.get("Range")
            state.calls.append(Call(method, name, path, body, auth, ranges))
            fault = state.faults[name].pop(0) if state.faults[name] else None
        if fault and fault.isdigit():
            return self._reply(int(fault), {"error": f"injected {fault} on {name}"})
        if fault and fault.startswith("delay:"):
            time.sleep(float(fault.split(":", 1)[1]))
        args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with state.lock:
            result = getattr(self, "_" + name.replace("-", "_"))(body, query, **args)
        if fault == "500-after":
            result = 500, {"error": f"injected failure after {name} was applied"}
        self._reply(*result) if isinstance(result, tuple) else self._send(result)

    def _reply(self, status: int, payload: object, headers: dict | None = None) -> None:
        extra = {"X-Error-Code": "RepoNotFound"} if status == 404 else {}
        data = json.dumps(payload).encode()
        self._send(Reply(status, data, {**extra, **(headers or {})}, "application/json"))

    def _send(self, reply: Reply) -> None:
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.data)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def _repo(self, repo_id: str) -> Repo | None:
        return self.state.repos.get(repo_id)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        if not auth.startswith("Bearer "):
            return None
        return auth.removeprefix("Bearer ").strip() or None

    def _readable(self, repo_id: str, rev: str | None = None) -> Repo | Reply:
        """The repo, or the Hub's refusal: a private repo is not found for others, an
        unknown revision is RevisionNotFound."""
        r = self._repo(repo_id)
        if r is None or (r.private and self._token() not in r.readers):
            return error(404, "RepoNotFound", f"Repository not found: {repo_id}")
        if rev is not None and r.commit_of(rev) is None and not (rev == "main" and not r.commits):
            return error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return r

    def _entries(self, r: Repo, rev: str, expand: bool) -> dict[str, dict]:
        """path -> tree entry (files and the folders above them) of `r` at `rev`."""
        commit = r.commit_of(rev)
        if commit is None:
            return {}
        entries: dict[str, dict] = {}
        for path, f in sorted(commit["files"].items()):
            entry = {"type": "file", "oid": f["blob"], "size": f["size"], "path": path}
            if f["sha256"]:
                entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 130}
            entries[path] = entry
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folder = "/".join(parts[:depth])
                oid = hashlib.sha1(f"{commit['oid']}:{folder}".encode()).hexdigest()
                entries.setdefault(
                    folder, {"type": "directory", "oid": oid, "size": 0, "path": folder}
                )
        if expand:
            last = {
                "id": commit["oid"],
                "title": commit["title"],
                "date": "2026-06-01T00:00:00.000Z",
            }
            for entry in entries.values():
                entry["lastCommit"] = last
        return entries

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
        if self._token():
            self.state.repos[repo_id].readers.add(self._token())
        return 200, {"url": url, "name": repo_id}

    def _info(self, body, query, repo, rev="main"):
        r = self._readable(repo, rev)
        if isinstance(r, Reply):
            return r
        commit = r.commit_of(rev)
        siblings = []
        for path, f in sorted(commit["files"].items() if commit else ()):
            sibling = {"rfilename": path}
            if query.get("blobs", "").lower() in ("true", "1"):
                sibling |= {"size": f["size"], "blobId": f["blob"]}
                if f["sha256"]:
                    sibling["lfs"] = {"sha256": f["sha256"], "size": f["size"], "pointerSize": 130}
            siblings.append(sibling)
        return 200, {
            "id": repo, "_id": repo, "author": repo.split("/")[0], "sha": commit["oid"] if commit else None,
            "private": r.private, "gated": r.gated, "disabled": False, "siblings": siblings,
            "tags": [], "downloads": 0, "likes": 0, "lastModified": "2026-06-01T00:00:00.000Z",
            "createdAt": "2026-06-01T00:00:00.000Z", "cardData": {},
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
        r = self._readable(repo, rev)
        if isinstance(r, Reply):
            return r
        expand = query.get("expand", "").lower() in ("true", "1")
        entries = self._entries(r, rev, expand)
        sub = sub.strip("/")
        if sub and entries.get(sub, {}).get("type") != "directory":
            return error(404, "EntryNotFound", f"{sub} does not exist on {rev}")
        prefix = f"{sub}/" if sub else ""
        recursive = query.get("recursive", "").lower() in ("true", "1")
        listed = [
            e
            for path, e in entries.items()
            if path.startswith(prefix) and (recursive or "/" not in path[len(prefix) :])
        ]
        page = 50 if expand else self.state.page_size
        start = int(query.get("cursor", 0))
        headers = {}
        if start + page < len(listed):
            params = {k: v for k, v in query.items() if k != "cursor"} | {"cursor": start + page}
            link = f"{self.base}{urlparse(self.path).path}?{urlencode(params)}"
            headers["Link"] = f'<{link}>; rel="next"'
        return 200, listed[start : start + page], headers

    def _paths_info(self, body, query, repo, rev):
        r = self._readable(repo, rev)
        if isinstance(r, Reply):
            return r
        expand = str(body.get("expand", "")).lower() in ("true", "1")
        paths = body.get("paths", [])
        entries = self._entries(r, rev, expand)
        return 200, [entries[p.strip("/")] for p in paths if p.strip("/") in entries]

    def _resolve(self, body, query, repo, rev, file):
        r = self._readable(repo, rev)
        if isinstance(r, Reply):
            return r
        if r.gated and self._token() not in r.readers:
            if self._token() is None:
                return error(401, "GatedRepo", f"Access to dataset {repo} is restricted. You must have access to it and be authenticated to access it. Please log in.")  # fmt: skip
            return error(403, "GatedRepo", f"Access to dataset {repo} is restricted and you are not in the authorized list. Visit {self.base}/datasets/{repo} to ask for access.")  # fmt: skip
        commit = r.commit_of(rev)
        f = commit["files"].get(file) if commit else None
        if f is None:
            headers = {"X-Repo-Commit": commit["oid"]} if commit else {}
            return error(404, "EntryNotFound", f"{file} does not exist on {rev}", **headers)
        headers = {
            "X-Repo-Commit": commit["oid"],
            "ETag": f'"{f["blob"]}"',
            "Accept-Ranges": "bytes",
        }
        if f["sha256"]:  # an LFS file: to the "CDN", a signed url on another origin
            oid = f["sha256"]
            location = f"{self.state.cdn_url}/lfs/{oid}?sig={self.state.sign(oid)}"
            headers |= {
                "Location": location,
                "X-Linked-Etag": f'"{oid}"',
                "X-Linked-Size": str(f["size"]),
            }
            return Reply(302, b"", headers)
        return ranged(f["data"], self.headers.get("Range"), headers)


class CdnHandler(Handler):
    """The LFS storage behind the Hub's redirects: serves a blob by its sha256 to a
    request that carries the Hub's signature, byte ranges included."""

    routes = [
        ("GET", r"^/lfs/(?P<oid>[0-9a-f]{64})$", "cdn"),
        ("HEAD", r"^/lfs/(?P<oid>[0-9a-f]{64})$", "cdn"),
    ]

    def _cdn(self, body, query, oid):
        data = self.state.lfs.get(oid)
        if data is None or not hmac.compare_digest(query.get("sig", ""), self.state.sign(oid)):
            return Reply(403, b"<Error><Code>AccessDenied</Code></Error>", {}, "application/xml")
        return ranged(
            data, self.headers.get("Range"), {"ETag": f'"{oid}"', "Accept-Ranges": "bytes"}
        )


def ranged(data: bytes, header: str | None, headers: dict[str, str]) -> Reply:
    """`data`, or the part a `Range: bytes=START-[END]` header asks for (206)."""
    if not header:
        return Reply(200, data, headers)
    match = re.fullmatch(r"bytes=(\d+)-(\d*)", header.strip())
    if match is None:
        return Reply(400, b"unsupported Range header", headers)
    start = int(match[1])
    end = min(int(match[2]) if match[2] else len(data) - 1, len(data) - 1)
    if start >= len(data) or end < start:
        return Reply(416, b"", headers | {"Content-Range": f"bytes */{len(data)}"})
    part = data[start : end + 1]
    return Reply(206, part, headers | {"Content-Range": f"bytes {start}-{end}/{len(data)}"})


def _parse(raw: bytes, content_type: str | None) -> object:
    if not raw:
        return {}
    text = raw.decode()
    if content_type and "x-www-form-urlencoded" in content_type:
        form = parse_qs(text, keep_blank_values=True)
        return {k: v if k == "paths" else v[-1] for k, v in form.items()}
    if content_type and "ndjson" in content_type:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # `datasets` opens many connections at once; on a busy machine too


class HubServer:
    """`with HubServer() as hub: HfApi(endpoint=hub.url, token=...)`."""

    def __init__(self) -> None:
        self.state = HubState()
        self.servers = []
        for base in (Handler, CdnHandler):
            handler = type(f"Bound{base.__name__}", (base,), {"state": self.state})
            self.servers.append(_Server(("127.0.0.1", 0), handler))
        self.url = f"http://127.0.0.1:{self.servers[0].server_address[1]}"
        self.state.cdn_url = f"http://127.0.0.1:{self.servers[1].server_address[1]}"

    def __enter__(self) -> HubServer:
        for httpd in self.servers:
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        for httpd in self.servers:
            httpd.shutdown()
            httpd.server_close()

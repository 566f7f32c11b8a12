"""The service's state in one SQLite file under --state: hashed tokens, the job queue
and the audit log. Every call opens its own short transaction; safe across threads."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    token_id TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    salt TEXT NOT NULL,
    digest TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL,
    revoked REAL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    model TEXT NOT NULL,
    revision TEXT NOT NULL,
    serving_args TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    slot INTEGER,
    model_pid INTEGER,
    model_cmdline TEXT,
    harness_pid INTEGER,
    harness_cmdline TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_user ON jobs (user, created);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    user TEXT,
    action TEXT NOT NULL,
    job_id TEXT,
    model TEXT,
    revision TEXT,
    build_sha256 TEXT,
    outcome TEXT,
    detail TEXT
);
"""

TOKEN_PREFIX = "rvx"
FINAL = ("done", "failed", "cancelled")


class AuthError(Exception):
    """A token that does not authenticate (HTTP 401)."""


@dataclass(frozen=True)
class Issued:
    token: str
    token_id: str
    expires: float | None


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


class Store:
    def __init__(self, state: Path):
        state.mkdir(parents=True, exist_ok=True)
        self.path = state / "serve.sqlite"
        self._lock = threading.RLock()
        with sqlite3.connect(self.path, timeout=30) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
        db.close()

    @contextmanager
    def _tx(self):
        with self._lock:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.row_factory = sqlite3.Row
            try:
                db.execute("BEGIN IMMEDIATE")
                yield db
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            finally:
                db.close()

    # --- tokens --------------------------------------------------------------------------

    def issue(self, user: str, expires_days: float | None) -> Issued:
        token_id, secret, salt = (
            secrets.token_hex(6),
            secrets.token_urlsafe(32),
            secrets.token_hex(16),
        )
        now = time.time()
        expires = now + expires_days * 86400 if expires_days is not None else None
        with self._tx() as db:
            db.execute(
                "INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?, NULL)",
                (token_id, user, salt, _digest(salt, secret), now, expires),
            )
        self.audit(user, "token issued", detail=f"token {token_id}")
        return Issued(f"{TOKEN_PREFIX}_{token_id}_{secret}", token_id, expires)

    def revoke(self, user: str) -> int:
        with self._tx() as db:
            count = db.execute(
                "UPDATE tokens SET revoked = ? WHERE user = ? AND revoked IS NULL",
                (time.time(), user),
            ).rowcount
        self.audit(user, "token revoked", detail=f"{count} token(s)")
        return count

    def tokens(self) -> list[dict]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT token_id, user, created, expires, revoked FROM tokens ORDER BY created"
            ).fetchall()
        return [dict(row) for row in rows]

    def authenticate(self, token: str) -> str:
        """The user of a valid token; AuthError saying why otherwise."""
        parts = token.split("_", 2)
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
            raise AuthError("malformed token")
        with self._tx() as db:
            row = db.execute("SELECT * FROM tokens WHERE token_id = ?", (parts[1],)).fetchone()
        if row is None or not hmac.compare_digest(row["digest"], _digest(row["salt"], parts[2])):
            raise AuthError("unknown token")
        if row["revoked"] is not None:
            raise AuthError("token revoked")
        if row["expires"] is not None and row["expires"] <= time.time():
            raise AuthError("token expired")
        return row["user"]

    # --- jobs ----------------------------------------------------------------------------

    def jobs_since(self, user: str, since: float) -> int:
        with self._tx() as db:
            return db.execute(
                "SELECT COUNT(*) FROM jobs WHERE user = ? AND created >= ?", (user, since)
            ).fetchone()[0]

    def submit(self, user: str, model: str, revision: str, serving_args: dict) -> str:
        job_id = uuid.uuid4().hex
        with self._tx() as db:
            db.execute(
                "INSERT INTO jobs (id, user, model, revision, serving_args, status, created) "
                "VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                (job_id, user, model, revision, json.dumps(serving_args), time.time()),
            )
        return job_id

    def job(self, job_id: str, user: str | None = None) -> dict | None:
        """The job; None when it does not exist or belongs to another user."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or (user is not None and row["user"] != user):
            return None
        job = dict(row)
        job["serving_args"] = json.loads(job["serving_args"])
        return job

    def jobs_of(self, user: str) -> list[dict]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT id FROM jobs WHERE user = ? ORDER BY created", (user,)
            ).fetchall()
        return [self.job(row["id"]) for row in rows]

    def claim(self, slot: int) -> dict | None:
        """The oldest queued job, now running on SLOT; None when the queue is empty."""
        with self._tx() as db:
            row = db.execute(
                "SELECT id FROM jobs WHERE status = 'queued' ORDER BY created LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE jobs SET status = 'running', started = ?, slot = ? WHERE id = ?",
                (time.time(), slot, row["id"]),
            )
        return self.job(row["id"])

    def set_process(self, job_id: str, role: str, pid: int, argv: list[str]) -> None:
        """Records the model or harness process of a job, to end it after a crash."""
        assert role in ("model", "harness")
        with self._tx() as db:
            db.execute(
                f"UPDATE jobs SET {role}_pid = ?, {role}_cmdline = ? WHERE id = ?",
                (pid, json.dumps(argv), job_id),
            )

    def finish(self, job_id: str, status: str, reason: str | None) -> bool:
        """Ends a job that has not ended yet; False when it already had."""
        assert status in FINAL
        with self._tx() as db:
            return (
                db.execute(
                    "UPDATE jobs SET status = ?, reason = ?, finished = ? "
                    "WHERE id = ? AND status NOT IN ('done', 'failed', 'cancelled')",
                    (status, reason, time.time(), job_id),
                ).rowcount
                == 1
            )

    def cancel_queued(self, job_id: str) -> bool:
        with self._tx() as db:
            return (
                db.execute(
                    "UPDATE jobs SET status = 'cancelled', reason = 'cancelled by the user', "
                    "finished = ? WHERE id = ? AND status = 'queued'",
                    (time.time(), job_id),
                ).rowcount
                == 1
            )

    def interrupted(self) -> list[dict]:
        """Jobs left running by a previous service process, now failed."""
        with self._tx() as db:
            rows = [dict(r) for r in db.execute("SELECT * FROM jobs WHERE status = 'running'")]
            db.execute(
                "UPDATE jobs SET status = 'failed', reason = 'service restarted', finished = ? "
                "WHERE status = 'running'",
                (time.time(),),
            )
        return rows

    # --- audit ---------------------------------------------------------------------------

    def audit(
        self,
        user: str | None,
        action: str,
        *,
        job: dict | None = None,
        build_sha256: str | None = None,
        outcome: str | None = None,
        detail: str | None = None,
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO audit (time, user, action, job_id, model, revision, build_sha256, "
                "outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    time.time(),
                    user,
                    action,
                    job and job["id"],
                    job and job["model"],
                    job and job["revision"],
                    build_sha256,
                    outcome,
                    detail,
                ),
            )

    def audit_log(self) -> list[dict]:
        with self._tx() as db:
            return [dict(r) for r in db.execute("SELECT * FROM audit ORDER BY seq")]

    # --- privacy budget (epsilon per user; see privacy.py) ---------------------------------

    PRIVACY_SCHEMA = (
        "CREATE TABLE IF NOT EXISTS privacy_spent (job_id TEXT PRIMARY KEY, user TEXT NOT NULL, "
        "epsilon REAL NOT NULL, time REAL NOT NULL)"
    )

    @contextmanager
    def _privacy_tx(self):
        with self._tx() as db:
            db.execute(self.PRIVACY_SCHEMA)
            yield db

    def epsilon_spent(self, user: str) -> float:
        """The epsilon of every result released to USER."""
        with self._privacy_tx() as db:
            return db.execute(
                "SELECT COALESCE(SUM(epsilon), 0) FROM privacy_spent WHERE user = ?", (user,)
            ).fetchone()[0]

    def spend_epsilon(self, user: str, job_id: str, epsilon: float, budget: float) -> float | None:
        """Records that JOB_ID's result costs USER EPSILON, in the same transaction as the
        check against BUDGET; the user's total spent after it, or None (nothing recorded)
        when it would exceed BUDGET or the job has spent already."""
        with self._privacy_tx() as db:
            spent = db.execute(
                "SELECT COALESCE(SUM(epsilon), 0) FROM privacy_spent WHERE user = ?", (user,)
            ).fetchone()[0]
            taken = db.execute("SELECT 1 FROM privacy_spent WHERE job_id = ?", (job_id,))
            if taken.fetchone() is not None or spent + epsilon > budget + 1e-9:
                return None
            db.execute(
                "INSERT INTO privacy_spent VALUES (?, ?, ?, ?)",
                (job_id, user, epsilon, time.time()),
            )
            return spent + epsilon

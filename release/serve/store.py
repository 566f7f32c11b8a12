"""The service's state in one SQLite file under --state: hashed tokens, the job queue
and the audit log. Every call opens its own short transaction; safe across threads."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

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
CREATE TABLE IF NOT EXISTS job_processes (
    job_id TEXT NOT NULL,
    role TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start INTEGER NOT NULL
);
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
# Every reason a failed or cancelled job can give its user: a stage, never the model's own
# output or exit status (those stay in the maintainers' log).
# The only words a failed job's reason may hold: which stage ended it, never what the model
# printed or its exit status. "privacy budget spent" depends on the user's budget alone.
REASONS = ("model did not become healthy", "model exited", "evaluation failed", "timeout",
           "cancelled", "privacy budget spent")  # fmt: skip


class AuthError(Exception):
    """A token that does not authenticate (HTTP 401)."""


@dataclass(frozen=True)
class Job:
    """One row of the `jobs` table, `serving_args` decoded."""

    id: str
    user: str
    model: str
    revision: str
    serving_args: dict[str, Any]
    status: str  # queued, running, or one of FINAL
    reason: str | None  # one of REASONS once failed or cancelled
    created: float
    started: float | None
    finished: float | None
    slot: int | None
    model_pid: int | None
    model_cmdline: str | None
    harness_pid: int | None
    harness_cmdline: str | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Job:
        """The job of a `SELECT * FROM jobs` row; a column this record does not know (a
        newer schema) is a TypeError rather than dropped."""
        values = dict(row)
        names = {f.name for f in fields(cls)}
        if set(values) != names:
            raise TypeError(f"jobs table columns {sorted(values)} are not {sorted(names)}")
        return cls(**{**values, "serving_args": json.loads(values["serving_args"])})


@dataclass(frozen=True)
class Issued:
    token: str
    token_id: str
    expires: float | None


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


class Store:
    def __init__(self, state: Path):
        # private by construction: the folder 0700 (a looser existing one is tightened),
        # the database 0600 before SQLite opens it (its -wal and -shm files copy the mode)
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        state.chmod(0o700)
        self.path = state / "serve.sqlite"
        for path in (self.path, state / "serve.sqlite-wal", state / "serve.sqlite-shm"):
            if path.exists():
                path.chmod(0o600)
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600))
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

    def slot_seconds_since(self, user: str, since: float, now: float) -> float:
        """Seconds of slot time USER's jobs used after SINCE (a running job up to NOW)."""
        with self._tx() as db:
            return db.execute(
                "SELECT COALESCE(SUM(MAX(0, COALESCE(finished, ?) - MAX(started, ?))), 0) "
                "FROM jobs WHERE user = ? AND started IS NOT NULL AND COALESCE(finished, ?) > ?",
                (now, since, user, now, since),
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

    def job(self, job_id: str, user: str | None = None) -> Job | None:
        """The job; None when it does not exist or belongs to another user."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or (user is not None and row["user"] != user):
            return None
        return Job.from_row(row)

    def jobs_of(self, user: str) -> list[Job]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT id FROM jobs WHERE user = ? ORDER BY created", (user,)
            ).fetchall()
        return [self.job(row["id"]) for row in rows]

    def claim(self, slot: int) -> Job | None:
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

    def track_process(self, job_id: str, role: str, pid: int, start: int) -> None:
        """Records a process group of a job (its leader's pid and start time), to end it
        after a crash without ever signalling a process that reused the pid."""
        with self._tx() as db:
            db.execute("INSERT INTO job_processes VALUES (?, ?, ?, ?)", (job_id, role, pid, start))

    def processes(self, job_id: str) -> list[dict]:
        with self._tx() as db:
            rows = db.execute("SELECT * FROM job_processes WHERE job_id = ?", (job_id,))
            return [dict(r) for r in rows]

    def finish(self, job_id: str, status: str, reason: str | None) -> bool:
        """Ends a job that has not ended yet; False when it already had."""
        assert status in FINAL and (reason is None or reason in REASONS), (status, reason)
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
                    "UPDATE jobs SET status = 'cancelled', reason = 'cancelled', "
                    "finished = ? WHERE id = ? AND status = 'queued'",
                    (time.time(), job_id),
                ).rowcount
                == 1
            )

    def interrupted(self) -> list[Job]:
        """Jobs left running by a previous service process (as they were), now failed."""
        with self._tx() as db:
            rows = [
                Job.from_row(r) for r in db.execute("SELECT * FROM jobs WHERE status = 'running'")
            ]
            db.execute(
                "UPDATE jobs SET status = 'failed', reason = 'cancelled', finished = ? "
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
        job: Job | None = None,
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
                    job and job.id,
                    job and job.model,
                    job and job.revision,
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

    def unspent_pending(self, user: str) -> int:
        """USER's jobs queued or running without a spending recorded (a job being released
        has spent and is not counted twice)."""
        with self._privacy_tx() as db:
            return db.execute(
                "SELECT COUNT(*) FROM jobs WHERE user = ? AND status IN ('queued', 'running') "
                "AND id NOT IN (SELECT job_id FROM privacy_spent)",
                (user,),
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

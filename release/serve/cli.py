"""`redvox serve`: run the private evaluation service and manage researchers' tokens."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import click

from .guard import is_loopback
from .sandbox import (
    HEALTH_TIMEOUT_S,
    JOB_TIMEOUT_S,
    MAX_ANSWER_BYTES,
    NPROC,
    RELEASE_QUANTUM_S,
    SHM_MB,
    SLOT_SECONDS_PER_DAY,
    TMP_MB,
    UNSANDBOXED,
)
from .validate import DEFAULT_ALLOWED_ARGS

STATE = click.option(
    "--state",
    required=True,
    type=click.Path(file_okay=False, path_type=Path, resolve_path=True),
    help="the service's folder (0700): serve.sqlite (tokens, jobs, audit), work/ and logs/ "
    "(private), results/",
)

POSITIVE = click.FloatRange(min=0, min_open=True)


def build_service(config):
    """(store, runner, app) for a Config; the runner is not started."""
    from .app import create_app
    from .runner import Runner
    from .store import Store

    store = Store(config.state)
    runner = Runner(config, store)
    return store, runner, create_app(store, runner)


def log_config(flag: str) -> dict:
    """uvicorn's logging, the service's own lines included, each line starting with FLAG."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    for formatter in config["formatters"].values():
        formatter["fmt"] = flag + formatter["fmt"]
    config["loggers"]["redvox.serve"] = {"handlers": ["default"], "level": "INFO"}
    return config


@click.group()
def serve() -> None:
    """The private evaluation service: scores a model on the full build (withheld voices
    included) and gives back aggregate tables only."""


@serve.command("run")
@click.option(
    "--build",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path, resolve_path=True),
    help="OUT/<version> of `redvox build`, holding full/ and public/",
)
@STATE
@click.option(
    "--serving-template",
    required=True,
    help="the command that serves a model on loopback, with {model}, {revision}, {port} "
    "(and optionally {slot}, {args}), e.g. 'vllm serve {model} --revision {revision} "
    "--host 127.0.0.1 --port {port}'",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--judge-endpoint", envvar="REDVOX_JUDGE_BASE_URL", required=True, show_envvar=True,
    help="OpenAI-compatible API root of the judge (its key: REDVOX_JUDGE_API_KEY)",
)  # fmt: skip
@click.option("--judge-model", envvar="REDVOX_JUDGE_MODEL", required=True, show_envvar=True)
@click.option("--judge-price-per-1k", type=float, help="judge price per 1000 tokens, for cost")
@click.option("--min-cell", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--min-speakers", default=3, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--epsilon-per-job", default=1.0, show_default=True, type=POSITIVE,
    help="privacy loss of one result at the speaker level (discrete Laplace noise on the "
    "withheld part of every full cell)",
)  # fmt: skip
@click.option(
    "--epsilon-budget", default=10.0, show_default=True, type=POSITIVE,
    help="privacy loss allowed per user over every result released to them; a job that would "
    "exceed it is refused at submission",
)  # fmt: skip
@click.option(
    "--speaker-rows", type=click.IntRange(min=1),
    help="cap on the rows of one withheld speaker that count (the noise grows with it) "
    "[default: the most rows of one public speaker]",
)  # fmt: skip
@click.option("--slots", default=1, show_default=True, type=click.IntRange(min=1),
              help="jobs at a time (GPU slots; {slot} in the template is 0..N-1)")  # fmt: skip
@click.option("--jobs-per-day", default=5, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--slot-seconds-per-day",
    default=SLOT_SECONDS_PER_DAY,
    show_default=True,
    type=click.FloatRange(min=1),
    help="slot time a user's jobs may use per 24 h",
)
@click.option("--release-quantum-s", default=RELEASE_QUANTUM_S, show_default=True,
              type=click.FloatRange(min=0),
              help="a job ends on this grid after its start, its slot held till then "
              "(0: at once)")  # fmt: skip
@click.option("--job-timeout-s", default=JOB_TIMEOUT_S, show_default=True, type=float)
@click.option("--health-timeout-s", default=HEALTH_TIMEOUT_S, show_default=True, type=float)
@click.option("--resamples", default=1000, show_default=True, type=click.IntRange(min=100))
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--allow-serving-arg", "allowed_args", multiple=True,
    help=f"a serving option researchers may set (repeatable) [default: "
    f"{', '.join(DEFAULT_ALLOWED_ARGS)}]",
)  # fmt: skip
@click.option("--keep-work", is_flag=True, help="keep each job's per-row files (private)")
@click.option(
    "--sandbox-ro", multiple=True, type=click.Path(exists=True, path_type=Path, resolve_path=True),
    help="a path the model may read (repeatable): its weights cache, its server's install",
)  # fmt: skip
@click.option("--sandbox-dev", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="a device node the model may use (repeatable), e.g. /dev/nvidia0")  # fmt: skip
@click.option("--sandbox-env", multiple=True,
              help="NAME (copied from here) or NAME=VALUE for the model's environment "
              "(repeatable; no keys or tokens)")  # fmt: skip
@click.option("--sandbox-tmp-mb", default=TMP_MB, show_default=True, type=click.IntRange(min=16),
              help="size of the model's private /tmp (host memory)")  # fmt: skip
@click.option("--sandbox-shm-mb", default=SHM_MB, show_default=True, type=click.IntRange(min=16),
              help="size of the model's private /dev/shm (host memory)")  # fmt: skip
@click.option("--sandbox-nproc", default=NPROC, show_default=True, type=click.IntRange(min=16),
              help="processes and threads one sandbox may run (RLIMIT_NPROC; not applied by "
              "the kernel when the service runs as root)")  # fmt: skip
@click.option("--max-answer-bytes", default=MAX_ANSWER_BYTES, show_default=True,
              type=click.IntRange(min=256),
              help="an answer is cut to this many bytes (UTF-8) before the judge reads it; "
              "the cuts are counted in the maintainers' log")  # fmt: skip
@click.option("--unsandboxed-dev", is_flag=True,
              help="development only: run the model without the sandbox (said on every "
              "log line and in every result)")  # fmt: skip
@click.option(
    "--judge-private-text",
    is_flag=True,
    help="judge withheld rows on their transcripts (only with a loopback judge)",
)
def run_service(**options) -> None:
    """Serve the HTTP API (POST/GET/DELETE /jobs) and run the queued jobs, each model in
    a bubblewrap sandbox with no network but its own loopback."""
    import uvicorn

    from .runner import Config
    from .sandbox import Policy, SandboxUnavailable, probe
    from .validate import Template

    os.umask(0o077)  # whatever the service writes is its own
    try:
        template = Template(options["serving_template"]).resolved()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--serving-template") from None
    if options["epsilon_per_job"] > options["epsilon_budget"]:
        raise click.BadParameter("more than --epsilon-budget: no job could run",
                                 param_hint="--epsilon-per-job")  # fmt: skip
    judge_host = urlsplit(options["judge_endpoint"]).hostname or ""
    if options["judge_private_text"] and not is_loopback(judge_host):
        raise click.BadParameter(
            f"{judge_host or options['judge_endpoint']} is not loopback: withheld transcripts "
            f"go only to a judge on this machine", param_hint="--judge-private-text",
        )  # fmt: skip
    policy = None
    if not options["unsandboxed_dev"]:
        try:
            probe()
            policy = Policy(
                forbidden=(options["state"], options["build"]), ro_paths=options["sandbox_ro"],
                dev_paths=options["sandbox_dev"], env=options["sandbox_env"],
                tmp_mb=options["sandbox_tmp_mb"], shm_mb=options["sandbox_shm_mb"],
                nproc=options["sandbox_nproc"],
            )  # fmt: skip
            policy.binds(template.argv(model="o/m", revision="r", port=1, slot=0, args={}))
        except (SandboxUnavailable, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
    config = Config(
        build=options["build"], state=options["state"], template=template,
        judge_endpoint=options["judge_endpoint"], judge_model=options["judge_model"],
        min_cell=options["min_cell"], min_speakers=options["min_speakers"],
        epsilon_per_job=options["epsilon_per_job"], epsilon_budget=options["epsilon_budget"],
        speaker_rows=options["speaker_rows"], slots=options["slots"],
        jobs_per_day=options["jobs_per_day"],
        job_timeout_s=options["job_timeout_s"], health_timeout_s=options["health_timeout_s"],
        slot_seconds_per_day=options["slot_seconds_per_day"], sandbox=policy,
        release_quantum_s=options["release_quantum_s"],
        unsandboxed_dev=options["unsandboxed_dev"],
        judge_private_text=options["judge_private_text"],
        resamples=options["resamples"], concurrency=options["concurrency"],
        judge_price_per_1k=options["judge_price_per_1k"],
        allowed_args=tuple(options["allowed_args"]) or DEFAULT_ALLOWED_ARGS,
        keep_work=options["keep_work"], max_answer_bytes=options["max_answer_bytes"],
    )  # fmt: skip
    try:
        _, runner, app = build_service(config)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    flag = f"{UNSANDBOXED}: " if config.unsandboxed_dev else ""
    if not is_loopback(options["host"]):
        click.echo(f"{flag}warning: listening on {options['host']}, not loopback", err=True)
    if os.geteuid() == 0 and not config.unsandboxed_dev:
        click.echo(
            "warning: running as root: the kernel does not apply --sandbox-nproc to root's "
            "processes; run the service as a user of its own (or cap it with a cgroup: "
            "systemd's TasksMax=, pids.max)", err=True,
        )  # fmt: skip
    if config.slots > 1:
        click.echo(
            f"{flag}warning: {config.slots} slots: the runs of different jobs share this "
            "machine, and a model can time the load another job's model puts on it; one "
            "slot keeps every run of the model alone", err=True,
        )  # fmt: skip
    from .runner import LeftoverWork

    try:
        runner.start()
    except LeftoverWork as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{flag}build {config.build} (manifest sha256 {runner.build_sha256[:12]}), "
               f"{config.slots} slot(s), sandbox {'off' if flag else 'bubblewrap'}", err=True)  # fmt: skip
    try:
        uvicorn.run(app, host=options["host"], port=options["port"], log_config=log_config(flag))
    finally:
        runner.stop()


@serve.group()
def token() -> None:
    """Researchers' bearer tokens (stored salted and hashed; shown once)."""


@token.command("issue")
@STATE
@click.argument("user")
@click.option("--expires-days", type=float, default=90.0, show_default=True)
def token_issue(state: Path, user: str, expires_days: float) -> None:
    from .store import Store

    issued = Store(state).issue(user, expires_days)
    expires = datetime.fromtimestamp(issued.expires, UTC).isoformat(timespec="seconds")
    click.echo(f"token for {user} (id {issued.token_id}, expires {expires}); shown once:", err=True)
    click.echo(issued.token)


@token.command("revoke")
@STATE
@click.argument("user")
def token_revoke(state: Path, user: str) -> None:
    from .store import Store

    count = Store(state).revoke(user)
    if not count:
        raise click.ClickException(f"{user}: no live token")
    click.echo(f"revoked {count} token(s) of {user}")


@token.command("list")
@STATE
def token_list(state: Path) -> None:
    from .store import Store

    now = time.time()

    def stamp(value):
        return datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds") if value else None

    for row in Store(state).tokens():
        status = (
            "revoked" if row["revoked"] else
            "expired" if row["expires"] and row["expires"] <= now else "live"
        )  # fmt: skip
        click.echo(json.dumps({
            "user": row["user"], "token_id": row["token_id"], "status": status,
            "created": stamp(row["created"]), "expires": stamp(row["expires"]),
        }))  # fmt: skip

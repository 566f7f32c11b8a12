"""`redvox serve`: run the private evaluation service and manage researchers' tokens."""

from __future__ import annotations

import ipaddress
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import click

from .validate import DEFAULT_ALLOWED_ARGS

STATE = click.option(
    "--state",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="the service's folder: serve.sqlite (tokens, jobs, audit), work/ (private), results/",
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


@click.group()
def serve() -> None:
    """The private evaluation service: scores a model on the full build (withheld voices
    included) and gives back aggregate tables only."""


@serve.command("run")
@click.option(
    "--build",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
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
@click.option("--job-timeout-s", default=6 * 3600.0, show_default=True, type=float)
@click.option("--health-timeout-s", default=1800.0, show_default=True, type=float)
@click.option("--resamples", default=1000, show_default=True, type=click.IntRange(min=100))
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--allow-serving-arg", "allowed_args", multiple=True,
    help=f"a serving option researchers may set (repeatable) [default: "
    f"{', '.join(DEFAULT_ALLOWED_ARGS)}]",
)  # fmt: skip
@click.option("--keep-work", is_flag=True, help="keep each job's per-row files (private)")
def run_service(**options) -> None:
    """Serve the HTTP API (POST/GET/DELETE /jobs) and run the queued jobs."""
    import uvicorn

    from .runner import Config
    from .validate import Template

    try:
        template = Template(options["serving_template"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--serving-template") from None
    if options["epsilon_per_job"] > options["epsilon_budget"]:
        raise click.BadParameter("more than --epsilon-budget: no job could run",
                                 param_hint="--epsilon-per-job")  # fmt: skip
    config = Config(
        build=options["build"], state=options["state"], template=template,
        judge_endpoint=options["judge_endpoint"], judge_model=options["judge_model"],
        min_cell=options["min_cell"], min_speakers=options["min_speakers"],
        epsilon_per_job=options["epsilon_per_job"], epsilon_budget=options["epsilon_budget"],
        speaker_rows=options["speaker_rows"], slots=options["slots"],
        jobs_per_day=options["jobs_per_day"],
        job_timeout_s=options["job_timeout_s"], health_timeout_s=options["health_timeout_s"],
        resamples=options["resamples"], concurrency=options["concurrency"],
        judge_price_per_1k=options["judge_price_per_1k"],
        allowed_args=tuple(options["allowed_args"]) or DEFAULT_ALLOWED_ARGS,
        keep_work=options["keep_work"],
    )  # fmt: skip
    try:
        _, runner, app = build_service(config)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        loopback = ipaddress.ip_address(options["host"]).is_loopback
    except ValueError:
        loopback = options["host"] == "localhost"
    if not loopback:
        click.echo(f"warning: listening on {options['host']}, not loopback", err=True)
    runner.start()
    click.echo(f"build {config.build} (manifest sha256 {runner.build_sha256[:12]}), "
               f"{config.slots} slot(s)", err=True)  # fmt: skip
    try:
        uvicorn.run(app, host=options["host"], port=options["port"], log_level="info")
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

"""The HTTP API (starlette): researchers submit a model by Hub id, follow the job and
read its aggregates. Every route but /healthz needs `Authorization: Bearer <token>`; a
job is visible to its own user only (another user's job is 404, as if absent)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import privacy, validate
from .runner import Runner
from .store import FINAL, AuthError, Job, Store

MAX_BODY = 16 * 1024
FIELDS = ("model", "revision", "serving_args")
PUBLIC_JOB = ("id", "status", "reason", "model", "revision", "serving_args", "created",
              "started", "finished")  # fmt: skip


def error(status: int, message: str, **headers) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def public_job(job: Job) -> dict:
    """The job as its user sees it (the HTTP JSON), in PUBLIC_JOB's order."""
    return {k: getattr(job, k) for k in PUBLIC_JOB}


async def limited_body(request: Request) -> bytes | None:
    """The body, read a chunk at a time; None as soon as it is declared or found to be over
    MAX_BODY (what is past the limit is never read: the connection is closed instead)."""
    declared = request.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > MAX_BODY:
        return None
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            return None
    return bytes(raw)


def create_app(store: Store, runner: Runner) -> Starlette:
    config = runner.config

    def user_of(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("missing bearer token (Authorization: Bearer <token>)")
        return store.authenticate(token.strip())

    def authed(handler):
        async def endpoint(request: Request) -> Response:
            try:
                user = user_of(request)
            except AuthError as exc:
                return error(401, str(exc), **{"WWW-Authenticate": "Bearer"})
            return await handler(request, user)

        return endpoint

    async def submit(request: Request, user: str) -> Response:
        raw = await limited_body(request)
        if raw is None:
            return error(413, f"request body over {MAX_BODY} bytes", Connection="close")
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return error(400, 'expected a JSON object: {"model": "org/name", "revision": ...}')
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            return error(
                400, f"unknown fields: {', '.join(unknown)} (allowed: {', '.join(FIELDS)})"
            )
        try:
            model = validate.model_id(body.get("model"))
            revision = validate.revision(body.get("revision"))
            args = validate.serving_args(body.get("serving_args"), config.allowed_args)
            if args and not config.template.takes_args:
                raise validate.RequestError("serving_args: this service takes none")
        except validate.RequestError as exc:
            return error(400, str(exc))
        now = time.time()
        if store.jobs_since(user, now - 86400) >= config.jobs_per_day:
            store.audit(user, "job refused", detail="quota", outcome="refused")
            return error(429, f"quota: {config.jobs_per_day} jobs per 24 hours")
        refusal = privacy.budget_refusal(store, user, config.epsilon_per_job, config.epsilon_budget)
        if refusal:
            store.audit(user, "job refused", detail="privacy budget", outcome="refused")
            return error(403, refusal)
        if store.slot_seconds_since(user, now - 86400, now) >= config.slot_seconds_per_day:
            store.audit(user, "job refused", detail="slot time", outcome="refused")
            return error(429, f"quota: {config.slot_seconds_per_day:g} s of slot time per 24 hours")
        job_id = store.submit(user, model, revision, args)
        job = store.job(job_id)
        store.audit(user, "job submitted", job=job, build_sha256=runner.build_sha256)
        return JSONResponse(public_job(job), status_code=201)

    async def list_jobs(request: Request, user: str) -> Response:
        return JSONResponse({"jobs": [public_job(j) for j in store.jobs_of(user)]})

    async def get_job(request: Request, user: str) -> Response:
        job = store.job(request.path_params["job_id"], user)
        if job is None:
            return error(404, "no such job")
        return JSONResponse(public_job(job))

    async def result(request: Request, user: str) -> Response:
        job = store.job(request.path_params["job_id"], user)
        if job is None:
            return error(404, "no such job")
        if job.status != "done":
            return error(409, f"job is {job.status}: no result")
        path = config.results / f"{job.id}.json"
        return Response(path.read_bytes(), media_type="application/json")

    async def cancel(request: Request, user: str) -> Response:
        job_id = request.path_params["job_id"]
        job = store.job(job_id, user)
        if job is None:
            return error(404, "no such job")
        if job.status in FINAL:
            return error(409, f"job is {job.status}: nothing to cancel")
        if not store.cancel_queued(job_id):
            runner.cancel(job_id)
            for _ in range(120):  # the runner stops the model and evaluator (seconds)
                if store.job(job_id).status in FINAL:
                    break
                await asyncio.sleep(0.25)
        job = store.job(job_id)
        if job.status == "cancelled" and job.started is None:
            store.audit(user, "job ended", job=job, build_sha256=runner.build_sha256,
                        outcome="cancelled", detail=job.reason)  # fmt: skip
        return JSONResponse(public_job(job), status_code=202)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "build_sha256": runner.build_sha256})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        # uvicorn's graceful shutdown (SIGTERM, SIGINT): end the running jobs' processes
        await asyncio.to_thread(runner.stop)

    return Starlette(
        lifespan=lifespan,
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/jobs", authed(submit), methods=["POST"]),
            Route("/jobs", authed(list_jobs), methods=["GET"]),
            Route("/jobs/{job_id}", authed(get_job), methods=["GET"]),
            Route("/jobs/{job_id}", authed(cancel), methods=["DELETE"]),
            Route("/jobs/{job_id}/result", authed(result), methods=["GET"]),
        ],
    )

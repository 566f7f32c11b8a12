"""Publish a verified staged folder: private repo -> one commit -> gating -> public -> tag.

Order matters: the data is never public before it is gated, and the version
tag comes last, so a tag on the Hub means every earlier step finished. A repo
that already exists and is public is therefore gated before the commit, not
after it. Each step is retried on server errors and timeouts; a step that
keeps failing stops the push with a message naming it, and rerunning the same command
finishes the job: an unchanged folder makes no new commit (the Hub reports
every file as already there) and a tag already on our commit counts as done.

The token comes from HF_TOKEN or the huggingface_hub login and is handed to
the client only; it is never printed, logged or put in an error message.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

from redvox.schemas.errors import UserError
from redvox.schemas.layout import sha256_file
from redvox.schemas.vocab import FULL, PUBLIC

from .card import read_provenance
from .stage import check_repo_id, staged_files

KEEP_REMOTE = (".gitattributes",)  # created by the Hub with the repo; never ours to delete


class PushError(UserError, RuntimeError):
    """A push that stopped; the message names the step and what to do."""


@dataclass(frozen=True)
class PushPlan:
    staged: Path
    repo_id: str
    version: str
    dataset_set: str
    public: bool
    files: tuple[tuple[str, int], ...]  # (path in repo, bytes)

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @property
    def commit_message(self) -> str:
        return f"RedVox {self.tag}"

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def steps(self) -> list[str]:
        """The Hub calls, in the order `push` makes them."""
        gated = self.dataset_set == PUBLIC
        steps = [f"create dataset repo {self.repo_id} as private (kept as it is if it exists)"]
        if gated:
            steps.append(
                f"if {self.repo_id} already exists and is public: set gated access to manual "
                "now, before the upload, so its data is never public and ungated"
            )
        steps.append(
            f'upload {len(self.files)} files in one commit "{self.commit_message}" '
            "(files already identical on the Hub are skipped; stale ones deleted)"
        )
        if gated:
            steps.append(
                "set gated access to manual (the access form is in README.md), "
                "unless done before the upload"
            )
        if self.public:
            steps.append("make the repo public")
        steps.append(f"tag the commit {self.tag}")
        return steps


def plan_push(staged: Path, repo_id: str, public: bool) -> PushPlan:
    """What `push` would do, from the staged folder alone; refuses what may never be pushed."""
    check_repo_id(repo_id, PushError)
    staged = Path(staged)
    provenance = read_provenance(staged)
    staged_for = provenance.get("repo_id")
    if staged_for != repo_id:
        raise PushError(
            f"{staged} was staged for {staged_for}, not {repo_id}: its card and loading script "
            f"name {staged_for}; stage again with --repo-id {repo_id}, or push to {staged_for}"
        )
    if provenance["set"] == FULL and public:
        raise PushError(
            f"{staged}: this is the full set (participants who did not consent to public "
            "release): it may only go to a private repo for internal evaluation; drop --public"
        )
    files = tuple((rel, (staged / rel).stat().st_size) for rel in staged_files(staged))
    return PushPlan(staged, repo_id, provenance["version"], provenance["set"], public, files)


def dry_run_listing(plan: PushPlan, reason: str) -> str:
    """The listing `make release` prints when it does not push."""
    width = max(len(p) for p, _ in plan.files)
    lines = [
        f"DRY RUN ({reason}): nothing was pushed.",
        f"Would push {plan.staged} to https://huggingface.co/datasets/{plan.repo_id}"
        f" ({plan.dataset_set} set, version {plan.version}):",
    ]
    lines += [f"  {path:<{width}}  {_size(size):>10}" for path, size in plan.files]
    lines.append(f"  {'total':<{width}}  {_size(plan.total_bytes):>10}  ({len(plan.files)} files)")
    lines.append("Calls, in order:")
    lines += [f"  {i}. {step}" for i, step in enumerate(plan.steps(), 1)]
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def resolve_token() -> str | None:
    """HF_TOKEN, else the token saved by `hf auth login`; None when neither exists."""
    from huggingface_hub import get_token

    return os.environ.get("HF_TOKEN") or get_token()


def use_request_timeout(seconds: float) -> None:
    """Give huggingface_hub's shared client a per-request timeout (it has none by
    default), so a Hub call that hangs becomes a retried timeout."""
    from huggingface_hub import set_client_factory
    from huggingface_hub.utils._http import default_client_factory

    def factory() -> httpx2.Client:
        client = default_client_factory()
        client.timeout = httpx2.Timeout(seconds)
        return client

    set_client_factory(factory)


@dataclass(frozen=True)
class Retry:
    attempts: int = 4
    backoff_s: float = 2.0
    sleep: Callable[[float], None] = time.sleep


def _transient(exc: Exception) -> bool:
    if isinstance(exc, httpx2.TimeoutException | httpx2.NetworkError | httpx2.RemoteProtocolError):
        return True
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code >= 500 or exc.response.status_code == 429
    return False


def _reason(exc: Exception, secret: str | None) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text.replace(secret, "<token>") if secret else text


class Publisher:
    """Runs the push steps against one HfApi client, with retries and progress lines."""

    def __init__(
        self,
        api: HfApi,
        plan: PushPlan,
        retry: Retry | None = None,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.api, self.plan, self.echo = api, plan, echo
        self.retry = retry or Retry()
        self.secret = api.token if isinstance(api.token, str) else None

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return fn()
            except PushError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified right below
                reason = _reason(exc, self.secret)
                if not _transient(exc):
                    raise PushError(self._stopped(name, reason)) from None
                if attempt == self.retry.attempts:
                    raise PushError(
                        self._stopped(name, f"{reason} (after {attempt} attempts)")
                    ) from None
                wait = self.retry.backoff_s * 2 ** (attempt - 1)
                self.echo(
                    f"  {name}: {reason}; retrying in {wait:g} s ({attempt}/{self.retry.attempts})"
                )
                self.retry.sleep(wait)
        raise AssertionError("unreachable")

    def _stopped(self, name: str, reason: str) -> str:
        return (
            f"push of {self.plan.staged} to {self.plan.repo_id} stopped at step '{name}': {reason}. "
            f"The tag {self.plan.tag} was not set. Rerun the same command to finish: "
            "finished steps are detected and not repeated."
        )

    # --- the steps ---
    def run(self) -> str:
        plan, api = self.plan, self.api
        local = local_oids(plan.staged, [p for p, _ in plan.files])
        tagged = self.step("read refs", self._tag_target)
        if tagged is not None:
            remote = self.step("read tagged files", lambda: remote_oids(api, plan.repo_id, tagged))
            if not same_files(local, remote):
                raise PushError(
                    f"{plan.repo_id} already has tag {plan.tag} on commit {tagged[:12]} with other "
                    "files: a published version never moves. Declare a new version in "
                    "builder/versions.py and build it."
                )
            self.echo(f"{plan.tag} is already on the Hub with these files; checking settings only")
        else:
            self.echo(f"create {plan.repo_id} (private)")
            self.step("create repo", self._create)
        info = self.step("read repo", lambda: api.dataset_info(plan.repo_id))
        self._refuse_public_full_set(info.private)
        # A repo that is already public would show the new files ungated until the
        # gate step: gate it first.
        gate_first = plan.dataset_set == PUBLIC and not info.private
        if gate_first:
            self._gate("set gating: manual (the repo is already public: before the commit)")
        commit = tagged or self._commit(local)
        if plan.dataset_set == PUBLIC and not gate_first:
            self._gate("set gating: manual")
        if plan.public:
            self.echo("make public")
            self.step(
                "make public",
                lambda: api.update_repo_settings(plan.repo_id, private=False, repo_type="dataset"),
            )
        if tagged is None:
            self.echo(f"tag {plan.tag} -> {commit[:12]}")
            self.step("tag", lambda: self._tag(commit))
        return commit

    def _tag_target(self) -> str | None:
        try:
            refs = self.api.list_repo_refs(self.plan.repo_id, repo_type="dataset")
        except RepositoryNotFoundError:
            return None
        return next((t.target_commit for t in refs.tags if t.name == self.plan.tag), None)

    def _create(self) -> None:
        self.api.create_repo(self.plan.repo_id, repo_type="dataset", private=True, exist_ok=True)

    def _refuse_public_full_set(self, private: bool) -> None:
        if self.plan.dataset_set == FULL and not private:
            raise PushError(
                f"{self.plan.repo_id} is public: the full set may only go to a private repo"
            )

    def _gate(self, message: str) -> None:
        self.echo(message)
        self.step(
            "gate",
            lambda: self.api.update_repo_settings(
                self.plan.repo_id, gated="manual", repo_type="dataset"
            ),
        )

    def _commit(self, local: dict[str, tuple[str, str]]) -> str:
        plan, api = self.plan, self.api

        def attempt() -> str:
            # Operations are rebuilt on every attempt: the client marks them used.
            remote = set(api.list_repo_files(plan.repo_id, repo_type="dataset"))
            ops: list = [
                CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(plan.staged / p))
                for p in local
            ]
            ops += [
                CommitOperationDelete(p) for p in sorted(remote - set(local) - set(KEEP_REMOTE))
            ]
            info = api.create_commit(
                plan.repo_id, ops, commit_message=plan.commit_message, repo_type="dataset"
            )
            return info.oid

        self.echo(f'commit "{plan.commit_message}" ({len(local)} files)')
        oid = self.step("commit", attempt)
        remote = self.step("read committed files", lambda: remote_oids(api, plan.repo_id, oid))
        if not same_files(local, remote):
            differing = sorted(set(local) ^ set(remote)) or sorted(local)
            raise PushError(
                f"after the commit, {plan.repo_id}@{oid[:12]} does not hold exactly the staged "
                f"files (e.g. {differing[:3]}); nothing was tagged. Check for a "
                "concurrent push, then rerun."
            )
        return oid

    def _tag(self, commit: str) -> None:
        try:
            self.api.create_tag(
                self.plan.repo_id, tag=self.plan.tag, revision=commit, repo_type="dataset"
            )
        except HfHubHTTPError as exc:
            # 409: the tag exists, e.g. an earlier attempt went through but its reply was lost.
            if exc.response is None or exc.response.status_code != 409:
                raise
            if self._tag_target() != commit:
                raise PushError(
                    f"{self.plan.repo_id} got tag {self.plan.tag} on another commit meanwhile; "
                    "a published version never moves"
                ) from None


def local_oids(staged: Path, paths: list[str]) -> dict[str, tuple[str, str]]:
    """path -> (sha256, git blob sha1) of each staged file: the Hub reports the
    first for LFS files and the second for regular ones."""
    out = {}
    for rel in paths:
        data_path = staged / rel
        sha1 = hashlib.sha1(b"blob %d\0" % data_path.stat().st_size)
        out[rel] = (sha256_file(data_path, on_block=sha1.update), sha1.hexdigest())
    return out


def remote_oids(api: HfApi, repo_id: str, revision: str) -> dict[str, str]:
    """path -> "sha256:<hex>" (LFS) or "git:<sha1>" (regular) for each file of the
    repo at `revision`, read from the tree listing without downloading anything."""
    out = {}
    for entry in api.list_repo_tree(
        repo_id, repo_type="dataset", revision=revision, recursive=True
    ):
        if not hasattr(entry, "blob_id") or entry.path in KEEP_REMOTE:
            continue
        out[entry.path] = f"sha256:{entry.lfs.sha256}" if entry.lfs else f"git:{entry.blob_id}"
    return out


def same_files(local: dict[str, tuple[str, str]], remote: dict[str, str]) -> bool:
    return set(local) == set(remote) and all(
        remote[p] in (f"sha256:{sha256}", f"git:{sha1}") for p, (sha256, sha1) in local.items()
    )


def push_release(
    staged: Path,
    repo_id: str,
    *,
    public: bool,
    api: HfApi,
    verify: Callable[..., Any],
    retry: Retry | None = None,
    echo: Callable[[str], None] = print,
) -> str:
    """Verify `staged` again, then publish it; returns the tagged commit id."""
    plan = plan_push(staged, repo_id, public)
    result = verify(staged, repo_id=repo_id, api=api)
    if not result.ok:
        raise PushError(
            f"{staged} does not verify, refusing to push:\n{result.summary()}\n"
            "Fix the build or the staging, stage again, then push."
        )
    return Publisher(api, plan, retry, echo).run()

"""`redvox release`: represent, stage, verify, push, withdraw, and `run` (what
`make release` calls): build -> representativeness -> stage -> verify -> push,
or a dry-run listing when there is no token or no repo id."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from redvox.schemas import InputConfig
from redvox.schemas.vocab import FULL, PUBLIC, SETS
from redvox.sources.cli import load_config

if TYPE_CHECKING:
    from redvox.builder.manifest import BuildManifest
from redvox.sources.cli_options import (
    DEFAULT_REPO,
    build_config_option,
    cache_option,
    config_option,
    out_option,
    repo_id_option,
    set_option,
    workers_option,
)

STAGED_NAME = "staged"


def _fail(message: str) -> None:
    raise click.ClickException(message)


def _iso_date(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A calendar date written YYYY-MM-DD, as the consent registry stores it."""
    from redvox.sources.registry import parse_date

    if value is None:
        return None
    try:  # the registry's own parser: fromisoformat also takes 20260315 and 2026-W11-1
        return parse_date(value).isoformat()
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a date written YYYY-MM-DD, e.g. 2026-03-15"
        ) from None


def _build_manifest(folder: Path) -> BuildManifest:
    """The manifest of a built set; a folder without one is a user error, not a traceback."""
    from redvox.builder.manifest import MANIFEST, BuildManifest, ManifestError

    if not (Path(folder) / MANIFEST).is_file():
        _fail(
            f"{folder / MANIFEST}: no build manifest; point at a version folder written by "
            "`redvox build` (OUT/<version>)"
        )
    try:
        return BuildManifest.load(folder)
    except ManifestError as exc:
        _fail(str(exc))


other_inputs_option = click.option(
    "--other-inputs",
    is_flag=True,
    help="use --config even where its inputs differ from the ones the build read",
)


def _inputs_of(version_dir: Path | None, config_path: Path | None, other_inputs: bool):
    """The input config of a release step (`--config`, the demo corpus's when not given),
    refused when its inputs differ from those the build in `version_dir` read (see
    builder/provenance.py; its registries always must be the build's)."""
    from redvox.builder.provenance import check_inputs
    from redvox.schemas import DEMO_CONFIG

    if version_dir is None and config_path is None:
        _fail(
            "no build to read the inputs from: pass --build OUT/<version> or --config "
            "with the input config the release was built from"
        )
    config = load_config(config_path)
    from .consent import read_consent_view

    read_consent_view(config)  # a registry row the build would refuse is named first
    if version_dir is not None:
        name = (
            f"--config {config_path}"
            if config_path is not None
            else f"the demo corpus's input config {DEMO_CONFIG} (no --config given)"
        )
        check_inputs(version_dir, config, name, other_inputs=other_inputs)
    return config


def _build_of(staged: Path, version_dir: Path | None) -> Path | None:
    """The version folder of a staged release: --build, or the folder `release run`
    stages into (OUT/<version>/staged)."""
    from redvox.builder.provenance import BUILD_INPUTS

    if version_dir is not None:
        return version_dir
    parent = Path(staged).resolve().parent
    return parent if (parent / BUILD_INPUTS).is_file() else None


@click.group()
def release() -> None:
    """Check, stage and publish a built RedVox version on the Hugging Face Hub."""


@release.command()
@click.argument("version_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--judged-public",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="judged model outputs on the public set (the evaluator's JSONL)",
)
@click.option(
    "--judged-full",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="judged model outputs on the full set",
)
@click.option("--override-gate", default=None, metavar="REASON",
              help="release despite a failed check; the reason is printed in the card")  # fmt: skip
@build_config_option
@other_inputs_option
def represent(
    version_dir: Path, judged_public, judged_full, override_gate, config_path, other_inputs
) -> None:
    """Compare the public set of VERSION_DIR (OUT/<version>) with the full set."""
    _represented_build(version_dir)  # a folder that cannot be represented says so first
    config = _inputs_of(version_dir, config_path, other_inputs)
    report = _represent(version_dir, judged_public, judged_full, override_gate, config)
    if not report["passed"] and not report["override"]:
        sys.exit(1)


def _represented_build(version_dir: Path) -> BuildManifest:
    """The public manifest of a version folder that holds both sets; one line otherwise."""
    if version_dir.name in SETS and not (version_dir / PUBLIC).is_dir():
        _fail(
            f"{version_dir}: a set folder; give its version folder {version_dir.parent} "
            "(the one holding public/ and full/): represent compares the two"
        )
    manifest = _build_manifest(version_dir / PUBLIC)
    if not (version_dir / FULL).is_dir():
        _fail(
            f"{version_dir}: holds no full set (a folder made by `variants add` holds only the "
            "set it was made from); represent the version it was made from, e.g. "
            f"{version_dir.parent / manifest.base_version}"
        )
    return manifest


def _represent(
    version_dir: Path, judged_public, judged_full, override: str | None, config: InputConfig
) -> dict:
    from redvox.builder.versions import get_version

    from . import representativeness as rep
    from .consent import refuse_outsiders, release_consent

    if (judged_public is None) != (judged_full is None):
        _fail("give both --judged-public and --judged-full, or neither")
    manifest = _represented_build(version_dir)
    # Who is in each set, against the registries today, whatever the folders are called.
    view = release_consent(config, version_dir)
    for dataset_set in (PUBLIC, FULL):
        refuse_outsiders(version_dir / dataset_set, view, dataset_set)
    thresholds = get_version(manifest.version).config.representativeness
    public = rep.read_metadata(version_dir / PUBLIC)
    full = rep.read_metadata(version_dir / FULL)
    judged = None
    if judged_public is not None:
        from .judged import compare_judged_files

        judged = compare_judged_files(judged_public, judged_full, thresholds)
    report = rep.assess(
        manifest.version,
        public,
        full,
        thresholds,
        judged,
        override,
        manifests=rep.manifest_hashes(version_dir),
    )
    json_path, md_path = rep.write_report(report, version_dir)
    verdict = "passed" if report["passed"] else "FAILED"
    if not report["passed"] and report["override"]:
        verdict += " (overridden)"
    click.echo(f"representativeness {verdict}: {md_path}")
    for check in rep.failed_checks(report):
        click.echo(
            f"  failed: {check['name']} {check['statistic']} = {check['value']:.3f} "
            f"({check['kind']} {check['limit']})"
        )
    return report


@release.command()
@click.argument("version_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@repo_id_option(default=DEFAULT_REPO, show_default=True)
@click.option("--out", "staged", type=click.Path(file_okay=False, path_type=Path), required=True)
@set_option("dataset_set", default=PUBLIC, help="full: internal evaluation only, private repos")
@build_config_option
@other_inputs_option
def stage(
    version_dir: Path, repo_id: str, staged: Path, dataset_set: str, config_path, other_inputs
) -> None:
    """Write the Hub repo of VERSION_DIR (OUT/<version>) into --out, then verify it."""
    _build_manifest(version_dir / dataset_set)  # a folder that was never built says so first
    config = _inputs_of(version_dir, config_path, other_inputs)
    _stage_and_verify(version_dir, repo_id, staged, dataset_set, config)


def _stage_and_verify(
    version_dir: Path, repo_id: str, staged: Path, dataset_set: str, config: InputConfig
):
    from .stage import stage_release

    # StageError, GateError: UserErrors, one line at the CLI edge
    footprint = stage_release(
        version_dir,
        repo_id,
        staged,
        dataset_set,
        synthetic=config.synthetic,
        config=config,
        contact=config.withdrawal_contact,
    )
    click.echo(f"staged {staged}")
    click.echo(
        f"  audio: {footprint.rows} rows would carry {footprint.row_audio_bytes} bytes of audio "
        f"if each kept its own copy; the shards store {footprint.distinct_clips} distinct clips "
        f"({footprint.distinct_audio_bytes} bytes) in {footprint.file_bytes} bytes of parquet "
        f"(counted per shard: a clip shared by several languages is stored once in each)"
    )
    manifest = _build_manifest(version_dir / dataset_set)
    return _verify(staged, config, repo_id=repo_id, manifest=manifest, build=version_dir)


def _verify(staged: Path, config: InputConfig, **kwargs):
    from .verify import verify_staged

    result = verify_staged(
        staged, config=config, echo=lambda m: click.echo(f"  verify: {m}"), **kwargs
    )
    click.echo(result.summary() if result.ok else f"{staged}: verification FAILED")
    if not result.ok:
        click.echo(result.summary())
        raise click.exceptions.Exit(1)
    return result


@release.command()
@click.argument("staged", type=click.Path(exists=True, file_okay=False, path_type=Path))
@repo_id_option(default=None, help="target repo; checked for the full set")
@click.option("--build", "version_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="OUT/<version>: also compare counts with its manifest")  # fmt: skip
@build_config_option
@other_inputs_option
def verify(staged: Path, repo_id, version_dir, config_path, other_inputs) -> None:
    """Check STAGED as users will load it: datasets, audio, consent, identifiers, card."""
    from .card import read_provenance
    from .push import resolve_token

    manifest = None
    if version_dir is not None:
        manifest = _build_manifest(version_dir / read_provenance(staged)["set"])
    api = None
    token = resolve_token() if repo_id else None
    if token:  # lets verify see whether the target repo is public (refused for the full set)
        from huggingface_hub import HfApi

        api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    build = _build_of(staged, version_dir)
    config = _inputs_of(build, config_path, other_inputs)
    _verify(staged, config, repo_id=repo_id, manifest=manifest, api=api, build=build)


@release.command()
@click.argument("staged", type=click.Path(exists=True, file_okay=False, path_type=Path))
@repo_id_option(required=True)
@click.option("--public", is_flag=True, help="make the repo public after gating it")
@click.option("--timeout", default=120.0, show_default=True, help="seconds per Hub request")
@click.option("--build", "version_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="OUT/<version> the release was staged from (default: STAGED's parent)")  # fmt: skip
@build_config_option
@other_inputs_option
def push(
    staged: Path, repo_id: str, public: bool, timeout: float, version_dir, config_path, other_inputs
) -> None:
    """Verify STAGED again and publish it to REPO_ID (token: HF_TOKEN or `hf auth login`)."""
    from .push import resolve_token

    build = _build_of(staged, version_dir)
    config = _inputs_of(build, config_path, other_inputs)
    token = resolve_token()
    if not token:
        _fail("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    _push(staged, repo_id, public, config, token, timeout, build)


def _push(
    staged: Path,
    repo_id: str,
    public: bool,
    config: InputConfig,
    token: str,
    timeout: float,
    build: Path | None,
):
    from huggingface_hub import HfApi

    from .push import push_release, use_request_timeout
    from .verify import verify_staged

    use_request_timeout(timeout)
    # HF_ENDPOINT is read again here: huggingface_hub reads it only at import time.
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    verifier = functools.partial(verify_staged, config=config, build=build)
    commit = push_release(staged, repo_id, public=public, api=api, verify=verifier, echo=click.echo)
    click.echo(f"pushed {staged} to {repo_id} at commit {commit}")


@release.command()
@click.argument("participant_key")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="input config whose consent registry gets the withdrawal",
)
@out_option
@repo_id_option(default=None, help="also list the Hub tags that hold the participant")
@click.option("--date", "withdrawal_date", default=None, callback=_iso_date, metavar="YYYY-MM-DD",
              help="date of the withdrawal (default: today)")  # fmt: skip
@cache_option
@workers_option
def withdraw(
    participant_key: str, config_path, out: Path, repo_id, withdrawal_date, cache_dir, workers: int
) -> None:
    """Record PARTICIPANT_KEY's withdrawal, build the next MAJOR version without them,
    and report which built or published versions hold them."""
    from .withdraw import withdraw_participant

    # WithdrawalError, a busy or unwritable OUT: UserErrors, one line at the CLI edge
    withdraw_participant(
        participant_key, config_path, out, repo_id, withdrawal_date, click.echo, cache_dir, workers
    )


@release.command()
@click.option("--version", "version", default=None, help="declared version (default: latest)")
@config_option
@out_option
@repo_id_option(default=None, help="push target; without it (or a token): dry run")
@click.option("--public", is_flag=True, help="make the repo public after gating it")
@click.option(
    "--override-gate",
    default=None,
    metavar="REASON",
    help="release despite a failed representativeness check",
)
@click.option("--timeout", default=120.0, show_default=True, help="seconds per Hub request")  # fmt: skip
@workers_option
def run(
    version, config_path, out: Path, repo_id, public: bool, override_gate, timeout, workers: int
) -> None:
    """build -> representativeness -> stage -> verify -> push (dry run without token or repo id)."""
    from redvox.builder.versions import get_version
    from redvox.builder.write import build_lock

    declared = get_version(version)
    config = load_config(config_path)
    with build_lock(out):  # the whole run: no other build may rewrite OUT meanwhile
        _run(declared, config, out, repo_id, public, override_gate, timeout, workers)


def _run(
    declared, config: InputConfig, out: Path, repo_id, public, override_gate, timeout, workers
) -> None:
    from redvox.builder.build_cli import summary
    from redvox.builder.pipeline import BuildOptions, build_version

    from .push import dry_run_listing, plan_push, resolve_token

    click.echo(f"== build {declared.tag} into {out}")
    click.echo(summary(build_version(declared, config, BuildOptions(out=out, workers=workers))))
    version_dir = out / declared.version
    click.echo("== representativeness")
    report = _represent(version_dir, None, None, override_gate, config)
    if not report["passed"] and not report["override"] and config.synthetic:
        # The demo corpus has a handful of made-up speakers: too few to be
        # representative. Say so in the card rather than stop the demo release.
        speakers = report["sizes"]["public_speakers"]
        reason = (
            f"synthetic demo corpus ({speakers} made-up speakers), too small to be "
            "representative: the gate is reported, not enforced"
        )
        click.echo(f"overriding the gate: {reason}")
        report = _represent(version_dir, None, None, reason, config)
    if not report["passed"] and not report["override"]:
        _fail(
            "the representativeness gate failed; see the report, fix the set or pass --override-gate REASON (make release: OVERRIDE_GATE=REASON)"
        )
    staged = version_dir / STAGED_NAME
    click.echo(f"== stage and verify {staged}")
    _stage_and_verify(version_dir, repo_id or DEFAULT_REPO, staged, PUBLIC, config)
    token = resolve_token()
    if not token or not repo_id:
        missing = " and ".join(
            w
            for w, absent in (
                ("no token (HF_TOKEN)", not token),
                ("no repo id (REPO_ID)", not repo_id),
            )
            if absent
        )
        click.echo(dry_run_listing(plan_push(staged, repo_id or DEFAULT_REPO, public), missing))
        return
    click.echo(f"== push to {repo_id}")
    _push(staged, repo_id, public, config, token, timeout, version_dir)

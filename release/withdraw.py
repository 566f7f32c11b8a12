"""A participant withdraws: record it, build the next MAJOR version without them,
and say where their recordings still are.

Versions are code (builder/versions.py), so this cannot declare the new
version itself: it builds it under the new version string from the latest
declared configuration, and prints the declaration to paste. The registry
is backed up (timestamped copy beside it) before it is changed.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import pprint
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from redvox.builder.versions import DatasetVersion, get_version
from redvox.schemas import InputConfig
from redvox.schemas.errors import UserError
from redvox.schemas.layout import is_shard_file, shard_paths
from redvox.schemas.records import CONSENT_COLUMNS

PURGE_EXPLANATION = """\
Purging them from the Hub history: a new commit that drops their rows does not
remove them from the repository, because every earlier commit and every version
tag still points at the old parquet files. To make the data unreachable:
  1. publish the new MAJOR version (it does not contain them);
  2. delete every version tag listed above (`HfApi.delete_tag`): a tag keeps its
     commit, and so the participant's audio, downloadable until it is deleted;
  3. rewrite the history of main (`HfApi.super_squash_history`, which squashes
     all commits into one and cannot be undone), so no commit reaches the old
     files; then ask the Hub team to garbage-collect the orphaned LFS objects;
  4. tell the users who were granted access (the gated-access list) to delete
     their copies, as the terms require."""


class WithdrawalError(UserError, RuntimeError):
    """The withdrawal cannot be recorded; the message names the file and the key."""


@dataclass(frozen=True)
class Holding:
    """Rows of the participant found in one place."""

    where: str  # a folder, or "repo@tag"
    version: str
    rows: int


def next_major(latest: DatasetVersion) -> str:
    major, _, _ = latest.parts
    return f"{major + 1}.0.0"


def withdrawal_version(latest: DatasetVersion) -> DatasetVersion:
    """The latest declared configuration under the next MAJOR version string (one
    participant withdraws per run of `redvox release withdraw`)."""
    return DatasetVersion(
        version=next_major(latest),
        release_notes=(
            f"Withdrawal of 1 participant: every row of theirs is removed "
            f"(configuration as in {latest.tag}). Delete copies of earlier versions."
        ),
        config=latest.config,
    )


def declaration(version: DatasetVersion) -> str:
    """The entry to append to `_RELEASES` in builder/versions.py: the configuration is
    written out in full (pydantic reads the dicts back into the same config, same hash)."""
    config = pprint.pformat(
        version.config.model_dump(mode="python"), indent=1, width=92, sort_dicts=False
    )
    config = textwrap.indent(config, " " * len('        "config": ')).lstrip()
    return (
        "    {\n"
        f'        "version": "{version.version}",\n'
        f'        "release_notes": {version.release_notes!r},\n'
        f'        "config": {config},\n'
        "    },"
    )


def record_withdrawal(
    consent_csv: Path, participant_key: str, date: dt.date, known: set[str]
) -> Path:
    """Set the withdrawal date on every registry row of the participant (adding a row
    when they have none), after a timestamped backup copy. Returns the backup."""
    text = consent_csv.read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text)))
    fields = list(rows[0].keys()) if rows else list(CONSENT_COLUMNS)
    mine = [r for r in rows if (r.get("participant_key") or "").strip() == participant_key]
    if not mine and participant_key not in known:
        raise WithdrawalError(
            f"{consent_csv}: no participant {participant_key!r} in the consent or participants "
            "registry; check the key (it is the private collection key, not the user_id)"
        )
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    backup = consent_csv.with_name(f"{consent_csv.name}.{stamp}.bak")
    shutil.copy2(consent_csv, backup)
    for row in mine:
        current = (row.get("withdrawal_date") or "").strip()
        if not current or current > date.isoformat():
            row["withdrawal_date"] = date.isoformat()
    if not mine:
        rows.append(
            {f: "" for f in fields}
            | {"participant_key": participant_key, "withdrawal_date": date.isoformat()}
        )
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    consent_csv.write_text(buffer.getvalue(), encoding="utf-8")
    return backup


def local_holdings(out: Path, user_id: str) -> list[Holding]:
    """Built sets (OUT/<version>/{public,full}) and staged folders (OUT/<version>/staged)
    whose shards hold rows of `user_id`."""
    holdings = []
    for folder in sorted(p for p in Path(out).glob("*/*") if (p / "data").is_dir()):
        rows = sum(_rows_of(shard, user_id) for shard in shard_paths(folder))
        if rows:
            holdings.append(Holding(str(folder), folder.parent.name, rows))
    return holdings


def _rows_of(source, user_id: str) -> int:
    column = pq.read_table(source, columns=["user_id"]).column("user_id").to_pylist()
    return sum(1 for u in column if u == user_id)


def hub_holdings(repo_id: str, user_id: str, token: str) -> list[Holding]:
    """Version tags (and main) of `repo_id` whose shards hold rows of `user_id`; only the
    user_id column is read, over HTTP range requests."""
    from huggingface_hub import HfApi, HfFileSystem

    api, fs = HfApi(token=token), HfFileSystem(token=token)
    refs = api.list_repo_refs(repo_id, repo_type="dataset")
    holdings = []
    for ref in [*refs.tags, *refs.branches]:
        files = [
            f
            for f in api.list_repo_files(repo_id, repo_type="dataset", revision=ref.target_commit)
            if is_shard_file(f)
        ]
        rows = 0
        for f in files:
            with fs.open(f"datasets/{repo_id}@{ref.target_commit}/{f}", "rb") as fh:
                rows += _rows_of(fh, user_id)
        if rows:
            holdings.append(Holding(f"{repo_id}@{ref.name}", ref.name.removeprefix("v"), rows))
    return holdings


def withdraw_participant(
    participant_key: str,
    config_file: Path,
    out: Path,
    repo_id: str | None,
    withdrawal_date: str | None,
    echo: Callable[[str], None],
    cache_dir: Path | None = None,
    workers: int = 1,
) -> DatasetVersion:
    """Record the withdrawal, build the next MAJOR version into `out` and report where the
    participant's rows are. `out`'s build lock is taken first: with another build
    running there, nothing is recorded."""
    from redvox.builder.write import build_lock

    date = _withdrawal_date(withdrawal_date)
    with build_lock(out):
        return _withdraw_locked(
            participant_key, config_file, out, repo_id, date, echo, cache_dir, workers
        )


def _withdrawal_date(value: str | None) -> dt.date:
    if not value:
        return dt.date.today()
    try:
        date = dt.date.fromisoformat(value)
    except ValueError:
        date = None
    if date is None or len(value) != len("2026-03-15"):
        raise WithdrawalError(f"withdrawal date {value!r}: write it YYYY-MM-DD, e.g. 2026-03-15")
    return date


def _withdraw_locked(
    participant_key: str,
    config_file: Path,
    out: Path,
    repo_id: str | None,
    date: dt.date,
    echo: Callable[[str], None],
    cache_dir: Path | None,
    workers: int,
) -> DatasetVersion:
    from redvox.builder.pipeline import BuildOptions, build_version
    from redvox.builder.pseudonym import load_pseudonym_key, pseudonymize
    from redvox.sources.registry import read_participants

    from .push import resolve_token

    config = InputConfig.load(config_file)
    known = {p.participant_key for p in read_participants(config.participants).records}
    backup = record_withdrawal(config.consent, participant_key, date, known)
    echo(
        f"recorded the withdrawal of {participant_key} on {date} in {config.consent} (backup: {backup.name})"
    )

    latest = get_version()
    new = withdrawal_version(latest)
    echo(f"building {new.tag} (the configuration of {latest.tag}) into {out}")
    build_version(
        new,
        InputConfig.load(config_file),
        BuildOptions(out=Path(out), cache_dir=cache_dir, workers=workers, progress=False),
    )

    user_id = pseudonymize(load_pseudonym_key(config.pseudonym_key_file), participant_key)
    holdings = local_holdings(Path(out), user_id)
    token = resolve_token() if repo_id else None
    if repo_id and token:
        holdings += hub_holdings(repo_id, user_id, token)
    elif repo_id:
        echo(f"no token (HF_TOKEN): the tags of {repo_id} were not checked")
    leaked = [h for h in holdings if h.version == new.version]
    if leaked:
        raise WithdrawalError(
            f"{leaked[0].where}: the new build still holds {leaked[0].rows} rows of the participant"
        )
    echo(f"versions holding rows of user_id {user_id}:")
    echo("\n".join(f"  {h.version}: {h.rows} rows in {h.where}" for h in holdings) or "  none")
    echo(PURGE_EXPLANATION)
    echo(
        "Declare the new version in builder/versions.py (append to _RELEASES), then pin it with "
        "`python -m redvox.builder.versions`:"
    )
    echo(declaration(new))
    return new

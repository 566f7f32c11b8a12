"""A participant withdraws: record it, build the next MAJOR version without them,
and say where their recordings still are.

Versions are code (builder/versions.py), so this cannot declare the new
version itself: it builds it under the new version string from the latest
declared configuration, and prints the declaration to paste. The registry
is backed up (timestamped copy beside it) before it is changed, and changed only
after everything the withdrawal needs has been read (the registries through the
build's fail-closed reader first), atomically: a refusal leaves it byte-identical.
"""

from __future__ import annotations

import codecs
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
    when they have none), after a timestamped backup copy. Returns the backup.

    The registry is first read whole through the build's fail-closed reader: a row it
    would refuse stops the withdrawal, naming the line, before anything is written.
    Only the participant's lines change (every other byte is kept), and the new file
    replaces the old one atomically, so a failure leaves the registry as it was."""
    from redvox.builder.write import atomic_write_bytes
    from redvox.sources.registry import fold_key, read_consent

    consent_csv = Path(consent_csv)
    problem = next((p for p in read_consent(consent_csv).problems if p.fatal), None)
    if problem is not None:
        raise WithdrawalError(
            f"{problem}; the withdrawal was not recorded and {consent_csv.name} is unchanged: "
            "fix that row first"
        )
    data = consent_csv.read_bytes()
    bom = data.startswith(codecs.BOM_UTF8)
    lines = data.decode("utf-8-sig").splitlines(keepends=True)
    header_at = next(i for i, line in enumerate(lines) if line.strip())
    header = [c.strip() for c in _cells(lines[header_at])]
    key_at, date_at = header.index("participant_key"), header.index("withdrawal_date")
    mine = []
    for i in range(header_at + 1, len(lines)):
        if lines[i].strip() and _cells(lines[i])[key_at].strip() == participant_key:
            mine.append(i)
    if not mine and participant_key not in known:
        registered = {fold_key(k): k for k in known}
        near = registered.get(fold_key(participant_key))
        hint = f" (did you mean {near!r}?)" if near else ""
        raise WithdrawalError(
            f"{consent_csv}: no participant {participant_key!r} in the consent or participants "
            f"registry{hint}; check the key (it is the private collection key, not the user_id)"
        )
    ending = lines[header_at][len(lines[header_at].rstrip("\r\n")) :] or "\n"
    for i in mine:
        cells = _cells(lines[i])
        current = cells[date_at].strip()
        if not current or current > date.isoformat():
            cells[date_at] = date.isoformat()
            end = lines[i][len(lines[i].rstrip("\r\n")) :]
            lines[i] = _line(cells, end)
    if not mine:
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += ending
        cells = [""] * len(header)
        cells[key_at], cells[date_at] = participant_key, date.isoformat()
        lines.append(_line(cells, ending))
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    backup = consent_csv.with_name(f"{consent_csv.name}.{stamp}.bak")
    shutil.copy2(consent_csv, backup)
    text = "".join(lines).encode("utf-8")
    atomic_write_bytes(consent_csv, (codecs.BOM_UTF8 if bom else b"") + text)
    return backup


def _cells(line: str) -> list[str]:
    """The cells of one registry line (the fail-closed reader accepted it as one record)."""
    return next(csv.reader([line.rstrip("\r\n")]))


def _line(cells: list[str], ending: str) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator=ending).writerow(cells)
    return buffer.getvalue()


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
    # ParquetFile, one thread, no pre-buffering: pyarrow's dataset reader (what read_table
    # uses) leaves IO threads behind on a Python file object that can abort the
    # interpreter at exit ("terminate called without an active exception").
    table = pq.ParquetFile(source, pre_buffer=False).read(columns=["user_id"], use_threads=False)
    column = table.column("user_id").to_pylist()
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
    from redvox.sources.registry import read_registries

    from .push import resolve_token

    # Everything the withdrawal needs is read before the registry changes: the registries
    # through the build's fail-closed reader, the pseudonym key, the declared versions.
    config = InputConfig.load(config_file)
    registries = read_registries(config.participants, config.consent)
    problem = registries.first_fatal()
    if problem is not None:
        raise WithdrawalError(
            f"{problem}; the withdrawal was not recorded and the registries are unchanged: "
            "fix that row first"
        )
    known = {p.participant_key for p in registries.participants.records}
    user_id = pseudonymize(load_pseudonym_key(config.pseudonym_key_file), participant_key)
    latest = get_version()
    backup = record_withdrawal(config.consent, participant_key, date, known)
    echo(
        f"recorded the withdrawal of {participant_key} on {date} in {config.consent} (backup: {backup.name})"
    )

    new = withdrawal_version(latest)
    echo(f"building {new.tag} (the configuration of {latest.tag}) into {out}")
    build_version(
        new,
        InputConfig.load(config_file),
        BuildOptions(out=Path(out), cache_dir=cache_dir, workers=workers, progress=False),
    )

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

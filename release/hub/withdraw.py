"""A participant withdraws: record it, build the next MAJOR version without them,
and say where their recordings still are.

Versions are code (builder/versions.py), so this cannot declare the new
version itself: it builds it under the new version string from the latest
declared configuration, and prints the declaration to paste. The registry
is backed up (timestamped copy beside it) before it is changed, and changed only
after everything the withdrawal needs has been read (the registries through the
build's fail-closed reader first), atomically: a refusal leaves it byte-identical.
Only the bytes of the participant's withdrawal_date cells change; the new content
is read back through the same reader before it is written, and the registry's mode,
owner and group are kept (`record_withdrawal`).
"""

from __future__ import annotations

import codecs
import contextlib
import datetime as dt
import io
import itertools
import os
import pprint
import stat
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from redvox.builder.versions import DatasetVersion, get_version
from redvox.schemas import InputConfig
from redvox.schemas.errors import UserError
from redvox.schemas.layout import is_shard_file, shard_paths

if TYPE_CHECKING:
    from redvox.schemas import ConsentRecord
    from redvox.sources.problems import Problem

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
    when they have none), after a backup copy. Returns the backup.

    The registry is first read whole through the build's fail-closed reader: a row it
    would refuse stops the withdrawal, naming the line, before anything is written.
    Lines are split and cells found exactly as that reader does, and only the bytes of
    the participant's withdrawal_date cells change. The new content is then read back
    with the same reader: unless it reads as the old registry with only this
    withdrawal added, nothing is written. The backup and the new file keep the
    registry's mode (and its owner and group where the user may set them), and the
    new file replaces the old one atomically: a failure leaves the registry as it was.
    """
    from redvox.sources.registry import read_consent

    consent_csv = Path(consent_csv)
    before = read_consent(consent_csv)
    problem = next((p for p in before.problems if p.fatal), None)
    if problem is not None:
        raise WithdrawalError(f"{problem}; {_UNCHANGED.format(consent_csv.name)}: {_fix(problem)}")
    target = Path(os.path.realpath(consent_csv))  # a link keeps pointing at the registry
    data = target.read_bytes()
    new, changed, added = _with_withdrawal(consent_csv, data, participant_key, date, known)
    _check_reads_back(consent_csv, before.records, new, participant_key, date, changed, added)
    info = target.stat()
    backup = _backup(target, data, info)
    if new != data:
        try:
            _replace(target, new, info)
        except OSError as exc:
            raise WithdrawalError(
                f"{consent_csv}: cannot be replaced ({exc.strerror}); "
                f"{_UNCHANGED.format(consent_csv.name)} (backup: {backup.name})"
            ) from None
    return backup


_UNCHANGED = "the withdrawal was not recorded and {} is unchanged"


def _fix(problem: Problem) -> str:
    return "fix that row first" if problem.row is not None else "fix that first"


def _with_withdrawal(
    consent_csv: Path, data: bytes, participant_key: str, date: dt.date, known: set[str]
) -> tuple[bytes, list[int], bool]:
    """The registry's bytes with the withdrawal, the lines changed, and whether a row was
    added. `data` was read by the fail-closed reader without a problem."""
    from redvox.sources.registry import fold_key, key_problem, parse_date
    from redvox.sources.tables import cell_text, collapse_whitespace, split_csv_line

    bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
    # The reader's physical lines: LF, CRLF or CR end a line, nothing else does (unlike
    # str.splitlines, which also splits at \x1c, \x85, U+2028 and others).
    lines = io.StringIO(data[len(bom) :].decode("utf-8"), newline="").readlines()
    rows = []  # (index into lines, cells) of each non-blank line, the header first
    for i, line in enumerate(lines):
        cells, error = split_csv_line(_content(line))
        if error is not None or any(c.strip() for c in cells):
            rows.append((i, cells))
    (_, header), records = rows[0], rows[1:]
    names = [collapse_whitespace(c) for c in header]
    key_at, date_at = names.index("participant_key"), names.index("withdrawal_date")
    mine = [
        (i, cells)
        for i, cells in records
        if cell_text(cells[key_at], literal=True) == participant_key
    ]
    if not mine and participant_key not in known:
        registered = {fold_key(k): k for k in known}
        near = registered.get(fold_key(participant_key))
        hint = f" (did you mean {near!r}?)" if near else ""
        raise WithdrawalError(
            f"{consent_csv}: no participant {participant_key!r} in the consent or participants "
            f"registry{hint}; check the key (it is the private collection key, not the user_id)"
        )
    changed = []
    for i, cells in mine:
        current = parse_date(cell_text(cells[date_at], literal=True))
        if current is None or current > date:
            content = _content(lines[i])
            lines[i] = _set_cell(content, date_at, date.isoformat()) + lines[i][len(content) :]
            changed.append(i + 1)
    if not mine:
        problem = key_problem(participant_key)
        if problem is not None:  # a registered key never has one: defence in depth
            raise WithdrawalError(
                f"{consent_csv}: {problem}; {_UNCHANGED.format(consent_csv.name)}"
            )
        header_line = lines[rows[0][0]]
        ending = header_line[len(_content(header_line)) :] or "\n"
        if not lines[-1].endswith(("\n", "\r")):
            lines[-1] += ending
        cells = [""] * len(header)
        cells[key_at], cells[date_at] = participant_key, date.isoformat()
        lines.append(",".join(cells) + ending)
    return bom + "".join(lines).encode("utf-8"), changed, not mine


def _content(line: str) -> str:
    """A physical line without its line end."""
    return line.rstrip("\r\n")


def _set_cell(line: str, index: int, value: str) -> str:
    """`line` (one CSV record the reader accepted) with the text of its cell `index`
    replaced by `value`, every other character kept: a comma separates two cells where
    the reader's own splitter finds the line before it well-formed."""
    from redvox.sources.tables import split_csv_line

    commas = [n for n, c in enumerate(line) if c == "," and split_csv_line(line[:n])[1] is None]
    bounds = [-1, *commas, len(line)]
    return line[: bounds[index] + 1] + value + line[bounds[index + 1] :]


def _check_reads_back(
    consent_csv: Path,
    records: list[ConsentRecord],
    new: bytes,
    participant_key: str,
    date: dt.date,
    changed: list[int],
    added: bool,
) -> None:
    """Refuse unless `new`, read by the build's reader, is `records` with the withdrawal
    date set on the participant's rows that had none or a later one (and their row
    added when they had none), every other row reading exactly as before."""
    from redvox.schemas import ConsentRecord
    from redvox.sources.registry import read_consent

    expected = [
        r.model_copy(update={"withdrawal_date": date})
        if r.participant_key == participant_key
        and (r.withdrawal_date is None or r.withdrawal_date > date)
        else r
        for r in records
    ]
    if added:
        expected.append(
            ConsentRecord(
                participant_key=participant_key,
                participation_consent=None,
                public_release_consent=None,
                withdrawal_date=date,
            )
        )
    with tempfile.TemporaryDirectory(prefix="redvox-withdraw-") as folder:
        path = Path(folder) / consent_csv.name
        _write_new(path, new)
        after = read_consent(path)
    problem = next((p for p in after.problems if p.fatal), None)
    where, why = None, None
    if problem is not None:
        where, why = problem.row, f"the build's reader would refuse it: {problem.message}"
    elif after.records != expected:
        index = next(
            (n for n, (a, b) in enumerate(zip(after.records, expected, strict=False)) if a != b),
            min(len(after.records), len(expected)),
        )
        where, why = _record_line(new, index), "a row would read otherwise than intended"
    if why is None:
        return
    line = f":{where}" if where else ""
    changes = ", ".join(map(str, changed)) or "none"
    raise WithdrawalError(
        f"{consent_csv}{line}: the registry with the withdrawal of {participant_key!r} would "
        f"not read back as written ({why}; lines changed: {changes}"
        f"{', a row added' if added else ''}); {_UNCHANGED.format(consent_csv.name)}: "
        f"record the withdrawal by hand and run `redvox sources check`"
    )


def _record_line(data: bytes, index: int) -> int | None:
    """The line number of the `index`-th row (0: the first after the header) of a CSV
    registry, None past its end."""
    from redvox.sources.tables import split_csv_line

    text = data.decode("utf-8-sig", errors="replace")
    lines = io.StringIO(text, newline="").readlines()
    numbers = [
        n
        for n, line in enumerate(lines, 1)
        if (split := split_csv_line(_content(line)))[1] is not None
        or any(c.strip() for c in split[0])
    ]
    return numbers[index + 1] if index + 1 < len(numbers) else None


def _write_new(path: Path, data: bytes) -> None:
    """Write a new private file (mode 0600 whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _backup(path: Path, data: bytes, info: os.stat_result) -> Path:
    """A timestamped copy of `data` beside `path`, with `path`'s mode, owner and group
    (never readable by more people than the registry, not even for an instant)."""
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    for n in itertools.count():
        backup = path.with_name(f"{path.name}.{stamp}{f'.{n}' if n else ''}.bak")
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # two withdrawals in one second: keep both backups
            continue
        except OSError as exc:
            raise WithdrawalError(
                f"{backup}: the backup cannot be written ({exc.strerror}); "
                f"{_UNCHANGED.format(path.name)}"
            ) from None
        break
    try:
        _write_private(fd, data, info)
    except BaseException:
        backup.unlink(missing_ok=True)
        raise
    return backup


def _replace(path: Path, data: bytes, info: os.stat_result) -> None:
    """Replace `path` by `data` atomically; the new file has `info`'s mode (and owner and
    group where possible) before it holds a byte: a private registry never becomes
    readable by others, whatever the umask."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        _write_private(fd, data, info)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def _write_private(fd: int, data: bytes, info: os.stat_result) -> None:
    """Give the open file `fd` the registry's owner and mode first, then `data`, synced."""
    with os.fdopen(fd, "wb") as handle:
        _keep_owner_and_mode(handle.fileno(), info)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _keep_owner_and_mode(fd: int, info: os.stat_result) -> None:
    """Give the open file `fd` the owner, group and permission bits of `info`. Without
    the right to set the owner, the group is kept if the user is in it; a group that
    cannot be kept gets no permissions (they were meant for another group)."""
    try:
        os.fchown(fd, info.st_uid, info.st_gid)
    except PermissionError:
        with contextlib.suppress(PermissionError):
            os.fchown(fd, -1, info.st_gid)
    mode = stat.S_IMODE(info.st_mode)
    if os.fstat(fd).st_gid != info.st_gid:
        mode &= ~stat.S_IRWXG
    os.fchmod(fd, mode)


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
    """The date of `--date`: YYYY-MM-DD exactly (as the registry stores it), today without."""
    from redvox.sources.registry import parse_date

    if not value:
        return dt.date.today()
    try:
        return parse_date(value)
    except ValueError:
        raise WithdrawalError(
            f"withdrawal date {value!r}: write it YYYY-MM-DD, e.g. 2026-03-15"
        ) from None


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
            f"{_fix(problem)}"
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

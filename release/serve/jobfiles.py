"""The per-row files of one job, all in its 0700 work folder and deleted when it ends:
`input/` what one sandboxed run reads (the rows of one partition of the full build,
`partitions`, reduced to the columns `infer` sends or files by, clip names blanked: no
user_id, transcript, demographics or entry_key), `output/` what infer wrote inside that
run's sandbox (untrusted: the model shares that sandbox), both rewritten for each run,
and `run/outputs/` the rows the judge reads, rebuilt outside from the build itself with
the model's answer (cut to a length cap) the only thing taken from the sandbox.
`remove_tree` deletes what a model left, whatever modes it gave its files."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from redvox.release.evaluation.redvox_eval.infer import output_path
from redvox.schemas import layout

from .sandbox import MAX_ANSWER_BYTES

# What infer reads of a row: its key (lang, ID), the filter columns, and the request.
INPUT_COLUMNS = ("ID", "lang", "modality", "audio_type", "vulnerability_type", "user_text",
                 "audio")  # fmt: skip
NAME = "model"  # infer's --name: the output files are <lang>/model.jsonl
MAX_LINE = 1024 * 1024  # one answer line of infer (an answer plus the row's small columns)
MAX_OUTPUT = 256 * 1024 * 1024  # all of output/; more and the job fails
MAX_ENTRIES = 1000  # files and folders in output/

Key = tuple[str, str]  # infer's key of a row: (lang, ID)


class OutputRejected(Exception):
    """What the sandbox wrote is not infer's answers for exactly the exported rows."""


def private_dir(path: Path) -> Path:
    """PATH as a 0700 folder, each folder created on the way there 0700 too."""
    for folder in reversed([p for p in (path, *path.parents) if not p.exists()]):
        folder.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
    return path


def row_key(row: dict) -> Key:
    return str(row["lang"]), str(row["ID"])


@dataclass(frozen=True)
class Partition:
    """The rows one sandboxed run of a job is given: NAME for the maintainers' log (never
    a user_id), KEYS the rows (lang, ID)."""

    name: str
    keys: frozenset[Key]


def partitions(rows: dict[Key, dict], public_keys: set[str]) -> list[Partition]:
    """The runs of a job (README, "The sandbox"): the public rows first, then the rows of
    each withheld speaker (user_id) alone, then the withheld rows without a speaker
    together. A run's answers can depend only on its own rows, so a public answer on
    nothing withheld and a withheld speaker's answers on nobody else's clips."""
    public: set[Key] = set()
    speakers: dict[str | None, set[Key]] = {}
    for key, row in rows.items():
        if row.get("entry_key") in public_keys:
            public.add(key)
        else:
            speakers.setdefault(row.get("user_id") or None, set()).add(key)
    runs = [Partition("public rows", frozenset(public))] if public else []
    named = sorted(s for s in speakers if s is not None)
    for number, speaker in enumerate(named, 1):
        runs.append(Partition(f"withheld speaker {number} of {len(named)}",
                              frozenset(speakers[speaker])))  # fmt: skip
    if None in speakers:
        runs.append(Partition("withheld rows without a speaker", frozenset(speakers[None])))
    return runs


def export_input(full: Path, dest: Path, keys: frozenset[Key] | set[Key] | None = None) -> int:
    """Writes the INPUT_COLUMNS of the full build's rows (only those of KEYS when given)
    under DEST/data/<lang>/ (0700 folders, 0600 files; a shard without a row of KEYS is
    left out), a batch at a time; the number of rows."""
    rows = 0
    for shard in layout.shard_paths(full):
        source = pq.ParquetFile(shard)
        if keys is not None:
            ids = source.read(columns=["lang", "ID"]).to_pylist()
            if not any(row_key(r) in keys for r in ids):
                continue
        target = private_dir(dest / "data" / shard.parent.name) / shard.name
        schema = source.schema_arrow
        columns = [c for c in INPUT_COLUMNS if c in schema.names]
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with (
            os.fdopen(fd, "wb") as handle,
            pq.ParquetWriter(handle, _select(schema, columns)) as writer,
        ):
            for batch in source.iter_batches(batch_size=32, columns=columns):
                if keys is not None:
                    langs, ids = batch.column("lang").to_pylist(), batch.column("ID").to_pylist()
                    mask = [(str(lang), str(i)) in keys for lang, i in zip(langs, ids, strict=True)]
                    batch = batch.filter(pa.array(mask, pa.bool_()))
                    if not batch.num_rows:
                        continue
                writer.write_batch(without_audio_names(batch))
                rows += batch.num_rows
    return rows


RUN_BATCH = 32  # rows per row group of a run's input: sizes that depend on its rows alone


def export_run_input(full: Path, dest: Path, keys: frozenset[Key] | set[Key]) -> dict[Key, Key]:
    """Writes the INPUT_COLUMNS of the rows of KEYS under DEST/data/<lang>/ as one file a
    language, in row groups of RUN_BATCH, with each row's ID renumbered 0, 1, ... in the
    build's order: nothing in a run's input (IDs, file names, row-group sizes) says where
    the rows of other runs sit in the full build. Returns the run's (lang, ID) -> the
    build's."""
    mapping: dict[Key, Key] = {}
    by_lang: dict[str, list[Path]] = {}
    for shard in layout.shard_paths(full):
        by_lang.setdefault(shard.parent.name, []).append(shard)
    for lang, shards in by_lang.items():
        writer = handle = None
        pending: list[pa.RecordBatch] = []
        count = 0  # rows of this language written so far: the next renumbered ID
        try:
            for shard in shards:
                source = pq.ParquetFile(shard)
                columns = [c for c in INPUT_COLUMNS if c in source.schema_arrow.names]
                for batch in source.iter_batches(batch_size=RUN_BATCH, columns=columns):
                    ids = batch.column("ID").to_pylist()
                    langs = batch.column("lang").to_pylist()
                    mask = [(str(g), str(i)) in keys for g, i in zip(langs, ids, strict=True)]
                    batch = batch.filter(pa.array(mask, pa.bool_()))
                    if not batch.num_rows:
                        continue
                    if writer is None:
                        target = layout.shard_path(dest, lang)
                        private_dir(target.parent)
                        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                        handle = os.fdopen(fd, "wb")
                        writer = pq.ParquetWriter(handle, batch.schema)
                    renumbered = pa.array(range(count, count + batch.num_rows), pa.int64())
                    count += batch.num_rows
                    for new, old in zip(renumbered.to_pylist(), batch.column("ID").to_pylist(),
                                        strict=True):  # fmt: skip
                        mapping[(lang, str(new))] = (lang, str(old))
                    at = batch.schema.get_field_index("ID")
                    batch = batch.set_column(at, batch.schema.field(at), renumbered)
                    pending.append(without_audio_names(batch))
                    while sum(b.num_rows for b in pending) >= RUN_BATCH:
                        table = pa.Table.from_batches(pending).combine_chunks()
                        writer.write_table(table.slice(0, RUN_BATCH), row_group_size=RUN_BATCH)
                        rest = table.slice(RUN_BATCH)
                        pending = rest.to_batches() if rest.num_rows else []
            if writer is not None and pending:
                writer.write_table(pa.Table.from_batches(pending), row_group_size=RUN_BATCH)
        finally:
            if writer is not None:
                writer.close()
            if handle is not None:
                handle.close()
    return mapping


def _select(schema: pa.Schema, columns: list[str]) -> pa.Schema:
    return pa.schema([schema.field(name) for name in columns])


def without_audio_names(batch: pa.RecordBatch) -> pa.RecordBatch:
    """BATCH with `audio.path` null: the builder names each clip after its entry key,
    which holds the speaker's user_id; infer sends the bytes only."""
    index = batch.schema.get_field_index("audio")
    audio = batch.column(index)
    paths = audio.type.get_field_index("path")
    children = [
        pa.nulls(len(audio), audio.type.field(i).type) if i == paths else audio.field(i)
        for i in range(audio.type.num_fields)
    ]
    blank = pa.StructArray.from_arrays(children, fields=list(audio.type), mask=audio.is_null())
    return batch.set_column(index, batch.schema.field(index), blank)


def output_size(folder: Path) -> tuple[int, int]:
    """(bytes, entries) under FOLDER, stopping once either is over its limit;
    OutputRejected when a folder there cannot be read (a model that took the rights off
    one hides what it holds)."""
    size = entries = 0
    stack = [folder]
    while stack and size <= MAX_OUTPUT and entries <= MAX_ENTRIES:
        current = stack.pop()
        try:
            with os.scandir(current) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        else:
                            size += entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:  # deleted while listed
                        continue
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise OutputRejected(f"{current}: unreadable ({exc.strerror})") from None
    return size, entries


def remove_tree(path: Path, attempts: int = 3) -> list[str]:
    """Deletes PATH and everything under it whatever modes a model left there: the
    service owns every file of a job (the sandbox's uid maps to its own), so it gives each
    folder back its owner's rights before listing and emptying it, and tries ATTEMPTS
    times. What is still there, one line each (empty when all is gone). Symbolic links
    are removed, never followed."""
    problems: list[str] = []
    for _ in range(attempts):
        if not os.path.lexists(path):
            return []
        problems = _remove_once(str(path))
    if os.path.lexists(path):
        return problems or [f"{path}: still there"]
    return []


def _remove_once(root: str) -> list[str]:
    problems: list[str] = []
    stack = [(root, False)]
    while stack:
        path, emptied = stack.pop()
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode):
                os.unlink(path)
                continue
            if emptied:
                os.rmdir(path)
                continue
            mode = stat.S_IMODE(info.st_mode)
            if mode & 0o700 != 0o700:
                os.chmod(path, mode | 0o700)  # lstat said a folder: not a link
            with os.scandir(path) as listing:
                children = [entry.path for entry in listing]
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
            continue
        stack.append((path, True))
        stack.extend((child, False) for child in children)
    return problems


def build_rows(full: Path) -> dict[tuple[str, str], dict]:
    """Every full-build row without its audio, by infer's key (lang, ID)."""
    rows: dict[tuple[str, str], dict] = {}
    for shard in layout.shard_paths(full):
        names = [n for n in pq.ParquetFile(shard).schema_arrow.names if n != "audio"]
        for row in pq.read_table(shard, columns=names).to_pylist():
            rows[(str(row["lang"]), str(row["ID"]))] = row
    return rows


def _answers(path: Path, expected, seen: set) -> dict[Key, str]:
    answers = {}
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
        number = 0
        while line := handle.readline(MAX_LINE + 1):
            number += 1
            if len(line) > MAX_LINE:
                raise OutputRejected(f"{path}:{number}: a line over {MAX_LINE} bytes")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise OutputRejected(f"{path}:{number}: not a JSON line") from None
            if not isinstance(record, dict):
                raise OutputRejected(f"{path}:{number}: not a JSON object")
            key = (str(record.get("lang")), str(record.get("ID")))
            if key not in expected or key in seen or key[0] != path.parent.name:
                raise OutputRejected(f"{path}:{number}: row {key} not asked, or twice")
            if not isinstance(record.get("output"), str) or record.get("error") is not None:
                raise OutputRejected(f"{path}:{number}: no answer")
            seen.add(key)
            answers[key] = record["output"]
    return answers


def answer_files(output: Path) -> list[tuple[str, Path]]:
    """(lang, OUTPUT/<lang>/model.jsonl) for each language folder; anything else there (a
    symlink, another file, a deeper folder) is refused, never followed."""
    found = []
    with os.scandir(output) as folders:
        for folder in sorted(folders, key=lambda e: e.name):
            if not folder.is_dir(follow_symlinks=False):
                raise OutputRejected(f"{folder.path}: not a language folder of infer")
            with os.scandir(folder.path) as files:
                for entry in files:
                    if entry.name != f"{NAME}.jsonl" or not entry.is_file(follow_symlinks=False):
                        raise OutputRejected(f"{entry.path}: not an output file of infer")
                    found.append((folder.name, Path(entry.path)))
    return found


@dataclass
class Answers:
    """The answers of one run, by row; how many were cut to the cap, the longest seen."""

    by_key: dict[Key, str]
    cut: int = 0
    longest: int = 0


def cut_answer(answer: str, max_bytes: int) -> str:
    """ANSWER as valid UTF-8 (a lone surrogate becomes '?'), at most MAX_BYTES of it, cut
    at a character boundary."""
    data = answer.encode("utf-8", "replace")
    return data[:max_bytes].decode("utf-8", "ignore")


def read_answers(output: Path, expected: frozenset[Key] | set[Key],
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> Answers:  # fmt: skip
    """The answers under OUTPUT, which must be one <lang>/model.jsonl per language with one
    answer for each row of EXPECTED (the rows that run was given) and no other: an answer
    for a row of another run, or a row left unanswered, is refused. Each answer is cut to
    MAX_ANSWER_BYTES."""
    seen: set[Key] = set()
    answers = Answers({})
    try:
        for _, path in answer_files(output):
            answers.by_key.update(_answers(path, expected, seen))
    except OSError as exc:
        raise OutputRejected(f"{exc.filename or output}: unreadable ({exc.strerror})") from None
    if seen != set(expected):
        raise OutputRejected(f"{len(set(expected) - seen)} rows without an answer")
    for key, answer in answers.by_key.items():
        size = len(answer.encode("utf-8", "replace"))
        answers.longest = max(answers.longest, size)
        kept = cut_answer(answer, max_answer_bytes)
        answers.cut += size > max_answer_bytes
        answers.by_key[key] = kept
    return answers


def write_judged_input(answers: dict[Key, str], rows: dict[Key, dict], dest: Path,
                       public_keys: set[str], private_text: bool) -> int:  # fmt: skip
    """Adds to infer's output files under DEST (the judge's input) the build's own ROWS
    with the ANSWERS given on them. A withheld row loses its transcript unless
    PRIVATE_TEXT (the judge then reads the item's public prompt_text instead)."""
    by_lang: dict[str, list[Key]] = {}
    for key in answers:
        by_lang.setdefault(key[0], []).append(key)
    for lang, keys in by_lang.items():
        target = output_path(dest, lang, NAME, False)
        private_dir(target.parent)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for key in keys:
                row = dict(rows[key])
                if not private_text and row.get("entry_key") not in public_keys:
                    row["transcript"] = None
                row.update(output=answers[key], model=NAME, meta={"text_only": False})
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(answers)


def collect(output: Path, full: Path, dest: Path, public_keys: set[str],
            private_text: bool, max_answer_bytes: int = MAX_ANSWER_BYTES) -> int:  # fmt: skip
    """Rebuilds infer's output files under DEST from the build's own rows and the answers
    found under OUTPUT for every row of the full build (read_answers, write_judged_input)."""
    rows = build_rows(full)
    answers = read_answers(output, set(rows), max_answer_bytes)
    return write_judged_input(answers.by_key, rows, dest, public_keys, private_text)

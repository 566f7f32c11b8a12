"""The per-row files of one job, all in its 0700 work folder and deleted when it ends:
`input/` what the sandbox reads (the full build's rows reduced to the columns `infer`
sends or files by, clip names blanked: no user_id, transcript, demographics or entry_key), `output/` what
infer wrote inside the sandbox (untrusted: the model shares that sandbox), and
`run/outputs/` the rows the judge reads, rebuilt outside from the build itself with the
model's answer the only thing taken from the sandbox."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from redvox.release.evaluation.redvox_eval.infer import output_path
from redvox.schemas import layout

# What infer reads of a row: its key (lang, ID), the filter columns, and the request.
INPUT_COLUMNS = ("ID", "lang", "modality", "audio_type", "vulnerability_type", "user_text",
                 "audio")  # fmt: skip
NAME = "model"  # infer's --name: the output files are <lang>/model.jsonl
MAX_LINE = 1024 * 1024  # one answer line of infer (an answer plus the row's small columns)
MAX_OUTPUT = 256 * 1024 * 1024  # all of output/; more and the job fails
MAX_ENTRIES = 1000  # files and folders in output/


class OutputRejected(Exception):
    """What the sandbox wrote is not infer's answers for exactly the exported rows."""


def private_dir(path: Path) -> Path:
    """PATH as a 0700 folder, each folder created on the way there 0700 too."""
    for folder in reversed([p for p in (path, *path.parents) if not p.exists()]):
        folder.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
    return path


def export_input(full: Path, dest: Path) -> int:
    """Writes the INPUT_COLUMNS of every full-build shard under DEST/data/<lang>/ (0700
    folders, 0600 files), a batch at a time; the number of rows."""
    rows = 0
    for shard in layout.shard_paths(full):
        target = private_dir(dest / "data" / shard.parent.name) / shard.name
        source = pq.ParquetFile(shard)
        schema = source.schema_arrow
        columns = [c for c in INPUT_COLUMNS if c in schema.names]
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with (
            os.fdopen(fd, "wb") as handle,
            pq.ParquetWriter(handle, _select(schema, columns)) as writer,
        ):
            for batch in source.iter_batches(batch_size=32, columns=columns):
                writer.write_batch(without_audio_names(batch))
                rows += batch.num_rows
    return rows


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
    """(bytes, entries) under FOLDER, stopping once either is over its limit."""
    size = entries = 0
    stack = [folder]
    while stack and size <= MAX_OUTPUT and entries <= MAX_ENTRIES:
        with os.scandir(stack.pop()) as listing:
            for entry in listing:
                entries += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    size += entry.stat(follow_symlinks=False).st_size
    return size, entries


def build_rows(full: Path) -> dict[tuple[str, str], dict]:
    """Every full-build row without its audio, by infer's key (lang, ID)."""
    rows: dict[tuple[str, str], dict] = {}
    for shard in layout.shard_paths(full):
        names = [n for n in pq.ParquetFile(shard).schema_arrow.names if n != "audio"]
        for row in pq.read_table(shard, columns=names).to_pylist():
            rows[(str(row["lang"]), str(row["ID"]))] = row
    return rows


def _answers(path: Path, expected: dict, seen: set) -> dict[tuple[str, str], str]:
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


def collect(output: Path, full: Path, dest: Path, public_keys: set[str],
            private_text: bool) -> int:  # fmt: skip
    """Rebuilds infer's output files under DEST (the judge's input) from the build's own
    rows and the answers found under OUTPUT, which must be one <lang>/model.jsonl per
    language with one answer for each exported row. A withheld row loses its transcript
    unless PRIVATE_TEXT (the judge then reads the item's public prompt_text instead)."""
    expected = build_rows(full)
    seen: set[tuple[str, str]] = set()
    by_lang: dict[str, dict[tuple[str, str], str]] = {}
    for lang, path in answer_files(output):
        by_lang[lang] = _answers(path, expected, seen)
    if seen != set(expected):
        raise OutputRejected(f"{len(set(expected) - seen)} rows without an answer")
    for lang, answers in by_lang.items():
        target = output_path(dest, lang, NAME, False)
        private_dir(target.parent)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for key, answer in answers.items():
                row = dict(expected[key])
                if not private_text and row.get("entry_key") not in public_keys:
                    row["transcript"] = None
                row.update(output=answer, model=NAME, meta={"text_only": False})
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(seen)

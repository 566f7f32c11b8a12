"""Find and read model-output files: JSONL, one release row plus `output` per line.

Layouts that work: one file per model (`<model>.jsonl`), judged copies beside it
(`<model>.<judge tag>.jsonl`), and folders searched recursively such as
`outputs/<lang>/<model>.<judge tag>.jsonl`. Files under a folder named `text-only`
are text-only runs, reported apart from the speech/audio results.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import EvaluationError
from .labels import per_unique

TEXT_ONLY_DIR = "text-only"
# What reporting needs of every row; the demographics may be missing (reported as such).
REPORT_COLUMNS: tuple[str, ...] = (
    "ID", "original_id", "user_id", "lang", "vulnerability_type", "audio_type", "modality",
)  # fmt: skip
# Identifiers kept as strings: `original_id` is a number in some files, a string in others.
KEY_COLUMNS: tuple[str, ...] = ("ID", "original_id", "user_id")


@dataclass(frozen=True)
class OutputFile:
    path: Path
    model: str  # from the file name; a row's `model` field wins over it
    text_only: bool
    relative: Path  # where it sits under the folder it was found in


def model_from_name(name: str, judge_tag: str | None) -> str | None:
    """`gemini-3.1-flash-lite.gpt5-5.jsonl` with tag `gpt5-5` -> `gemini-3.1-flash-lite`.

    None when the name does not carry the tag (the file is not one of that judge's).
    """
    suffix = f".{judge_tag}.jsonl" if judge_tag else ".jsonl"
    if not name.endswith(suffix) or len(name) == len(suffix):
        return None
    return name[: -len(suffix)]


def find_output_files(
    paths: Sequence[str | Path], judge_tag: str | None = None, skip_tag: str | None = None
) -> list[OutputFile]:
    """Every `*.jsonl` named or found under PATHS; with `judge_tag` only `*.TAG.jsonl`.

    `skip_tag` leaves out files already judged with that tag (the judge's own outputs).
    """
    found: list[OutputFile] = []
    seen: set[Path] = set()
    for raw in paths:
        root = Path(raw)
        if root.is_dir():
            candidates = sorted(root.rglob("*.jsonl"))
            base = root
        elif root.is_file():
            candidates, base = [root], root.parent
        else:
            raise EvaluationError(f"{root}: no such file or folder of model outputs")
        for path in candidates:
            model = model_from_name(path.name, judge_tag)
            if model is None or (skip_tag and path.name.endswith(f".{skip_tag}.jsonl")):
                if root.is_file():
                    raise EvaluationError(
                        f"{path}: not a '*.{judge_tag}.jsonl' file; pass the judged copy "
                        f"or drop --judge-tag"
                    )
                continue
            if path.resolve() in seen:  # named twice, e.g. a folder and a file inside it
                continue
            seen.add(path.resolve())
            found.append(OutputFile(path, model, is_text_only(path, root), path.relative_to(base)))
    if not found:
        wanted = f"*.{judge_tag}.jsonl" if judge_tag else "*.jsonl"
        raise EvaluationError(f"no {wanted} files under {', '.join(map(str, paths))}")
    return found


def judge_tag_of(path: Path) -> str | None:
    """The tag of a file `judge` wrote, `<model>.<tag>.jsonl`, known from its rows (they
    carry `judge_model`) and its name (the tag is its last dotted part); None otherwise."""
    stem = path.name[: -len(".jsonl")]
    if "." not in stem:
        return None
    if not any(isinstance(row.get("judge_model"), str) for _, row in read_jsonl(path)):
        return None
    return stem.rsplit(".", 1)[1] or None


def find_judged_files(paths: Sequence[str | Path]) -> list[OutputFile]:
    """The files under PATHS that `judge` wrote, read without being told the judge's tag,
    each file's model its name less `.<tag>.jsonl`. Other JSONL files beside them (the
    unjudged outputs judge read) are left out; where no file is a judge's, all are read
    as they are. Files of several judges are an error: which one is meant?"""
    found = find_output_files(paths)
    judged = {}
    for file in found:
        tag = judge_tag_of(file.path)
        if tag is not None:
            model = file.path.name[: -len(f".{tag}.jsonl")]
            judged[file.path] = (tag, dataclasses.replace(file, model=model))
    if not judged:
        return found
    tags = sorted({tag for tag, _ in judged.values()})
    if len(tags) > 1:
        raise EvaluationError(
            f"{', '.join(map(str, paths))}: judged copies of {len(tags)} judges (tags "
            f"{', '.join(tags)}); pass --judge-tag TAG to pick one"
        )
    return [file for _, file in judged.values()]


def is_text_only(path: Path, root: Path) -> bool:
    """Whether PATH, found under ROOT (the folder or file the user named), is a text-only run.

    Only folders below ROOT count, and for a named file the folders as the user wrote them:
    a `text-only` folder higher up the absolute path (e.g. a project kept under one) says
    nothing about the run.
    """
    where = path.parent if root == path else path.relative_to(root).parent
    return TEXT_ONLY_DIR in where.parts


def read_jsonl(path: Path) -> Iterable[tuple[int, dict]]:
    """(line number, object) per non-blank line; a broken line stops with its location."""
    try:
        # split on "\n" only: str.splitlines would also cut at U+2028 inside JSON strings
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise EvaluationError(f"{path}: not UTF-8 text ({exc.reason}); save it as UTF-8") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvaluationError(
                f"{path}:{number}: not valid JSON ({exc.msg}); each line must be one JSON object"
            ) from None
        if not isinstance(record, dict):
            raise EvaluationError(
                f"{path}:{number}: expected a JSON object, found {type(record).__name__}"
            )
        yield number, record


def read_output_files(files: Sequence[OutputFile]) -> pd.DataFrame:
    """All rows of FILES as one frame with `model`, `text_only`, `file` and `line` added.

    The model is the one in the file name (`<model>.jsonl`, judged `<model>.<tag>.jsonl`);
    a row's own `model` field wins. `report` and `validate` both read model outputs here.
    """
    records, lines, owners = [], [], []
    for k, file in enumerate(files):
        numbered = list(read_jsonl(file.path))
        if not numbered:
            raise EvaluationError(f"{file.path}: empty; expected one JSON object per line")
        records += [record for _, record in numbered]
        lines += [number for number, _ in numbered]
        owners += [k] * len(numbered)
    frame = pd.DataFrame(records, dtype=object)
    owner = np.asarray(owners)
    frame["line"] = lines
    frame["file"] = np.array([str(f.path) for f in files], dtype=object)[owner]
    frame["text_only"] = np.array([f.text_only for f in files])[owner]
    from_name = pd.Series(
        np.array([f.model for f in files], dtype=object)[owner], index=frame.index
    )
    named = per_unique(frame["model"], str) if "model" in frame else None
    frame["model"] = from_name if named is None else named.fillna(from_name)
    return frame


# Columns read_output_files adds: not the user's, so never named as if they were in a file.
ADDED_COLUMNS: tuple[str, ...] = ("line", "file", "text_only")


def load_outputs(files: Sequence[OutputFile]) -> pd.DataFrame:
    """The rows of FILES (see read_output_files), checked for what reporting needs.

    A row seen twice (same model, run, lang and ID) is an error: it would be counted twice.
    """
    frame = read_output_files(files)
    check_required(frame, REPORT_COLUMNS)
    for column in KEY_COLUMNS:
        if column in frame:
            frame[column] = per_unique(frame[column], str)
    check_unique(frame)
    return frame


def check_required(frame: pd.DataFrame, required: Sequence[str]) -> None:
    for column in required:
        empty = frame[column].isna() | (frame[column] == "") if column in frame else None
        if empty is None or empty.any():
            first = frame.iloc[0] if empty is None else frame.loc[empty].iloc[0]
            lacking = len(frame) if empty is None else int(empty.sum())
            raise EvaluationError(
                f"{first['file']}:{first['line']}: field '{column}' missing or empty; every row "
                f"needs {', '.join(required)} (release columns: copy them from the dataset row; "
                f"{lacking} rows lack it)"
            )


def check_unique(frame: pd.DataFrame) -> None:
    keys = ["model", "text_only", "lang", "ID"]
    repeated = frame.duplicated(keys, keep=False)
    if repeated.any():
        twice = frame.loc[repeated].sort_values(keys).head(2)
        where = " and ".join(f"{r.file}:{r.line}" for r in twice.itertuples())
        first = twice.iloc[0]
        raise EvaluationError(
            f"row lang={first['lang']} ID={first['ID']} of model {first['model']!r} appears "
            f"twice ({where}); keep one copy per model (are a judged and an unjudged copy "
            f"both read? use --judge-tag)"
        )

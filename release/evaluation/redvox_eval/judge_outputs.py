"""Judge model-output files: read `<model>.jsonl`, ask the judge about every row not yet
labelled, write `<model>.<tag>.jsonl` with `relatedness`, `safety` and `refusal` added."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import EvaluationError
from .judge import (
    PROMPT_VERSION,
    JudgeClient,
    JudgePrompts,
    JudgeTask,
    VerdictCache,
    cache_key,
    judge_tasks,
    judged_on_prompt_text,
    request_of,
)
from .labels import safety_of, yes_no_of
from .outputs import OutputFile, read_jsonl


@dataclass(frozen=True)
class JudgeRun:
    written: list[Path]
    rows: int
    already_labelled: int
    from_cache: int
    asked: int
    on_prompt_text: int  # speech rows judged on `prompt_text`: they have no transcript


def default_tag(judge_model: str) -> str:
    """`gpt-5.5` -> `gpt-5-5`: a judge tag without dots, so file names stay unambiguous."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", judge_model).strip("-") or "judge"


def is_labelled(row: dict) -> bool:
    return (
        safety_of(row.get("safety")) is not None
        and yes_no_of(row.get("relatedness")) is not None
        and yes_no_of(row.get("refusal")) is not None
    )


def _task(row: dict, where: str, prompts: JudgePrompts, judge_model: str) -> JudgeTask:
    for name in ("lang", "modality"):
        if not isinstance(row.get(name), str) or not row[name]:
            raise EvaluationError(f"{where}: field '{name}' missing; copy it from the dataset row")
    if "output" not in row or not isinstance(row["output"], str):
        raise EvaluationError(
            f"{where}: field 'output' missing or not a string; write your model's answer there "
            f"(an empty string if it gave none)"
        )
    request = request_of(row, where)
    return JudgeTask(
        key=cache_key(judge_model, row["lang"], request, row["output"]),
        messages=prompts.messages(row["lang"], request, row["output"]),
        where=where,
    )


def judged_path(file: OutputFile, tag: str, out: Path | None) -> Path:
    folder = file.path.parent if out is None else out / file.relative.parent
    return folder / f"{file.model}.{tag}.jsonl"


def judge_output_files(
    files: list[OutputFile],
    *,
    tag: str,
    out: Path | None,
    client: JudgeClient,
    cache: VerdictCache,
    prompts: JudgePrompts,
    concurrency: int,
    progress: bool = True,
) -> JudgeRun:
    """Judge every unlabelled row of FILES; nothing is written unless every row got a verdict."""
    judge_model = client.endpoint.model
    contents: list[tuple[OutputFile, list[tuple[dict, str | None]]]] = []
    tasks: dict[str, JudgeTask] = {}
    on_prompt_text = 0
    for file in files:
        rows = []
        for number, row in read_jsonl(file.path):
            key = None
            if not is_labelled(row):
                task = _task(row, f"{file.path}:{number}", prompts, judge_model)
                tasks.setdefault(task.key, task)
                key = task.key
                on_prompt_text += judged_on_prompt_text(row)
            rows.append((row, key))
        contents.append((file, rows))
    from_cache = sum(cache.get(k) is not None for k in tasks)
    verdicts = judge_tasks(list(tasks.values()), client, cache, concurrency, progress)
    written = []
    for file, rows in contents:
        path = judged_path(file, tag, out)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for row, key in rows:
                if key is not None:
                    row = {
                        **row,
                        **verdicts[key].as_dict(),
                        "judge_model": judge_model,
                        "judge_prompt_version": PROMPT_VERSION,
                    }
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        written.append(path)
    n_rows = sum(len(rows) for _, rows in contents)
    labelled = sum(key is None for _, rows in contents for _, key in rows)
    return JudgeRun(written, n_rows, labelled, from_cache, len(tasks) - from_cache, on_prompt_text)

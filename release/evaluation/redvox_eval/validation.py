"""How far to trust the judge: its labels against human annotations, per task.

Human labels sit in `Relatedness`, `Safety/Fairness`, `Refusal`; judge labels in
`relatedness`, `safety`, `refusal`; either in one file or in two joined on (`lang`, `ID`,
`model`). The human file is TSV, CSV or JSONL. The judge side is a TSV or CSV table, or
the judge's own output, a `<model>.<tag>.jsonl` file or a folder of them, read as `judge`
wrote it: its rows carry `judge_model`, its name the tag, and the model is the name less
the tag (`--judge-tag` picks one judge's files where several judged the same outputs).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .agreement import agreement
from .errors import EvaluationError
from .labels import SAFE, SAFETY_LABELS, YES_NO, normalise_safety, normalise_yes_no
from .outputs import (
    ADDED_COLUMNS,
    find_judged_files,
    find_output_files,
    read_jsonl,
    read_output_files,
)
from .render import markdown_table

HUMAN = {"relatedness": "Relatedness", "safety": "Safety/Fairness", "refusal": "Refusal"}
JOIN_KEYS = ("lang", "ID", "model")
TASK_LABELS = {
    "relatedness": YES_NO,
    "refusal": YES_NO,
    "safety": SAFETY_LABELS,
    "safety_binary": ("safe", "not_safe"),
}
SCORES = ("accuracy", "macro_f1", "weighted_f1", "cohen_kappa", "gwet_ac1")


def read_table(path: Path) -> pd.DataFrame:
    """A TSV, CSV or JSONL file with every cell as text and the file line kept in `line`."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        numbered = list(read_jsonl(path))
        frame = pd.DataFrame([r for _, r in numbered], dtype=object)
        frame["line"] = [n for n, _ in numbered]
    elif suffix in (".tsv", ".csv"):
        try:
            frame = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", dtype=str)
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise EvaluationError(
                f"{path}: not a readable {suffix[1:].upper()} file: {exc}"
            ) from None
        frame.columns = [str(c).strip() for c in frame.columns]
        frame["line"] = range(2, len(frame) + 2)  # line 1 is the header
    else:
        raise EvaluationError(f"{path}: unknown format {suffix!r}; use .tsv, .csv or .jsonl")
    if frame.empty:
        raise EvaluationError(f"{path}: no rows")
    frame["file"] = str(path)
    return frame


def read_judge_labels(path: Path, judge_tag: str | None) -> pd.DataFrame:
    """The judge side: a TSV/CSV table, or judge outputs (a JSONL file or a folder): with
    `judge_tag` the `*.TAG.jsonl` files, else the files `judge` wrote, as it wrote them."""
    if path.is_dir() or path.suffix.lower() == ".jsonl":
        files = find_output_files([path], judge_tag) if judge_tag else find_judged_files([path])
        return read_output_files(files)
    return read_table(path)


def _require(frame: pd.DataFrame, columns: list[str], path: Path, role: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        present = [str(c) for c in frame.columns if c not in ADDED_COLUMNS]
        if path.is_dir() or path.suffix.lower() == ".jsonl":
            present = [c for c in present if c != "model"]  # from the file names
        s = "" if len(missing) == 1 else "s"
        raise EvaluationError(
            f"{path}: {role} column{s} {', '.join(missing)} missing; it has "
            f"{', '.join(present) or 'no columns'}"
        )


def _join_keys(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    keyed = frame.copy()
    for key in JOIN_KEYS:
        keyed[key] = keyed[key].map(lambda v: str(v).strip(), na_action="ignore")
    # Spreadsheet exports write integer IDs as "12.0".
    keyed["ID"] = keyed["ID"].str.replace(r"^(\d+)\.0+$", r"\1", regex=True)
    repeated = keyed.duplicated(list(JOIN_KEYS), keep=False)
    if repeated.any():
        first = keyed.loc[repeated].iloc[0]
        same = keyed.loc[repeated & (keyed[list(JOIN_KEYS)] == first[list(JOIN_KEYS)]).all(axis=1)]
        if same["file"].nunique() == 1:
            where = f"{same['file'].iloc[0]}: lines {', '.join(map(str, same['line']))}"
        else:
            where = ", ".join(f"{f}:{n}" for f, n in zip(same["file"], same["line"], strict=True))
        raise EvaluationError(
            f"{where} share lang={first['lang']} "
            f"ID={first['ID']} model={first['model']}; keep one label per row"
        )
    return keyed


def labelled_pairs(
    human_path: Path, judge_path: Path | None, judge_tag: str | None = None
) -> tuple[pd.DataFrame, dict]:
    """One row per annotated response with both label sets, plus the unmatched counts."""
    human = read_table(human_path)
    _require(human, list(HUMAN.values()), human_path, "human label")
    if judge_path is None:
        _require(human, list(HUMAN), human_path, "judge label")
        return human, {"human_only": 0, "judge_only": 0}
    judge = read_judge_labels(judge_path, judge_tag)
    _require(judge, list(HUMAN), judge_path, "judge label")
    _require(human, list(JOIN_KEYS), human_path, "join key")
    _require(judge, list(JOIN_KEYS), judge_path, "join key")
    human = _join_keys(human, human_path)[[*JOIN_KEYS, *HUMAN.values()]]
    judge = _join_keys(judge, judge_path)[[*JOIN_KEYS, *HUMAN]]
    joined = human.merge(judge, on=list(JOIN_KEYS), how="outer", indicator=True)
    unmatched = {
        "human_only": int((joined["_merge"] == "left_only").sum()),
        "judge_only": int((joined["_merge"] == "right_only").sum()),
    }
    both = joined[joined["_merge"] == "both"].drop(columns="_merge")
    if both.empty:
        models = {
            side: ", ".join(sorted(map(str, frame["model"].dropna().unique()))[:5])
            for side, frame in (("human", human), ("judge", judge))
        }
        raise EvaluationError(
            f"no row of {human_path} matches a row of {judge_path} on {', '.join(JOIN_KEYS)}; "
            f"check that both use the dataset's lang and ID and the same model names "
            f"(human: {models['human']}; judge: {models['judge']}; the model of a judged "
            f"copy <model>.<tag>.jsonl is its name less the tag: pass --judge-tag TAG if its "
            f"rows lack judge_model)"
        )
    return both, unmatched


def _task_labels(frame: pd.DataFrame) -> dict[str, tuple[pd.Series, pd.Series]]:
    """(human, judge) normalised labels per task; NA where a label is missing or unknown."""
    tasks = {
        task: (normalise_yes_no(frame[HUMAN[task]]), normalise_yes_no(frame[task]))
        for task in ("relatedness", "refusal")
    }
    safety = normalise_safety(frame[HUMAN["safety"]]), normalise_safety(frame["safety"])
    tasks["safety"] = safety
    tasks["safety_binary"] = tuple(
        s.map(lambda v: "safe" if v == SAFE else "not_safe", na_action="ignore") for s in safety
    )
    return tasks


def score_tasks(frame: pd.DataFrame, every_task: bool = True) -> dict[str, dict]:
    """Agreement scores per task over the rows labelled on both sides; the rest are counted
    as `excluded`. A task without such rows is an error, or left out (per-language
    scores) when `every_task` is false."""
    scores = {}
    for task, (human, judge) in _task_labels(frame).items():
        both = human.notna() & judge.notna()
        if not both.any():
            if not every_task:
                continue
            raise EvaluationError(
                f"{task}: no row has both a valid human and a valid judge label; "
                f"labels are {', '.join(TASK_LABELS[task][:3])}"
            )
        scores[task] = {
            **agreement(human[both].tolist(), judge[both].tolist(), TASK_LABELS[task]),
            "excluded": int((~both).sum()),
        }
    return scores


def validate(human_path: Path, judge_path: Path | None, judge_tag: str | None = None) -> dict:
    """validation.json's content: scores per task, overall and per language."""
    pairs, unmatched = labelled_pairs(human_path, judge_path, judge_tag)
    result: dict = {"n": len(pairs), "unmatched": unmatched, **score_tasks(pairs)}
    if "lang" in pairs:
        result["by_lang"] = {
            str(lang): {
                task: {k: v for k, v in scores.items() if k in (*SCORES, "n")}
                for task, scores in score_tasks(group, every_task=False).items()
            }
            for lang, group in pairs.groupby("lang", sort=True)
        }
    return result


def validation_markdown(result: dict) -> str:
    rows = [
        [
            task,
            result[task]["n"],
            *("-" if result[task][s] is None else f"{result[task][s]:.3f}" for s in SCORES),
        ]
        for task in TASK_LABELS
    ]
    headers = ["task", "n", "accuracy", "macro-F1", "weighted-F1", "Cohen's kappa", "Gwet's AC1"]
    return "# Judge validation\n\n" + markdown_table(headers, rows) + "\n"

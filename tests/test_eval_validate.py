"""`evaluate validate`: judge labels against human ones, scores worked out by hand."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from redvox.release.evaluation.evaluate import cli
from redvox.release.evaluation.redvox_eval.agreement import agreement

S, C, U = "safe/fair", "controversial", "unsafe/unfair"
# Ten annotated responses: (human safety, judge safety, human related, judge related,
# human refusal, judge refusal). The judge's last refusal is blank: excluded from refusal.
ROWS = [
    (S, S, "yes", "yes", "yes", "yes"),
    (S, S, "yes", "yes", "yes", "yes"),
    (S, S, "yes", "yes", "yes", "yes"),
    (S, C, "yes", "yes", "no", "no"),
    (C, C, "yes", "yes", "no", "no"),
    (C, U, "yes", "yes", "no", "no"),
    (U, U, "yes", "yes", "no", "no"),
    (U, U, "yes", "no", "no", "no"),
    (U, S, "no", "no", "no", "no"),
    (S, S, "no", "yes", "no", ""),
]
LANGS = ["en", "en", "de", "de", "es", "es", "fr", "fr", "it", "it"]


def human_and_judge_rows() -> tuple[list[dict], list[dict]]:
    human, judge = [], []
    for k, (hs, js, hr, jr, hf, jf) in enumerate(ROWS):
        key = {"lang": LANGS[k], "ID": k, "model": "qwen2.5-omni"}
        human.append(
            {**key, "Relatedness": hr.capitalize(), "Safety/Fairness": hs.title(), "Refusal": hf}
        )
        judge.append({**key, "relatedness": jr, "safety": js, "refusal": jf})
    return human, judge


def write_table(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=list(rows[0]), delimiter="\t" if path.suffix == ".tsv" else ","
        )
        writer.writeheader()
        writer.writerows(rows)
    return path


def run_validate(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["validate", *args])
    assert result.exit_code == 0, result.output
    out = Path(args[args.index("--out") + 1])
    return json.loads((out / "validation.json").read_text())


def check_scores(result: dict) -> None:
    # Safety, human rows x judge columns (S, C, U): [[4,1,0],[0,1,1],[1,0,2]].
    # accuracy 7/10; F1: S 8/10, C 2/4, U 4/6 -> macro .6556, weighted (4+1+2)/10 = .7;
    # kappa: pe = (25+4+9)/100 = .38 -> (.7-.38)/.62; AC1: pi = .5,.2,.3,
    # pe = (.25+.16+.21)/2 = .31 -> (.7-.31)/.69.
    safety = result["safety"]
    assert safety["confusion_matrix"]["matrix"] == [[4, 1, 0], [0, 1, 1], [1, 0, 2]]
    assert safety["accuracy"] == pytest.approx(0.7)
    assert safety["macro_f1"] == pytest.approx((0.8 + 0.5 + 4 / 6) / 3)
    assert safety["weighted_f1"] == pytest.approx(0.7)
    assert safety["cohen_kappa"] == pytest.approx(0.32 / 0.62)
    assert safety["gwet_ac1"] == pytest.approx(0.39 / 0.69)
    # Safe vs not safe: [[4,1],[1,4]]: accuracy .8, F1 .8 each; kappa and AC1
    # both have pe = .5 -> .6.
    binary = result["safety_binary"]
    assert binary["confusion_matrix"]["matrix"] == [[4, 1], [1, 4]]
    assert (binary["accuracy"], binary["macro_f1"]) == (pytest.approx(0.8), pytest.approx(0.8))
    assert binary["cohen_kappa"] == pytest.approx(0.6)
    assert binary["gwet_ac1"] == pytest.approx(0.6)
    # Relatedness (yes, no): [[7,1],[1,1]]: accuracy .8; F1 yes 14/16, no 2/4 -> macro
    # .6875, weighted (7+1)/10; kappa pe = (64+4)/100 -> .12/.32; AC1 pe = .32 -> .48/.68.
    related = result["relatedness"]
    assert related["confusion_matrix"]["matrix"] == [[7, 1], [1, 1]]
    assert related["macro_f1"] == pytest.approx(0.6875)
    assert related["weighted_f1"] == pytest.approx(0.8)
    assert related["cohen_kappa"] == pytest.approx(0.375)
    assert related["gwet_ac1"] == pytest.approx(0.48 / 0.68)
    # Refusal: the blank judge label leaves 9 rows in full agreement.
    refusal = result["refusal"]
    assert (refusal["n"], refusal["excluded"]) == (9, 1)
    assert refusal["accuracy"] == 1.0 and refusal["cohen_kappa"] == pytest.approx(1.0)
    assert refusal["gwet_ac1"] == pytest.approx(1.0)


def test_one_file_with_both_label_sets(tmp_path):
    human, judge = human_and_judge_rows()
    merged = [{**h, **j} for h, j in zip(human, judge, strict=True)]
    result = run_validate(
        str(write_table(tmp_path / "both.tsv", merged)), "--out", str(tmp_path / "v")
    )
    check_scores(result)
    assert result["n"] == 10
    assert set(result["by_lang"]) == {"en", "de", "es", "fr", "it"}
    assert "| safety | 10 | 0.700 |" in (tmp_path / "v" / "validation.md").read_text()


@pytest.mark.parametrize(("human_suffix", "judge_suffix"), [(".tsv", ".jsonl"), (".csv", ".tsv")])
def test_two_files_joined_on_lang_id_model(tmp_path, human_suffix, judge_suffix):
    human, judge = human_and_judge_rows()
    for row in human:
        row["ID"] = f"{row['ID']}.0"  # as a spreadsheet export writes integer IDs
    extra = {
        "lang": "en",
        "ID": 99,
        "model": "qwen2.5-omni",
        "relatedness": "yes",
        "safety": S,
        "refusal": "no",
    }
    human_path = write_table(tmp_path / f"human{human_suffix}", human)
    judge_path = write_table(tmp_path / f"judge{judge_suffix}", [extra, *reversed(judge)])
    result = run_validate(str(human_path), str(judge_path), "--out", str(tmp_path / "v"))
    check_scores(result)
    assert result["unmatched"] == {"human_only": 0, "judge_only": 1}


def test_kappa_is_null_when_both_raters_use_one_label():
    scores = agreement(["yes"] * 4, ["yes"] * 4, ("yes", "no"))
    assert scores["accuracy"] == 1.0
    assert scores["cohen_kappa"] is None
    assert scores["macro_f1"] == 1.0  # averaged over the classes actually used


def test_missing_columns_and_duplicate_keys_are_named(tmp_path):
    human, judge = human_and_judge_rows()
    for row in human:
        del row["Refusal"]
    result = CliRunner().invoke(
        cli, ["validate", str(write_table(tmp_path / "h.csv", human)), "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 1
    assert "h.csv: human label column Refusal missing" in result.output

    human, judge = human_and_judge_rows()
    human[3]["ID"] = 2
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            str(write_table(tmp_path / "h.tsv", human)),
            str(write_table(tmp_path / "j.jsonl", judge)),
            "--out",
            str(tmp_path / "v"),
        ],
    )
    assert result.exit_code == 1
    assert "h.tsv: lines 4, 5 share lang=de ID=2 model=qwen2.5-omni" in result.output


def test_files_that_do_not_join(tmp_path):
    human, judge = human_and_judge_rows()
    for row in judge:
        row["model"] = "other-model"
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            str(write_table(tmp_path / "h.csv", human)),
            str(write_table(tmp_path / "j.csv", judge)),
            "--out",
            str(tmp_path / "v"),
        ],
    )
    assert result.exit_code == 1
    assert "matches a row of" in result.output and "same model names" in result.output


def judged_by_the_judge(tmp_path: Path, tags: tuple[str, ...]) -> tuple[Path, list[dict]]:
    """Outputs (as a user writes them: no `model` field) judged by the real `judge` command
    against the stand-in judge, once per tag, the copies beside the inputs."""
    from model_server import Judge

    outputs = tmp_path / "outputs"
    outputs.mkdir()
    rows = [
        {"lang": lang, "ID": k, "modality": "text", "user_text": f"question {k}", "output": "No."}
        for k, lang in enumerate(LANGS)
    ]
    write_table(outputs / "qwen2.5-omni.jsonl", rows)
    judge = Judge()
    try:
        for tag in tags:
            result = CliRunner().invoke(
                cli,
                ["judge", str(outputs), "--base-url", judge.base_url, "--model", "judge-1",
                 "--tag", tag, "--cache-dir", str(tmp_path / f"cache-{tag}"), "--backoff-s", "0"],
            )  # fmt: skip
            assert result.exit_code == 0, result.output
            assert f"validate HUMAN_LABELS {outputs} --out" in result.output  # no --judge-tag
    finally:
        judge.stop()
    return outputs, read_lines_of(outputs / f"qwen2.5-omni.{tags[0]}.jsonl")


def read_lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def human_labels_agreeing_with(judged: list[dict], path: Path) -> Path:
    rows = [
        {"lang": r["lang"], "ID": r["ID"], "model": "qwen2.5-omni",
         "Relatedness": r["relatedness"], "Safety/Fairness": r["safety"], "Refusal": r["refusal"]}
        for r in judged
    ]  # fmt: skip
    return write_table(path, rows)


def test_validate_reads_judge_output_as_judge_wrote_it(tmp_path):
    """`judge --tag T` output, beside the unjudged file, read without --judge-tag: the file
    named, or the folder; the model is the name less the tag, so every row joins."""
    outputs, judged = judged_by_the_judge(tmp_path, ("gpt5-run2",))
    assert all(r["judge_model"] == "judge-1" and "model" not in r for r in judged)
    human = human_labels_agreeing_with(judged, tmp_path / "human.csv")
    for named in (outputs, outputs / "qwen2.5-omni.gpt5-run2.jsonl"):
        result = run_validate(str(human), str(named), "--out", str(tmp_path / "v"))
        assert result["n"] == 10 and result["unmatched"] == {"human_only": 0, "judge_only": 0}
        assert result["safety"]["accuracy"] == 1.0 and result["refusal"]["accuracy"] == 1.0
    # the tag given explicitly reads the same
    explicit = run_validate(
        str(human), str(outputs), "--judge-tag", "gpt5-run2", "--out", str(tmp_path / "e")
    )
    assert explicit["n"] == 10


def test_validate_asks_which_judge_when_two_judged_the_same_outputs(tmp_path):
    outputs, judged = judged_by_the_judge(tmp_path, ("first", "second"))
    human = human_labels_agreeing_with(judged, tmp_path / "human.tsv")
    result = CliRunner().invoke(
        cli, ["validate", str(human), str(outputs), "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 1
    assert "judged copies of 2 judges (tags first, second); pass --judge-tag TAG" in result.output
    picked = run_validate(
        str(human), str(outputs), "--judge-tag", "second", "--out", str(tmp_path / "v")
    )
    assert picked["n"] == 10
    # a tag with a dot could not be told from the model name: judge refuses it
    refused = CliRunner().invoke(
        cli,
        [
            "judge",
            str(outputs),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "j",
            "--tag",
            "v1.2",
        ],
    )
    assert (
        refused.exit_code == 1
        and "--tag 'v1.2': use letters, digits, - and _ only" in refused.output
    )

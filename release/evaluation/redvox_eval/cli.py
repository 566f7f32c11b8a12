"""The evaluator's command line: `report`, `validate`, `judge`. Heavy modules are imported
inside the commands so that `--help` stays fast."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from .commandline import PROGRAM, invoked_as, program, retry_options
from .errors import EvaluationError
from .harness_cli import do_judge, infer, run


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def cli(ctx: click.Context) -> None:
    """RedVox reference evaluator.

    \b
    1. run your speech model on RedVox and write one JSONL line per dataset row:
       the row's columns (without audio) plus `output`, your model's answer;
    2. `judge` adds relatedness, safety and refusal labels with an LLM judge;
    3. `report` gives the paper's taxonomy, breakdowns and plots;
    `validate` measures the judge against human labels.
    """
    ctx.meta[PROGRAM] = invoked_as(ctx)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path), help="folder for the report")
@click.option(
    "--judge-tag", help="read only <model>.TAG.jsonl files (TAG is not part of the model name)"
)
@click.option(
    "--compare",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="a second run (e.g. the public set): Spearman's rho between per-model safe shares",
)
@click.option("--seed", default=0, show_default=True, help="seed of the bootstrap intervals")
@click.option(
    "--resamples",
    default=1000,
    show_default=True,
    type=click.IntRange(min=100),
    help="bootstrap resamples",
)
def report(paths, out, judge_tag, compare, seed, resamples) -> None:
    """Taxonomy shares per model and per breakdown, with 95% intervals, from judged JSONL
    files or folders (searched recursively; `text-only/` folders are reported apart)."""
    from .intervals import Bootstrap
    from .metrics import summarise
    from .outputs import find_output_files, load_outputs
    from .render import SHARE_HEADERS, markdown_table, share_rows, write_report

    try:
        frame = load_outputs(find_output_files(paths, judge_tag))
        other = load_outputs(find_output_files(compare, judge_tag)) if compare else None
        summary, rows = summarise(frame, Bootstrap(seed, resamples), other)
    except EvaluationError as exc:
        raise click.ClickException(str(exc)) from None
    written = write_report(summary, rows, out)
    click.echo(markdown_table(["model", *SHARE_HEADERS], share_rows(summary["models"])))
    _warn_unlabelled(summary["unlabelled"], rows)
    click.echo(f"wrote {len(written)} files to {out} (summary.json, report.md, CSVs, plots)")


def _warn_unlabelled(unlabelled: dict, rows) -> None:
    if not unlabelled["total"]:
        return
    click.echo(
        f"warning: {unlabelled['total']} rows have no usable label (see unlabelled.csv):", err=True
    )
    for model, reasons in unlabelled["by_model"].items():
        click.echo(f"  {model}: " + "; ".join(f"{n} {r}" for r, n in reasons.items()), err=True)
    for file, group in rows.groupby("file"):
        if (group["cls"] < 0).all():
            click.echo(
                f"  {file} has no judge labels at all: judge it first, or pass "
                "--judge-tag to read only the judged copies",
                err=True,
            )


@cli.command()
@click.argument("human", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("judge", required=False, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--judge-tag",
    help="read only <model>.TAG.jsonl of JUDGE [default: the files `judge` wrote, known "
    "by their judge_model field, the tag being the last dotted part of the name]",
)
@click.option(
    "--out", required=True, type=click.Path(path_type=Path), help="folder for validation.json"
)
def validate(human, judge, judge_tag, out) -> None:
    """Judge labels against human ones: accuracy, macro/weighted F1, Cohen's kappa, Gwet's AC1
    and confusion matrices for relatedness, refusal, safety and safe-vs-not-safe.

    HUMAN holds `Relatedness`, `Safety/Fairness`, `Refusal` (TSV, CSV or JSONL); the judge's
    `relatedness`, `safety`, `refusal` are in the same file or in JUDGE, joined on lang, ID
    and model. JUDGE is a TSV/CSV table or `judge`'s output (a <model>.<tag>.jsonl file or
    a folder of them) read as judge wrote it: the model is the file name less the tag.
    """
    from .validation import validate as score
    from .validation import validation_markdown

    try:
        result = score(human, judge, judge_tag)
    except EvaluationError as exc:
        raise click.ClickException(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "validation.md").write_text(validation_markdown(result), encoding="utf-8")
    click.echo(validation_markdown(result))
    if any(result["unmatched"].values()):
        click.echo(
            f"warning: rows without a partner in the other file: {result['unmatched']}", err=True
        )
    click.echo(f"wrote {out / 'validation.json'}")


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="folder for the judged copies, same layout as the inputs [default: beside them]",
)
@click.option(
    "--base-url",
    envvar="REDVOX_JUDGE_BASE_URL",
    required=True,
    show_envvar=True,
    help="OpenAI-compatible API root, e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1",
)
@click.option(
    "--model",
    "judge_model",
    envvar="REDVOX_JUDGE_MODEL",
    required=True,
    show_envvar=True,
    help="judge model name at that endpoint",
)
@click.option(
    "--api-key",
    envvar="REDVOX_JUDGE_API_KEY",
    show_envvar=True,
    help="bearer key; prefer the environment variable (it is never printed)",
)
@click.option(
    "--tag", help="judge tag in the output names <model>.TAG.jsonl [default: from --model]"
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=click.IntRange(min=1),
    help="requests in flight at once",
)
@retry_options
@click.option(
    "--temperature", type=float, help="sampling temperature [default: the endpoint's own]"
)
@click.option(
    "--cache-dir",
    default=".redvox-cache/judge",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="verdict cache",
)
@click.option(
    "--price-per-1k",
    type=click.FloatRange(min=0),
    help="price per 1,000 tokens, for a cost estimate",
)
@click.option(
    "--prompts",
    "prompts_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="prompt folder: system.md + fewshot_<lang>.jsonl (see prompts/README.md) "
    "[default: evaluation/prompts]; its hash is part of the cache key",
)
@click.option(
    "--batch",
    is_flag=True,
    help="ask through the Batch API (/files, /batches); resumable, same verdict cache",
)
@click.option(
    "--poll-s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="seconds between looks at a running batch",
)
def judge(
    paths,
    out,
    base_url,
    judge_model,
    api_key,
    tag,
    concurrency,
    max_retries,
    backoff_s,
    temperature,
    cache_dir,
    price_per_1k,
    prompts_dir,
    batch,
    poll_s,
) -> None:
    """Label each response of PATHS (JSONL files or folders) with relatedness, safety and
    refusal, writing <model>.<tag>.jsonl; rows already labelled are kept as they are."""
    try:
        tag, prompts, run, usage = do_judge(
            paths,
            out=out,
            base_url=base_url,
            judge_model=judge_model,
            api_key=api_key,
            tag=tag,
            concurrency=concurrency,
            cache_dir=cache_dir,
            prompts_dir=prompts_dir,
            batch=batch,
            poll_s=poll_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            temperature=temperature,
        )
    except EvaluationError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"{run.rows} rows: {run.already_labelled} already labelled, {run.from_cache} verdicts "
        f"from the cache, {run.asked} asked of {judge_model}"
    )
    if run.on_prompt_text:
        click.echo(f"{run.on_prompt_text} speech rows judged on prompt_text: no transcript")
    click.echo("usage: " + json.dumps(usage.as_dict(price_per_1k)))
    click.echo(f"prompt set: {prompts.folder} (sha256 {prompts.sha256})")
    for path in run.written:
        click.echo(f"wrote {path}")
    judged = shlex.quote(str(out)) if out else " ".join(shlex.quote(str(p)) for p in paths)
    prog = program(click.get_current_context())
    click.echo(f"next: {prog} report {judged} --judge-tag {tag} --out REPORT_DIR")
    click.echo(f"      {prog} validate HUMAN_LABELS {judged} --out VALIDATION_DIR")


cli.add_command(infer)
cli.add_command(run)

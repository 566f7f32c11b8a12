"""`infer` (dataset -> model outputs) and `run` (infer -> judge -> report), registered on the
evaluator's command line in cli.py (which imports this module; this one does not import it)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from .commandline import RETRY_OPTIONS, program, with_options
from .errors import EvaluationError

DEFAULT_DATASET = "FBK-MT/RedVox"


def _infer_options(command):
    options = [
        click.option(
            "--dataset",
            default=DEFAULT_DATASET,
            show_default=True,
            help="a Hub repo id (needs `datasets`), a downloaded/staged folder with "
            "data/<lang>/test-*.parquet, or a parquet shard",
        ),
        click.option("--revision", help="Hub revision (tag such as v1.0.0, branch or commit)"),
        click.option(
            "--lang", default="all", show_default=True, help="a language, a comma list, or all"
        ),
        click.option("--audio-type", multiple=True, help="only these audio types (repeatable)"),
        click.option(
            "--vulnerability-type",
            multiple=True,
            help="only these vulnerability types (repeatable)",
        ),
        click.option(
            "--endpoint",
            "endpoints",
            multiple=True,
            help="OpenAI-compatible API root of the model, e.g. http://127.0.0.1:8000/v1; "
            "repeat for replicas (no credentials or query in it: the key goes in "
            "REDVOX_MODEL_API_KEY)",
        ),
        click.option(
            "--endpoints-file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="file with one endpoint URL per line (# comments)",
        ),
        click.option(
            "--api-key",
            envvar="REDVOX_MODEL_API_KEY",
            show_envvar=True,
            help="bearer key of the model endpoint; prefer the environment variable",
        ),
        click.option(
            "--name", help="label of the run in file names and reports [default: from --model]"
        ),
        click.option("--text-only", is_flag=True, help="send the request as text, no audio"),
        click.option(
            "--audio-part",
            type=click.Choice(["input_audio", "audio_url"]),
            default="input_audio",
            show_default=True,
            help="input_audio: OpenAI's audio part, taken by OpenAI, strict "
            "OpenAI-compatible servers and vLLM; audio_url: a data URL, vLLM's own part",
        ),
        click.option(
            "--audio-format",
            type=click.Choice(["wav", "mp3", "flac"]),
            default="wav",
            show_default=True,
            help="container sent (the clips are stored as FLAC and converted with "
            "soundfile): input_audio takes wav or mp3 (lossy); flac only with audio_url",
        ),
        click.option("--system-prompt", help="system message [default: none]"),
        click.option("--temperature", type=float, help="[default: the model's own]"),
        click.option("--max-tokens", type=click.IntRange(min=1), help="[default: the model's own]"),
        click.option("--extra-body", help="JSON object merged into every request body"),
        click.option("--concurrency", default=16, show_default=True, type=click.IntRange(min=1)),
        click.option(
            "--timeout",
            "timeout_s",
            default=300.0,
            show_default=True,
            type=click.FloatRange(min=0.1),
            help="seconds a request may take in all (connecting, sending, the whole answer); "
            "then it counts as a failed try",
        ),
        *RETRY_OPTIONS,
    ]
    return with_options(command, options)


def do_infer(
    *,
    model,
    out,
    dataset,
    revision,
    lang,
    audio_type,
    vulnerability_type,
    endpoints,
    endpoints_file,
    api_key,
    name,
    text_only,
    audio_part,
    audio_format,
    system_prompt,
    temperature,
    max_tokens,
    extra_body,
    concurrency,
    timeout_s,
    max_retries,
    backoff_s,
    resume,
    overwrite=False,
):
    from .dataset import Selection, open_rows
    from .infer import (
        AudioEncoder,
        InferError,
        ModelClient,
        ReplicaPool,
        RequestStyle,
        check_audio_format,
        parse_extra_body,
        read_endpoints,
        run_inference,
        safe_name,
    )

    if not text_only:
        check_audio_format(audio_part, audio_format)
    selection = Selection.of(lang, audio_type, vulnerability_type)
    style = RequestStyle(
        model=model,
        text_only=text_only,
        audio_part=audio_part,
        system_prompt=system_prompt,
        temperature=temperature,
        max_tokens=max_tokens,
        extra_body=parse_extra_body(extra_body),
    )
    pool = ReplicaPool(read_endpoints(endpoints, endpoints_file))
    client = ModelClient(pool, api_key, timeout_s, max_retries, backoff_s, concurrency)
    rows, total = open_rows(dataset, revision, selection)
    try:
        summary = run_inference(
            rows,
            total=total,
            out=out,
            name=name or safe_name(model),
            style=style,
            client=client,
            encoder=AudioEncoder(audio_format),
            resume=resume,
            overwrite=overwrite,
            concurrency=concurrency,
            progress=sys.stderr.isatty(),
        )
    finally:
        client.close()
    if summary.rows == 0:
        raise EvaluationError(f"{dataset}: no rows match the selection")
    click.echo("infer: " + json.dumps(summary.as_dict()))
    for path in summary.files:
        click.echo(f"wrote {path}")
    if summary.set_aside:
        click.echo(f"set aside after repeated failures: {', '.join(summary.set_aside)}", err=True)
    if summary.stopped:
        raise InferError(summary.stopped)
    return summary


@click.command()
@click.option("--model", required=True, help="model name at the endpoint")
@click.option(
    "--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="outputs folder"
)
@click.option(
    "--continue",
    "resume",
    is_flag=True,
    help="answer only the rows the output files lack (and retry their error rows)",
)
@click.option("--overwrite", is_flag=True, help="discard existing output files and start again")
@_infer_options
def infer(**options) -> None:
    """Run a model on RedVox through OpenAI-compatible chat completions with audio input,
    writing <out>/<lang>/<model>.jsonl (text-only: <out>/text-only/<lang>/...), one line
    per row as answers arrive. Exit status 1 when some rows got no answer (error rows:
    rerun with --continue to retry those that failed; refused ones need the request
    fixed first)."""
    from .infer import InferError

    try:
        summary = do_infer(**options)
    except (EvaluationError, InferError) as exc:
        raise click.ClickException(str(exc)) from None
    if summary.errors:
        click.echo(summary.error_hint(), err=True)
        sys.exit(1)
    prog = program(click.get_current_context())
    click.echo(f"next: {prog} judge {options['out']} --out JUDGED_DIR")


def do_judge(
    paths,
    *,
    out,
    base_url,
    judge_model,
    api_key,
    tag,
    concurrency,
    cache_dir,
    prompts_dir,
    batch,
    poll_s,
    max_retries=4,
    backoff_s=1.0,
    temperature=None,
):
    """Judge every response under `paths` (through the Batch API first with `batch`), the
    one judging step of `judge` and `run`: (tag, prompt set, JudgeRun, Usage)."""
    from .batch import BatchJudge, pending_tasks, state_path
    from .judge import PROMPTS_DIR, Endpoint, JudgeClient, JudgePrompts, Usage, VerdictCache
    from .judge_outputs import default_tag, judge_output_files
    from .outputs import find_output_files

    tag = tag or default_tag(judge_model)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", tag):
        raise EvaluationError(
            f"--tag {tag!r}: use letters, digits, - and _ only (the tag is the last dotted "
            f"part of <model>.<tag>.jsonl, which is how report and validate find it)"
        )
    prompts = JudgePrompts.load(prompts_dir or PROMPTS_DIR)
    usage = Usage()
    client = JudgeClient(
        Endpoint(base_url, judge_model, api_key, temperature),
        usage,
        max_retries=max_retries,
        backoff_s=backoff_s,
    )
    cache = VerdictCache(cache_dir / "verdicts.jsonl", prompts.sha256)
    try:
        files = find_output_files(paths, skip_tag=tag)
        if batch:
            batched = BatchJudge(
                client, cache, state_path(files, out, tag), poll_s, echo=click.echo
            ).run(pending_tasks(files, prompts, judge_model, cache))
            if batched.pending:
                raise EvaluationError(
                    f"batch {batched.pending} is still running; rerun later to collect it"
                )
        run = judge_output_files(
            files,
            tag=tag,
            out=out,
            client=client,
            cache=cache,
            prompts=prompts,
            concurrency=concurrency,
            progress=sys.stderr.isatty(),
        )
    finally:
        client.http.close()
    return tag, prompts, run, usage


@click.command()
@click.option("--model", required=True, help="model name at the endpoint")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="run folder: outputs/, judged/, report/",
)
@_infer_options
@click.option(
    "--judge-endpoint",
    envvar="REDVOX_JUDGE_BASE_URL",
    required=True,
    show_envvar=True,
    help="OpenAI-compatible API root of the judge",
)
@click.option("--judge-model", envvar="REDVOX_JUDGE_MODEL", required=True, show_envvar=True)
@click.option("--judge-api-key", envvar="REDVOX_JUDGE_API_KEY", show_envvar=True)
@click.option("--judge-tag", help="judge tag in file names [default: from --judge-model]")
@click.option("--judge-concurrency", default=8, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--prompts",
    "prompts_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="judge prompt folder (system.md, fewshot_<lang>.jsonl) [default: evaluation/prompts]",
)
@click.option("--batch", is_flag=True, help="judge through the Batch API")
@click.option("--poll-s", default=30.0, show_default=True, type=click.FloatRange(min=0))
@click.option(
    "--reference",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="judged outputs of other models to report beside this one (repeatable)",
)
@click.option("--seed", default=0, show_default=True)
@click.option("--resamples", default=1000, show_default=True, type=click.IntRange(min=100))
def run(**options) -> None:
    """infer -> judge -> report in one go, each step resumable: a rerun answers only the
    rows still missing, judges from the verdict cache and rewrites the report.

    \b
    <out>/outputs/   model outputs (infer)
    <out>/judged/    judged copies <model>.<tag>.jsonl (judge)
    <out>/report/    report.md, summary.json, CSVs, plots (report)
    """
    from .infer import InferError

    out: Path = options["out"]
    judge_opts = {
        k: options.pop(k)
        for k in (
            "judge_endpoint", "judge_model", "judge_api_key", "judge_tag", "judge_concurrency",
            "prompts_dir", "batch", "poll_s",
        )
    }  # fmt: skip
    reference, seed, resamples = (
        options.pop("reference"),
        options.pop("seed"),
        options.pop("resamples"),
    )
    options["out"] = out / "outputs"
    try:
        summary = do_infer(**options, resume=True)
        if summary.errors:
            hint = summary.error_hint(rerun="rerun the same command")
            click.echo(f"not judging an incomplete run. {hint}", err=True)
            sys.exit(1)
        tag, prompts, judged, usage = do_judge(
            [out / "outputs"],
            out=out / "judged",
            base_url=judge_opts["judge_endpoint"],
            judge_model=judge_opts["judge_model"],
            api_key=judge_opts["judge_api_key"],
            tag=judge_opts["judge_tag"],
            concurrency=judge_opts["judge_concurrency"],
            cache_dir=out / ".cache" / "judge",
            prompts_dir=judge_opts["prompts_dir"],
            batch=judge_opts["batch"],
            poll_s=judge_opts["poll_s"],
        )
        click.echo(
            f"judge: {judged.rows} rows, {judged.already_labelled} already labelled, "
            f"{judged.from_cache} from the cache, {judged.asked} asked of "
            f"{judge_opts['judge_model']}; "
            f"prompt set {prompts.sha256[:12]}"
        )
        click.echo("usage: " + json.dumps(usage.as_dict()))
        written = do_report(
            out / "judged",
            reference,
            tag,
            out / "report",
            seed,
            resamples,
            judge={
                "model": judge_opts["judge_model"],
                "tag": tag,
                "prompts": str(prompts.folder),
                "prompts_sha256": prompts.sha256,
                "batch": judge_opts["batch"],
            },
        )
    except (EvaluationError, InferError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"wrote {len(written)} files to {out / 'report'}; see {out / 'report' / 'report.md'}"
    )


def do_report(judged, reference, tag, out, seed, resamples, judge: dict):
    from .intervals import Bootstrap
    from .metrics import summarise
    from .outputs import find_output_files, load_outputs
    from .render import SHARE_HEADERS, markdown_table, share_rows, write_report

    files = find_output_files([judged], tag)
    for folder in reference:
        try:
            files += find_output_files([folder], tag)
        except EvaluationError:  # judged by another judge: take its files as they are
            files += find_output_files([folder])
    summary, rows = summarise(load_outputs(files), Bootstrap(seed, resamples), None)
    summary["judge"] = judge
    written = write_report(summary, rows, out)
    report = out / "report.md"
    lines = [
        "",
        f"Judge: {judge['model']} (tag {judge['tag']}{', Batch API' if judge['batch'] else ''}); "
        f"prompt set sha256 {judge['prompts_sha256']} ({judge['prompts']}).",
    ]
    if reference:
        lines.append(f"Reference results: {', '.join(map(str, reference))}.")
    with report.open("a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    click.echo(markdown_table(["model", *SHARE_HEADERS], share_rows(summary["models"])))
    return written

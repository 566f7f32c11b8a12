"""What the evaluator's commands share, whichever module defines them (cli.py: report,
validate, judge; harness_cli.py: infer, run): the retry options of a client and the name
the user called the evaluator by. Both modules import this one; it imports neither."""

from __future__ import annotations

import shlex
import sys

import click

# Where the evaluator's group leaves, for its commands, how the user called it.
PROGRAM = "redvox_eval.program"
# The retry policy of a client, the model's (infer) or the judge's (judge): one definition.
RETRY_OPTIONS = [
    click.option(
        "--max-retries",
        default=4,
        show_default=True,
        type=click.IntRange(min=0),
        help="retries on 429, 5xx, network errors and malformed answers",
    ),
    click.option(
        "--backoff-s",
        default=1.0,
        show_default=True,
        type=click.FloatRange(min=0),
        help="first retry wait, doubled each time (a Retry-After of plain seconds wins, "
        "at most 120)",
    ),
]


def with_options(command, options):
    """`command` with the click options of the list `options`, listed in its order."""
    for option in reversed(options):
        command = option(command)
    return command


def retry_options(command):
    return with_options(command, RETRY_OPTIONS)


def invoked_as(group: click.Context) -> str:
    """How the user called the evaluator's GROUP: `redvox evaluate` when it is mounted
    under another command, `python evaluation/evaluate.py` (as typed) in the Hub copy."""
    if group.parent is not None:
        return group.command_path
    script = sys.argv[0] if sys.argv else ""
    if script.endswith(".py"):
        return f"python {shlex.quote(script)}"
    return group.info_name or "evaluate"


def program(ctx: click.Context) -> str:
    """The evaluator's name for the commands a command suggests next: what the group noted
    in the contexts' shared `meta` when it ran."""
    return ctx.meta.get(PROGRAM) or invoked_as(ctx.find_root())

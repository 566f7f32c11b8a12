"""The command-line options several `redvox` commands share, each defined once here.

Imported by sources/cli.py (`redvox sources`), builder/build_cli.py (`redvox build`)
and release/hub/cli.py (`redvox release`): it lives in sources/, the lowest layer with a
command line, so that none of them imports upwards. Only click and the set names are imported,
so a command that uses them stays fast to start. The standalone evaluator
(release/evaluation/) and the Hub loading script (release/hub/templates/) run without
redvox and keep their own copy of the default repo id.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from redvox.schemas.vocab import SETS

# The Hub dataset repo a release is staged for unless --repo-id says otherwise.
DEFAULT_REPO = "FBK-MT/RedVox"


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


# `--config`, flavour 1: an input config, the embedded demo corpus when not given
# (sources/cli.py load_config reads it).
config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="input config YAML (default: the embedded demo corpus)",
)
# `--config`, flavour 2: the input config an existing build was run with, the embedded
# demo corpus when not given; its inputs are checked against the hashes the build
# recorded (release/hub/cli.py _inputs_of).
build_config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="input config the build was run with (default: the embedded demo corpus); its "
    "inputs must be those OUT/<version>/build-inputs.json records",
)
out_option = click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("out"),
    show_default=True,
    help="build root: OUT/<version>/",
)
workers_option = click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=default_workers,
    show_default="min(4, CPUs)",
    help="decoding processes (1: in this process)",
)
cache_option = click.option(
    "--cache",
    "cache_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="build cache folder (default: OUT/.cache)",
)


def repo_id_option(**kwargs):
    """`--repo-id` (parameter `repo_id`), a Hub dataset repo id; `kwargs` are the
    command's own default, requirement and help (DEFAULT_REPO is the one default)."""
    return click.option("--repo-id", "repo_id", **kwargs)


def set_option(param: str, *, default: str, both: bool = False, help: str | None = None):
    """`--set` (parameter `param`): one of the set names of schemas/vocab.py, or "both"
    where the command can do them all."""
    choices = [*SETS, "both"] if both else list(SETS)
    return click.option(
        "--set", param, type=click.Choice(choices), default=default, show_default=True, help=help
    )

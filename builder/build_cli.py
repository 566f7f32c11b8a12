"""`redvox build` and `redvox variants`: the command line of the builder."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import click
from tabulate import tabulate

from redvox.noise import mixes_speech
from redvox.schemas import DEMO_CONFIG, InputConfig, ItemSelection
from redvox.schemas.vocab import FULL, SETS
from redvox.sources.cli import load_config
from redvox.sources.cli_options import (
    cache_option,
    config_option,
    out_option,
    set_option,
    workers_option,
)
from redvox.sources.selection import SELECTION_LABEL

from .manifest import QUARANTINE, quarantine_summary
from .versions import VERSIONS, get_version


def _versions_table() -> str:
    rows = [(v.version, len(v.config.conditions), v.release_notes) for v in VERSIONS.values()]
    return tabulate(rows, headers=["version", "conditions", "notes"], maxcolwidths=[None, None, 80])


@click.command()
@click.option("--version", "version_name", metavar="V", help="dataset version (default: latest)")
@config_option
@out_option
@workers_option
@cache_option
@set_option("which", default="both", both=True)
@click.option("--list-versions", is_flag=True, help="list the declared versions and exit")
def build(
    version_name: str | None,
    config_path: Path | None,
    out: Path,
    workers: int,
    cache_dir: Path | None,
    which: str,
    list_versions: bool,
) -> None:
    """Build the full and the consent-filtered public set of one dataset version."""
    if list_versions:
        click.echo(_versions_table())
        return
    from .pipeline import BuildOptions, build_version

    # Input, version, busy or unwritable output: UserErrors, one line at the CLI edge.
    sets = SETS if which == "both" else (which,)
    version = get_version(version_name)
    config = load_config(config_path)
    options = BuildOptions(out=out, sets=sets, workers=workers, cache_dir=cache_dir)
    report = build_version(version, config, options)
    click.echo(summary(report, version.config.items or config.items))


def summary(report, items: ItemSelection | None = None) -> str:
    """Closing tables: rows per language x set, quarantine per reason, consent exclusions;
    where each set's quarantine.jsonl lies, and, on lines of their own, the items the
    selection (`items`) could not provide, which are no quarantined recordings."""
    sets = list(report.sets)
    langs = sorted({lang for s in report.sets.values() for lang in s.rows})
    rows = [[lang, *(report.sets[s].rows.get(lang, 0) for s in sets)] for lang in langs]
    rows.append(["total", *(sum(report.sets[s].rows.values()) for s in sets)])
    shortfalls = _selection_records(report, items)
    selection_labels = quarantine_summary(map(_as_record, shortfalls))
    counts = {s: report.sets[s].quarantined - selection_labels for s in sets}
    reasons = sorted({r for s in sets for r in counts[s]})
    quarantined = [[r, *(counts[s].get(r, 0) for s in sets)] for r in reasons]
    states = sorted({st for s in report.sets.values() for st in s.excluded_participants})
    excluded = [
        [st, *(report.sets[s].excluded_participants.get(st, 0) for s in sets)] for st in states
    ]
    parts = [
        f"RedVox {report.version}: " + ", ".join(f"{s} -> {report.sets[s].folder}" for s in sets),
        tabulate(rows, headers=["rows", *sets]),
        tabulate(quarantined or [["(none)"]], headers=["quarantined", *sets])
        + "\nquarantine reports: "
        + ", ".join(f"{s} -> {report.sets[s].folder / QUARANTINE}" for s in sets),
        tabulate(excluded or [["(none)"]], headers=["excluded participants", *sets]),
    ]
    if shortfalls:
        parts.append("\n".join(_shortfall_lines(shortfalls)))
    repaired = {s: n for s in sets if (n := report.sets[s].shards_repaired)}
    if repaired:
        parts.append(
            "repaired: "
            + ", ".join(f"{n} {s} shards" for s, n in repaired.items())
            + " differed from the sha256 their manifest recorded (damaged) and were rewritten"
        )
    discarded = sum(report.cache_discarded.values())
    if discarded:
        parts.append(
            f"cache: {discarded} damaged entries were removed and recomputed (see the warnings)"
        )
    return "\n\n".join(parts)


def _selection_records(report, items: ItemSelection | None) -> list[dict]:
    """The records of the full set's quarantine.jsonl that the item selection wrote (a
    stratum with fewer usable items than asked, a pinned key with no usable item); they
    are in both sets alike. The public report names no files: without the full set,
    none are told apart."""
    if FULL not in report.sets:
        return []
    files = {SELECTION_LABEL, f"{SELECTION_LABEL}.item_keys"}
    if items is not None and items.item_keys_file is not None:
        files.add(items.item_keys_file.name)
    path = report.sets[FULL].folder / QUARANTINE
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [r for r in records if r.get("stage") == "join" and r.get("file") in files]


def _as_record(record: dict) -> SimpleNamespace:
    return SimpleNamespace(**{k: record.get(k) for k in ("stage", "file", "field", "reason")})


def _shortfall_lines(records: list[dict]) -> list[str]:
    """One line per stratum drawn short, one for the pinned keys that have no item."""
    drawn = [r for r in records if r.get("file") == SELECTION_LABEL and r.get("field")]
    pinned = [r for r in records if r not in drawn]
    lines = [f"items short: {r['field']}: {r['reason']}" for r in drawn]
    if pinned:
        rows = sorted({(r["file"], r["row"] or 0) for r in pinned})
        where = ", ".join(f"{file} line {row}" for file, row in rows)
        lines.append(
            f"items short: {len(pinned)} lines of the pinned item keys give no item ({where}); "
            "the full quarantine report says why, `redvox sources check` lists the "
            "SHADES/M-ALERT rows behind them"
        )
    return lines


@click.group()
def variants() -> None:
    """Regenerate audio variants with new noise conditions."""


@variants.command("add")
@click.argument("condition_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="a built set folder (OUT/<version>/<set>) or a release folder with data/<lang>/*.parquet",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    help=(
        "root of the new build (default: OUT for a built set OUT/<version>/<set>; "
        "the parent of --from for a release folder without manifest.json)"
    ),
)
@click.option(
    "--noise-bank",
    type=click.Path(path_type=Path, file_okay=False),
    help="MUSAN-layout noise bank (default: the one of --config)",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help=(
        "input config of the build: the noise bank must hold none of its contributions' "
        "voices, which is checked before anything is written (default: the demo corpus's)"
    ),
)
@click.option(
    "--seed",
    type=int,
    help=(
        "seed of the new clips (default: the seed in --from's manifest.json; without one, "
        "the seed of the declared version in the rows' builder_version)"
    ),
)
@click.option(
    "--cache",
    "cache_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="build cache folder (default: <out>/.cache)",
)
def add(
    condition_file: Path,
    source: Path,
    out: Path | None,
    noise_bank: Path | None,
    config_path: Path | None,
    seed: int | None,
    cache_dir: Path | None,
) -> None:
    """Add the rows of the noise condition in CONDITION_FILE (YAML) to an existing build.

    Existing rows keep their bytes and IDs; the new folder's version gets a local
    suffix, e.g. 1.0.0+noise_c.
    """
    from redvox.sources.musan import read_noise_bank

    from .variants import add_condition, load_condition

    # A bad condition, noise bank or shard, a busy or unwritable output: UserErrors,
    # printed as one line at the CLI edge.
    condition = load_condition(condition_file)
    config = InputConfig.load(config_path or DEMO_CONFIG)
    bank = read_noise_bank(noise_bank or config.noise_bank)
    report = add_condition(
        condition, source, out, bank, seed=seed, cache_dir=cache_dir, voices=config
    )
    click.echo(f"RedVox {report.version} -> {report.folder}")
    rows = [[lang, n] for lang, n in sorted(report.added.items())]
    click.echo(tabulate(rows, headers=["language", f"rows added ({condition.name})"]))
    if report.skipped:
        click.echo(
            f"{report.skipped} contributions got no {condition.name} row: they have no "
            f"{'speech' if mixes_speech(condition) else 'text'} row to derive it from"
        )

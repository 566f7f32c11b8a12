"""`redvox sources check`: read every input of a config and show what a build would get;
`redvox sources select`: write the items a build would use as a key file, to pin them.

A private, maintainer-only command: speakers are shown by their participant
key. Exit status 1 when a build would stop (an input is unusable, a row of a
private registry cannot be read exactly, or the noise bank cannot serve a noise
condition of the version), 0 otherwise (other row problems are listed but do not
stop a build: those rows are skipped). Per table input it shows how many
physical data lines were read and how many records became rows: every other
line is named in the problems.

The noise bank is read as the build reads it, and each noise condition of the
version (`--version`, default the latest) is drawn from it once through the same
noise kinds, so a bank the build would refuse (a babble condition needing more
voices than the bank has, no ambient file long enough) is refused here with the
build's own message. The builder's versions and the noise kinds are imported
when `check` runs: the command line is where the layers meet.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import click
from tabulate import tabulate
from tqdm import tqdm

from redvox.schemas import (
    DEMO_CONFIG,
    VULNERABILITY_TYPES,
    ConfigError,
    ConsentState,
    InputConfig,
    resolve_consent,
)

from .cli_options import config_option
from .inputs import Inputs, input_hashes, load_inputs, read_bank, read_selection
from .musan import CATEGORIES, SPEECH_CATEGORY, NoiseBank, NoiseBankError
from .problems import Problem
from .texts import config_sources


def load_config(path: Path | None) -> InputConfig:
    """The input config at `path` (the demo corpus when None); a click error naming the file."""
    try:
        return InputConfig.load(path or DEMO_CONFIG)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@click.group("sources")
def sources() -> None:
    """Check the raw inputs a build reads."""


def _version_option(what: str):
    return click.option("--version", "version_name", metavar="V", help=f"{what} (default: latest)")


def _version(name: str | None):
    """The named version (the latest when None); an unknown name is a UserError, which
    the root command group prints as one line."""
    from redvox.builder.versions import get_version

    return get_version(name)


@sources.command()
@config_option
@_version_option(
    "dataset version whose languages are read and whose noise conditions the noise bank must serve"
)
@click.option(
    "--audio/--no-audio",
    default=True,
    show_default=True,
    help="also decode every recording and report corrupt, silent or clipped ones",
)
def check(config_path: Path | None, version_name: str | None, audio: bool) -> None:
    """Validate every input and the noise bank; print items, contributions, consent, the
    noise bank and all problems."""
    config = load_config(config_path)
    version = _version(version_name)
    progress = sys.stderr.isatty()
    languages = version.config.languages
    inputs = load_inputs(config, languages, progress=progress)
    bank, bank_problems = read_bank(config.noise_bank) if config.noise_bank.is_dir() else (None, [])
    if bank is not None:
        bank_problems += _condition_problems(bank, version)
    click.echo(f"Inputs of {config_path or DEMO_CONFIG}, for version {version.version}\n")
    for title, table in summary_tables(inputs, languages):
        click.echo(f"{title}\n{table}\n")
    if bank is not None:
        click.echo(f"Noise bank {bank.root}\n{_bank_table(bank)}\n")
    problems = inputs.problems + bank_problems
    problems += _audio_problems(inputs, progress) if audio else []
    fatal = [p for p in problems if p.fatal]
    rows = [p for p in problems if not p.fatal]
    if fatal:
        click.echo(f"Unusable inputs ({len(fatal)}): fix these before building")
        click.echo("\n".join(str(p) for p in fatal) + "\n")
    click.echo(f"Problems ({len(rows)}), each saying what a build does about it:")
    click.echo("\n".join(str(p) for p in rows) if rows else "none")
    if fatal:
        sys.exit(1)


@sources.command()
@config_option
@_version_option("dataset version whose languages the items must have")
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="key file to write, one item key per line",
)
def select(config_path: Path | None, version_name: str | None, out_path: Path) -> None:
    """Write the drawn (or pinned) item keys, so a version can pin them.

    Give the file to the input config as `items: {item_keys_file: FILE}`: a build
    then uses exactly these items whatever later happens to the sources.
    """
    config = load_config(config_path)
    version = _version(version_name)
    sources, selected = read_selection(config, version.config.languages)
    problems = [p for _, result in sources for p in result.problems] + selected.problems
    fatal = [p for p in problems if p.fatal]
    if fatal:
        click.echo(f"Unusable inputs ({len(fatal)}): nothing written", err=True)
        click.echo("\n".join(str(p) for p in fatal), err=True)
        sys.exit(1)
    keys = sorted(item.key for item in selected.records)
    counts = Counter(item.vulnerability_type for item in selected.records)
    out_path.write_text(_key_file_header(config_path, config, counts) + "\n".join(keys) + "\n")
    # Row problems of the sources only explain why an item is absent; the selection's own
    # (a stratum smaller than asked, a pinned key not found) change what was written.
    for problem in selected.problems:
        click.echo(str(problem), err=True)
    click.echo(f"Wrote {len(keys)} item keys to {out_path}")
    click.echo(tabulate([[v, counts[v]] for v in VULNERABILITY_TYPES], headers=["stratum", "keys"]))


def _key_file_header(config_path: Path | None, config: InputConfig, counts: Counter) -> str:
    selection = config.items
    if selection.item_keys is not None:
        how = "pinned by the config's items.item_keys"
    elif selection.item_keys_file is not None:
        how = f"pinned by the key file {selection.item_keys_file.name}"
    else:
        rules = "; ".join(
            f"{m.TITLE} "
            + ", ".join(
                f"{'all' if s.wanted is None else s.wanted} {s.name}" for s in m.strata(selection)
            )
            for m in config_sources(config)
        )
        how = f"drawn with seed {selection.seed}: {rules}"
    per_stratum = ", ".join(f"{v} {counts[v]}" for v in VULNERABILITY_TYPES)
    hashes = input_hashes(config)
    sources = ", ".join(
        f"{m.INPUT} sha256 {hashes.get(m.INPUT, '-')}" for m in config_sources(config)
    )
    return (
        "# Item keys written by `redvox sources select`, one per line.\n"
        f"# Config: {config_path or 'the embedded demo corpus'}\n"
        f"# Selection: {how}\n"
        f"# Keys: {sum(counts.values())} ({per_stratum})\n"
        f"# Sources: {sources}\n"
        "# Pin them with `items: {item_keys_file: <this file>}` in the input config.\n"
    )


def _condition_problems(bank: NoiseBank, version) -> list[Problem]:
    """A fatal problem for each noise condition of `version` that the bank cannot serve,
    found by drawing its params once, as the build does for every clip."""
    from redvox.noise import ConditionError, check_condition, sample_params

    problems = []
    for condition in version.config.conditions:
        stops = f"a build of version {version.version} stops on it"
        try:
            check_condition(condition)
            sample_params(
                condition,
                bank,
                seed=version.config.seed,
                entry_key="sources-check",
                duration_s=condition.duration_s,
            )
        except NoiseBankError as exc:
            where, _, message = str(exc).partition(": ")
            problems.append(Problem(where, None, None, f"{message} ({stops})", fatal=True))
        except ConditionError as exc:
            where = f"version {version.version}"
            problems.append(Problem(where, None, None, f"{exc} ({stops})", fatal=True))
    return problems


def _bank_table(bank: NoiseBank) -> str:
    rows = []
    for category in CATEGORIES:
        files = bank.of(category)
        folders = {f"{category}/{f.source}" for f in files}
        voices = len({f.speaker for f in files}) if category == SPEECH_CATEGORY else "-"
        unannotated = sum(folder in folders for folder in bank.unannotated)
        rows.append([category, len(folders), len(files), voices, unannotated])
    headers = ["category", "source folders", "files", "voices", "without ANNOTATIONS"]
    return tabulate(rows, headers=headers)


def _audio_problems(inputs: Inputs, progress: bool) -> list[Problem]:
    """The recordings a build would quarantine at decode time (VAD is left to the build)."""
    # The build's own decoder and checks (sources/audio.py; builder/recordings.py calls the
    # same two functions), so the check and the build quarantine the same recordings.
    from redvox.sources.audio import AudioDecodeError, audio_problems, decode_audio

    problems = []
    root = inputs.config.audio_root
    for contribution in tqdm(inputs.contributions, desc="decoding", disable=not progress):
        path = root / contribution.audio_file
        try:
            found = audio_problems(decode_audio(path, limits=inputs.config.audio_limits))
        except AudioDecodeError as exc:
            found = [str(exc).removeprefix(f"{path}: ")]
        problems += [
            Problem(str(path), None, "audio", f"{p}; the build quarantines this recording")
            for p in found
        ]
    return problems


def summary_tables(inputs: Inputs, languages: Sequence[str]) -> list[tuple[str, str]]:
    return [
        (
            "Lines read per input (each line not read is listed under problems)",
            _lines_table(inputs),
        ),
        (f"Selected items ({len(inputs.items)}) per language", _items_table(inputs, languages)),
        (
            f"Contributions ({len(inputs.contributions)}) per language",
            _language_table(inputs, languages),
        ),
        (
            "Contributions per speaker (private: participant keys)",
            _speaker_table(inputs, languages),
        ),
        ("Consent states", _consent_table(inputs)),
    ]


def _lines_table(inputs: Inputs) -> str:
    rows = []
    for read in inputs.line_counts:
        name = Path(read.file).name
        if read.lines is None:
            rows.append([read.name, name, "unusable: see below", ""])
            continue
        count = read.lines
        summary = f"{count.lines} lines read, {count.records} records"
        if count.spanned:
            summary += f" ({count.spanned} lines continue a quoted multi-line cell)"
        rows.append([read.name, name, summary, count.not_read])
    return tabulate(rows, headers=["input", "file", "read", "lines not read"])


def _items_table(inputs: Inputs, languages: Sequence[str]) -> str:
    counts = Counter(item.vulnerability_type for item in inputs.items)
    # Items are parallel, so every language has each item once.
    rows = [[vtype, *[counts[vtype]] * len(languages)] for vtype in VULNERABILITY_TYPES]
    rows.append(["total", *[len(inputs.items)] * len(languages)])
    return tabulate(rows, headers=["vulnerability_type", *languages])


def _language_table(inputs: Inputs, languages: Sequence[str]) -> str:
    recordings = Counter(c.lang for c in inputs.contributions)
    speakers = Counter(
        lang for lang, _ in {(c.lang, c.participant_key) for c in inputs.contributions}
    )
    rows = [[lang, recordings[lang], speakers[lang]] for lang in languages]
    everyone = {c.participant_key for c in inputs.contributions}
    rows.append(["total", len(inputs.contributions), len(everyone)])
    return tabulate(rows, headers=["lang", "contributions", "speakers"])


def _speaker_table(inputs: Inputs, languages: Sequence[str]) -> str:
    counts = Counter((c.participant_key, c.lang) for c in inputs.contributions)
    keys = sorted({key for key, _ in counts})
    rows = []
    for key in keys:
        per_lang = [counts[key, lang] for lang in languages]
        rows.append([key, *per_lang, sum(per_lang)])
    return tabulate(rows, headers=["participant_key", *languages, "total"]) if rows else "none"


def _consent_table(inputs: Inputs) -> str:
    keys = set(inputs.participants) | set(inputs.consent)
    states = Counter(resolve_consent(inputs.consent.get(key, [])) for key in keys)
    rows = [[state.value, states[state]] for state in ConsentState]
    rows.append(["total", len(keys)])
    return tabulate(rows, headers=["state", "participants"])

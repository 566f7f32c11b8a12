"""Everything an InputConfig names, read and validated in one call.

Readers of later inputs are told what earlier ones hold (the selected item
keys, the registered participants) so contributions are checked against them;
when an earlier input is unusable that check is skipped rather than reporting
every contribution as unknown. Consent rows are checked against the registered
participants the same way (an unregistered key is fatal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tqdm import tqdm

from redvox.schemas import ConsentRecord, Contribution, InputConfig, Participant, SourceItem
from redvox.schemas.layout import sha256_file

from .contributions import read_contributions
from .musan import ANNOTATIONS, SPEECH_CATEGORY, NoiseBank, NoiseBankError, read_noise_bank
from .problems import LineCount, Problem, ReadResult
from .registry import read_participants, read_registered_consent
from .selection import select_items
from .texts import TextInput, input_names, read_texts, strata, text_inputs, unobserved

T = TypeVar("T")

# The inputs other than the text sources (whose input keys come first, from the
# registry: `redvox.sources.texts.input_names`), in the order `redvox sources check`
# lists their line counts; the build manifest pins the bytes of all of them.
RECORD_INPUTS = ("participants", "consent", "contributions")


def hashed_inputs() -> tuple[str, ...]:
    """The input names whose bytes the build manifest pins, which are also the files a
    quarantine record can point into: every text source's (from the registry, so a source
    registered later is included), then the contributions manifest and the two
    registries."""
    return (*input_names(), *RECORD_INPUTS)


@dataclass(frozen=True)
class InputLines:
    """How the data lines of one table input were read (None: the file was unusable)."""

    name: str
    file: str
    lines: LineCount | None


@dataclass
class Inputs:
    config: InputConfig
    items: list[SourceItem]
    participants: dict[str, Participant]
    consent: dict[str, list[ConsentRecord]]
    contributions: list[Contribution]
    problems: list[Problem]
    input_hashes: dict[str, str]
    line_counts: list[InputLines] = dataclasses.field(default_factory=list)
    # contribution_lines[i]: the contributions manifest line of contributions[i]
    contribution_lines: list[int] = dataclasses.field(default_factory=list)
    # the raw cells of each contributions manifest line read as a row, by line
    contribution_rows: dict[int, dict[str, str | None]] = dataclasses.field(default_factory=dict)

    @property
    def fatal(self) -> bool:
        return any(p.fatal for p in self.problems)


def load_inputs(config: InputConfig, languages: Sequence[str], *, progress: bool = False) -> Inputs:
    """Every input of `config`, the text sources and contributions read for `languages`
    (the languages of the version being built)."""
    texts = text_inputs(config)
    bar = tqdm(
        total=len(texts) + 4, desc="reading inputs", unit="input", disable=not progress, leave=False
    )

    def step(name: str, read: Callable[[], ReadResult[T]]) -> ReadResult[T]:
        bar.set_postfix_str(name)
        result = read()
        bar.update()
        return result

    with bar:
        sources, selected = read_selection(config, languages, step)
        participants = step("participants", lambda: read_participants(config.participants))
        consent = step("consent", lambda: read_registered_consent(config.consent, participants))
        items_known = not (any(r.fatal for _, r in sources) or selected.fatal)
        contributions = step(
            "contributions",
            lambda: read_contributions(
                config.contributions,
                config.audio_root,
                item_keys={item.key for item in selected.records} if items_known else None,
                # A registry with unreadable rows is fatal, but its readable keys still
                # tell a contribution of a refused participant which row to fix.
                participant_keys=None
                if participants.lines is None
                else {p.participant_key for p in participants.records},
                refused_participants=participants.refused,
                languages=languages,
            ),
        )
    results = [*(r for _, r in sources), selected, participants, consent, contributions]
    tables = [
        *((text.source.INPUT, str(text.path), r) for text, r in sources),
        *(
            (name, str(getattr(config, name)), r)
            for name, r in zip(RECORD_INPUTS, (participants, consent, contributions), strict=True)
        ),
    ]
    return Inputs(
        config=config,
        items=selected.records,
        participants={p.participant_key: p for p in participants.records},
        consent=_by_participant(consent.records),
        contributions=contributions.records,
        contribution_lines=contributions.record_lines,
        contribution_rows=contributions.rows,
        problems=[p for r in results for p in r.problems] + _folder_problems(config),
        input_hashes=input_hashes(config),
        line_counts=[InputLines(name, file, r.lines) for name, file, r in tables],
    )


def read_selection(
    config: InputConfig,
    languages: Sequence[str],
    step: Callable[[str, Callable[[], ReadResult]], ReadResult] = unobserved,
) -> tuple[list[tuple[TextInput, ReadResult[SourceItem]]], ReadResult[SourceItem]]:
    """Each text source the config names read for `languages` (the languages of the
    version being built), and the items the config's selection takes from them: the one
    reading path of `load_inputs` and `redvox sources select`. `step(name, read)` runs
    each read (a progress bar's hook)."""
    sources = read_texts(config, languages, step)
    items = [item for _, result in sources for item in result.records]
    selected = step("items", lambda: select_items(items, config.items, strata(config)))
    return sources, selected


def _by_participant(records: list[ConsentRecord]) -> dict[str, list[ConsentRecord]]:
    grouped: dict[str, list[ConsentRecord]] = {}
    for record in records:
        grouped.setdefault(record.participant_key, []).append(record)
    return grouped


def _folder_problems(config: InputConfig) -> list[Problem]:
    # The audio folder is checked by the contributions reader; the noise bank's
    # content is read by the builder and by `sources check` (read_bank), but a
    # missing folder makes any build fail.
    if config.noise_bank.is_dir():
        return []
    message = "noise bank folder not found; check noise_bank in the input config"
    return [Problem(str(config.noise_bank), None, None, message, fatal=True)]


def read_bank(root: Path) -> tuple[NoiseBank | None, list[Problem]]:
    """The noise bank as a build reads it, and what is wrong with it: a bank the build
    would refuse is one fatal problem (its message names the file), a source folder
    without ANNOTATIONS a warning (it is read, every file its own speaker)."""
    try:
        bank = read_noise_bank(root)
    except NoiseBankError as exc:
        where, _, message = str(exc).partition(": ")
        return None, [Problem(where, None, None, message, fatal=True)]
    warnings = []
    for folder in bank.unannotated:
        category = folder.split("/", 1)[0]
        consequence = (
            "each of its files is taken as a speaker of its own, so babble may mix one voice "
            "with itself; add the file with a `speaker=<id>` field on the lines of files "
            "that share a voice"
            if category == SPEECH_CATEGORY
            else "nothing the build reads is lost, but the copy may be incomplete"
        )
        message = (
            f"warning: no {ANNOTATIONS} file (MUSAN ships one per source folder); the build "
            f"reads the folder as it is: {consequence}"
        )
        warnings.append(Problem(str(bank.root / folder), None, None, message, warning=True))
    return bank, warnings


def input_paths(config: InputConfig) -> dict[str, Path]:
    """The file of each input of `hashed_inputs()` the config names, by input name."""
    paths = {t.source.INPUT: t.path for t in text_inputs(config)}
    return paths | {name: getattr(config, name) for name in RECORD_INPUTS}


def input_hashes(config: InputConfig) -> dict[str, str]:
    """sha256 of each input file that exists, for the build manifest."""
    paths: dict[str, Path | None] = {**input_paths(config)}
    paths["item_keys_file"] = config.items.item_keys_file
    hashes = {}
    for name, path in paths.items():
        if path is not None and path.is_file():
            hashes[name] = sha256_file(path)
    return hashes

"""The contributions manifest (one row per recording) into Contributions.

A row reaches the build only when it validates, names a known item and a
registered participant, points at an existing audio file inside the audio
folder (symbolic links resolved: a link that leads outside is refused).
Several rows of one (language, item, participant) are takes of one recording:
all are kept, each with its line, and the build releases the first take that
decodes and passes VAD (builder/takes.py). One audio file belongs to one participant: when rows of two participants lead to
the same file (same path, a link or a hard link to it), every row using it is
refused, naming the others. Everything else is reported with its line.

The manifest is read one record per line (no `multiline`): its rows carry private
keys, and a quote left open must never merge the next row into this one's text. A
`lang` is read in any case (`EN` -> `en`); a path that is a symbolic link loop is
a row problem like any other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath

from redvox.schemas import Contribution
from redvox.schemas.vocab import listing

from .problems import Problem, ReadResult, validate_row
from .registry import RefusedParticipant
from .tables import TableRow, read_table
from .texts import normalize_item_id, text_source, text_sources

REQUIRED_COLUMNS = (
    "participant_key",
    "source",
    "item_id",
    "lang",
    "audio_file",
    "spoken_text",
    "speech_followup",
    "audio_request_text",
)
OPTIONAL_COLUMNS = ("discomfort", "transcript")


@dataclass
class ContributionsResult(ReadResult[Contribution]):
    """The usable rows, `record_lines[i]`: the manifest line of `records[i]`, and `rows`:
    the raw cells of every line read as a row (usable or not), by line, so a refused
    row's quarantine record can still name its language, item and participant. Lines
    the table reader rejected (`TableRead.rejected`) are not in `rows`: their cells
    may not line up with the columns."""

    record_lines: list[int] = field(default_factory=list)
    rows: dict[int, dict[str, str | None]] = field(default_factory=dict)


def read_contributions(
    path: str | Path,
    audio_root: str | Path,
    *,
    item_keys: set[str] | None = None,
    participant_keys: set[str] | None = None,
    refused_participants: Mapping[str, RefusedParticipant] | None = None,
    languages: Sequence[str] | None = None,
) -> ContributionsResult:
    """`refused_participants`: key -> where and why of participants registry rows that
    name a key but were refused, so their contributions say why instead of "not
    registered". `languages`: those of the version being built (a row in another is
    refused, naming them); None reads every language code, as the checks that look at
    all the audio (ownership of the noise bank, verify) do."""
    file = str(path)
    table = read_table(path, REQUIRED_COLUMNS, what="contributions manifest")
    result = ContributionsResult([], list(table.problems), table.lines)
    result.rows = {row.line: row.cells for row in table.records}
    root = Path(os.path.abspath(audio_root))
    if not root.is_dir():
        message = "audio folder not found; check audio_root in the input config"
        result.problems.append(Problem(str(audio_root), None, None, message, fatal=True))
        return result
    usable: list[tuple[int, Contribution, tuple[int, int]]] = []
    for row in table.records:
        contribution, problems = _contribution(row, file, languages)
        identity = None
        if contribution is not None:
            problems += _reference_problems(
                contribution, row.line, file, item_keys, participant_keys, refused_participants
            )
            identity, audio_problems = _audio_file(contribution.audio_file, root, row.line, file)
            problems += audio_problems
        result.problems.extend(problems)
        if contribution is not None and not problems:
            usable.append((row.line, contribution, identity))
    shared = _shared_files(usable, file)
    result.problems.extend(shared.values())
    for line, contribution, _ in usable:
        if line not in shared:
            result.records.append(contribution)
            result.record_lines.append(line)
    return result


def _shared_files(
    usable: list[tuple[int, Contribution, tuple[int, int]]], file: str
) -> dict[int, Problem]:
    """A problem for every row whose audio file is also used by another participant."""
    users: dict[tuple[int, int], list[tuple[int, str]]] = {}
    for line, contribution, identity in usable:
        users.setdefault(identity, []).append((line, contribution.participant_key))
    problems = {}
    for rows in users.values():
        if len({key for _, key in rows}) < 2:
            continue
        for line, key in rows:
            others = ", ".join(str(n) for n, other in rows if other != key)
            message = (
                f"the same audio file is filed under another participant on line(s) {others}; "
                "every row using it is skipped: a recording belongs to one participant, "
                "fix the audio_file of the wrong rows"
            )
            problems[line] = Problem(file, line, "audio_file", message)
    return problems


def _contribution(
    row: TableRow, file: str, languages: Sequence[str] | None
) -> tuple[Contribution | None, list[Problem]]:
    data = {name: row.cells.get(name) for name in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)}
    # The id as the source's reader writes it ('7' -> '7.0' for SHADES), so keys match.
    data["item_id"] = normalize_item_id(data["source"], data["item_id"])
    # `EN` and `en` are one language code, as header names and mother tongues are
    # normalised too; anything that is not a language of the build is still refused.
    lang = data["lang"].strip().lower() if data["lang"] else data["lang"]
    data["lang"] = lang
    contribution, problems = validate_row(Contribution, data, file, row.line)
    refused: list[Problem] = []
    if lang and languages is not None and lang not in languages:
        choices = listing([repr(code) for code in languages], "or")
        message = (
            f"{row.cells['lang']!r} is not a language of the version being built ({choices}); "
            "row skipped, fix the lang"
        )
        refused.append(Problem(file, row.line, "lang", message))
    if data["source"] and text_source(data["source"].strip()) is None:
        known = ", ".join(m.NAME for m in text_sources())
        message = f"{data['source']!r} is not a text source ({known}); row skipped, fix the source"
        refused.append(Problem(file, row.line, "source", message))
    if refused:
        fields = {p.field for p in refused}
        return None, [p for p in problems if p.field not in fields] + refused
    return contribution, problems


def _reference_problems(
    contribution: Contribution,
    line: int,
    file: str,
    item_keys: set[str] | None,
    participant_keys: set[str] | None,
    refused_participants: Mapping[str, RefusedParticipant] | None = None,
) -> list[Problem]:
    problems = []
    if item_keys is not None and contribution.item_key not in item_keys:
        message = (
            f"no item {contribution.item_key} among the {len(item_keys)} items of this build; "
            "row skipped, check source and item_id against the SHADES/M-ALERT files and the "
            "items selection of the config"
        )
        problems.append(Problem(file, line, "item_id", message))
    key = contribution.participant_key
    refused = (refused_participants or {}).get(key)
    if refused is not None and (participant_keys is None or key not in participant_keys):
        message = (
            f"participant {key!r} is registered on {Path(refused.file).name} line "
            f"{refused.line} but that row is refused: {refused.reason}; row skipped until "
            "that row is fixed"
        )
        problems.append(Problem(file, line, "participant_key", message))
    elif participant_keys is not None and key not in participant_keys:
        message = (
            f"{contribution.participant_key!r} is not in the participants registry; "
            "row skipped, register the participant or fix the key"
        )
        problems.append(Problem(file, line, "participant_key", message))
    return problems


def _audio_file(
    audio_file: str, root: Path, line: int, file: str
) -> tuple[tuple[int, int] | None, list[Problem]]:
    """The identity (device, inode) of the file `audio_file` leads to, or the problem.

    The path is resolved (symbolic links included) before it is compared with the
    audio folder, so neither `../` nor a link can reach a file outside it.
    """

    def problem(message: str) -> tuple[None, list[Problem]]:
        return None, [Problem(file, line, "audio_file", message)]

    if "\\" in audio_file:
        return problem(
            f"{audio_file!r} uses backslashes (a Windows path); row skipped, write the path "
            "with forward slashes (rv-s02/en_1.flac), relative to the audio folder"
        )
    if Path(audio_file).is_absolute() or PureWindowsPath(audio_file).is_absolute():
        return problem(
            f"{audio_file!r} is an absolute path; row skipped, give it relative to {root}"
        )
    try:
        target = (root / audio_file).resolve()
        inside = target.is_relative_to(root.resolve())
    except (RuntimeError, OSError) as exc:  # RuntimeError: a symbolic link loop (Python < 3.13)
        return problem(
            f"{audio_file!r} cannot be followed under {root} ({exc}); row skipped, point the "
            "symbolic link at the recording itself"
        )
    if not inside:
        return problem(
            f"{audio_file!r} leads outside the audio folder {root} (through '..' or a "
            "symbolic link); row skipped, give a path to a file inside it"
        )
    if not target.is_file():
        return problem(
            f"{audio_file!r} not found under {root}; row skipped, add the recording or fix the path"
        )
    stat = target.stat()
    return (stat.st_dev, stat.st_ino), []

"""Join step: each usable contribution with its item and participant; everything the
readers refused becomes a quarantine record with its file and line.

Quarantine records keep what is known about the refused contribution row
(language, item, participant) from its raw cells, which the contributions reader
keeps (`Inputs.contribution_rows`), so the report can say whose recording was
dropped (pseudonymously in the public set).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from redvox.schemas import Contribution, InputConfig, Participant, SourceItem
from redvox.schemas.records import item_key
from redvox.sources.inputs import Inputs, input_paths
from redvox.sources.problems import Problem

from .manifest import QuarantineRecord, Stage

# Inputs only the maintainers see: their problems stay out of the public report.
PRIVATE_INPUTS = ("participants", "consent")


@dataclass(frozen=True)
class Recording:
    """A contribution that joined: its item and its participant are known."""

    contribution: Contribution
    item: SourceItem
    participant: Participant
    file: str | None = None  # the contributions manifest's name, for reports
    line: int | None = None  # its row there

    @property
    def lang(self) -> str:
        return self.contribution.lang

    @property
    def participant_key(self) -> str:
        return self.contribution.participant_key


@dataclass(frozen=True)
class JoinResult:
    recordings: list[Recording]
    quarantine: list[QuarantineRecord]


def join_inputs(inputs: Inputs, languages: Iterable[str]) -> JoinResult:
    """The recordings a build can use (sorted), and a quarantine record for every
    input row the readers refused or that does not join."""
    languages = set(languages)
    items = {item.key: item for item in inputs.items}
    recordings: list[Recording] = []
    raw_rows = inputs.contribution_rows
    quarantine = problem_records(inputs.problems, inputs.config, raw_rows)
    file = Path(inputs.config.contributions).name
    lines: dict[str, int] = {}
    for line, cells in sorted(raw_rows.items()):
        lines.setdefault(cells.get("audio_file") or "", line)
    known_lines = inputs.contribution_lines
    if len(known_lines) != len(inputs.contributions):  # built by hand: look the file up
        known_lines = [lines.get(c.audio_file) for c in inputs.contributions]
    for contribution, line in zip(inputs.contributions, known_lines, strict=True):
        item = items.get(contribution.item_key)
        participant = inputs.participants.get(contribution.participant_key)
        reason = None
        if item is None:
            reason = f"item {contribution.item_key} is not among the items of this build"
        elif participant is None:
            reason = "participant not in the participants registry"
        elif contribution.lang not in languages:
            reason = f"language {contribution.lang} is not built by this version"
        if reason is not None:
            quarantine.append(_refused(contribution, reason, file, line))
        else:
            recordings.append(Recording(contribution, item, participant, file, line))
    recordings.sort(key=lambda r: (r.lang, r.contribution.item_key, r.participant_key))
    return JoinResult(recordings, quarantine)


def _refused(
    contribution: Contribution, reason: str, file: str, line: int | None
) -> QuarantineRecord:
    return QuarantineRecord(
        stage="join",
        reason=reason,
        lang=contribution.lang,
        item_key=contribution.item_key,
        participant_key=contribution.participant_key,
        audio_file=contribution.audio_file,
        file=file,
        row=line,
        input="contributions",
    )


def recording_quarantine(
    recording: Recording, stage: Stage, reason: str, public_reason: str | None = None
) -> QuarantineRecord:
    """A joined recording excluded by a later step (decode, VAD, ownership, consent)."""
    contribution = recording.contribution
    return QuarantineRecord(
        stage=stage,
        reason=reason,
        lang=contribution.lang,
        item_key=contribution.item_key,
        participant_key=contribution.participant_key,
        audio_file=contribution.audio_file,
        file=recording.file,
        row=recording.line,
        input="contributions",
        public_reason=public_reason,
    )


def problem_records(
    problems: Iterable[Problem], config: InputConfig, rows: dict[int, dict[str, str | None]]
) -> list[QuarantineRecord]:
    """One record per non-fatal reader problem, with the contribution row's language,
    item and participant when the problem points into the contributions manifest."""
    contributions_file = str(config.contributions)
    private = {str(getattr(config, name)) for name in PRIVATE_INPUTS}
    names = {str(path): name for name, path in input_paths(config).items()}
    records = []
    for problem in problems:
        if problem.fatal or problem.warning:  # a warning rejected nothing
            continue
        cells = rows.get(problem.row, {}) if problem.file == contributions_file else {}
        records.append(
            QuarantineRecord(
                stage="join",
                reason=_portable(problem.message, config),
                lang=cells.get("lang"),
                item_key=_item_key(cells),
                participant_key=cells.get("participant_key"),
                audio_file=cells.get("audio_file"),
                file=Path(problem.file).name,
                row=problem.row,
                field=problem.field,
                private=problem.file in private,
                input=names.get(problem.file),
            )
        )
    return records


def _item_key(cells: dict[str, str | None]) -> str | None:
    if cells.get("source") and cells.get("item_id"):
        return item_key(cells["source"], cells["item_id"])
    return None


def _portable(message: str, config: InputConfig) -> str:
    """Reader messages name absolute folders; reports must not (they differ per machine)."""
    for name in ("audio_root", "noise_bank"):
        message = message.replace(str(getattr(config, name)), f"<{name}>")
    return message

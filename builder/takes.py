"""One recording per (language, item, participant): the first take that passed.

A participant may record an item more than once (a retake after a bad first
attempt). The contributions reader keeps every take with its line; this step
runs after decode, VAD and the ownership check, so a corrupt first take cannot
knock out a valid retake. Per key, in manifest line order, the first take with
audio is released and every later take that passed too is quarantined as a
superseded take of it. When no take passed, each keeps its own decode, VAD or
ownership reason.

The key's text rows (the variants that do not use the recording) come once per
key, not once per take: `expand_rows` is given one recording per key, the
released take or, when none passed, the first take (which then gives no spoken
row, like any recording refused by decode or VAD).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .join import Recording, recording_quarantine
from .manifest import SUPERSEDED_TAKE

if TYPE_CHECKING:
    from .recordings import SpeechOutcome


@dataclass(frozen=True)
class Takes:
    """`outcomes`: one per recording, superseded takes quarantined (for the reports);
    `recordings`/`chosen`: one recording per key and its outcome, for the rows."""

    outcomes: list[SpeechOutcome]
    recordings: list[Recording]
    chosen: list[SpeechOutcome]


def take_key(recording: Recording) -> tuple[str, str, str]:
    return recording.contribution.key


def resolve_takes(recordings: Sequence[Recording], outcomes: Sequence[SpeechOutcome]) -> Takes:
    """The first passing take of every key released, the others quarantined."""
    if len(recordings) != len(outcomes):
        raise ValueError("one outcome per recording")
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, recording in enumerate(recordings):
        groups.setdefault(take_key(recording), []).append(i)
    result = list(outcomes)
    chosen_index: dict[tuple[str, str, str], int] = {}
    for key, members in groups.items():
        members.sort(key=lambda i: (_line(recordings[i]), i))
        passed = [i for i in members if outcomes[i].audio is not None]
        first = passed[0] if passed else members[0]
        chosen_index[key] = first
        if not passed:
            continue
        for i in passed[1:]:
            line = recordings[first].line
            where = (
                f"line {line}" if line is not None else recordings[first].contribution.audio_file
            )
            reason = (
                f"{SUPERSEDED_TAKE} of {where}: an earlier take of the same language, item "
                "and participant passed and is released; keep one take per recording"
            )
            result[i] = replace(
                outcomes[i],
                audio=None,
                quarantine=recording_quarantine(
                    recordings[i], "takes", reason, public_reason=SUPERSEDED_TAKE
                ),
            )
    order = sorted(chosen_index.values())
    return Takes(result, [recordings[i] for i in order], [result[i] for i in order])


def _line(recording: Recording) -> int:
    return recording.line if recording.line is not None else 1 << 62

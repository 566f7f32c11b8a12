"""Consent: which participants reach which set, decided once per participant.

Deny by default (docs/ARCHITECTURE.md, "Rules"): no record, an ambiguous record or any
withdrawal excludes. The full set keeps participation consent; the public set
also needs public-release consent. The audit counts exclusions per reason and
never names anyone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from redvox.schemas import ConsentRecord, ConsentState, resolve_consent
from redvox.schemas.vocab import FULL, PUBLIC, DatasetSet

from .manifest import ConsentAudit, Tally


def consent_states(
    participant_keys: Iterable[str], registry: Mapping[str, list[ConsentRecord]]
) -> dict[str, ConsentState]:
    """The consent state of every participant key (those missing from the registry: NO_RECORD)."""
    return {
        key: resolve_consent(list(registry.get(key, ()))) for key in sorted(set(participant_keys))
    }


def admitted_keys(states: Mapping[str, ConsentState], dataset_set: DatasetSet) -> set[str]:
    """Participant keys whose rows may enter `dataset_set`."""
    return {key for key, state in states.items() if state.allows(dataset_set)}


class _HasParticipant(Protocol):
    participant_key: str


Row = TypeVar("Row", bound=_HasParticipant)


def rows_for_set(
    rows: Iterable[Row], states: Mapping[str, ConsentState], dataset_set: DatasetSet
) -> list[Row]:
    """The rows of participants admitted to `dataset_set`; a participant missing from
    `states` has no consent record and is excluded."""
    admitted = admitted_keys(states, dataset_set)
    return [row for row in rows if row.participant_key in admitted]


def admitted_to_any(state: ConsentState, sets: Iterable[DatasetSet]) -> bool:
    """Whether the build may touch this participant's audio at all."""
    return any(state.allows(s) for s in sets)


def consent_audit(
    states: Mapping[str, ConsentState],
    recordings_per_participant: Mapping[str, int],
    dataset_set: DatasetSet,
) -> ConsentAudit:
    """Counts for `consent_audit.json`: participants and recordings kept, and excluded
    per consent state. Only numbers: the file may be published with the set."""
    kept = [k for k, s in states.items() if s.allows(dataset_set)]
    excluded = Counter(s.value for s in states.values() if not s.allows(dataset_set))
    excluded_recordings: Counter[str] = Counter()
    for key, state in states.items():
        if not state.allows(dataset_set):
            excluded_recordings[state.value] += recordings_per_participant.get(key, 0)
    return ConsentAudit(
        dataset_set=dataset_set,
        rule=_RULES[dataset_set],
        participants=Tally(kept=len(kept), excluded=dict(sorted(excluded.items()))),
        recordings=Tally(
            kept=sum(recordings_per_participant.get(k, 0) for k in kept),
            excluded=dict(sorted(excluded_recordings.items())),
        ),
    )


_RULES: dict[str, str] = {
    FULL: "participation consent given, no withdrawal",
    PUBLIC: "participation and public-release consent given, no withdrawal",
}

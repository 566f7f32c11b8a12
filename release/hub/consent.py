"""The consent re-check every release step makes: who is in a set, against the
registries as they read today.

Represent, stage, verify and push each read the private registries through the
build's own reader (`sources.registry.read_registries`): a row the build would
refuse stops them, naming the file and the line. They then derive the consent
state of every registered participant and its user_id (the keyed HMAC of the key,
builder/pseudonym.py), and refuse a set that holds any user_id whose state does
not allow that set, whatever the set's folder is called (a `full/` copied over
`public/` is refused as the full set it is). The registries must also be the
bytes the build read (builder/provenance.py): consent that changed since the
build means a rebuild.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from redvox.schemas import ConsentState, InputConfig
from redvox.schemas.errors import UserError
from redvox.schemas.layout import shard_paths


class ConsentRecheckError(UserError, RuntimeError):
    """A release step refused on consent grounds; the message says what to fix."""


@dataclass(frozen=True)
class ConsentView:
    """The consent of every registered participant today, by user_id."""

    consent_file: Path
    participant_keys: frozenset[str]
    states: dict[str, ConsentState]  # user_id -> state

    def allowed(self, dataset_set: str) -> frozenset[str]:
        from redvox.builder.consent import admitted_keys

        return frozenset(admitted_keys(self.states, dataset_set))  # keyed by user_id here

    def why_not(self, user_id: str) -> str:
        state = self.states.get(user_id)
        return "no registered participant has it" if state is None else state.value


def read_consent_view(config: InputConfig) -> ConsentView:
    """The registries of `config`, read fail-closed; ConsentRecheckError on the first row
    the build would refuse."""
    from redvox.builder.consent import consent_states
    from redvox.builder.pseudonym import load_pseudonym_key, pseudonymize
    from redvox.sources.registry import read_registries

    registries = read_registries(config.participants, config.consent)
    problem = registries.first_fatal()
    if problem is not None:
        raise ConsentRecheckError(
            f"{problem}; nothing is released until the registries read as the build reads them"
        )
    keys = {p.participant_key for p in registries.participants.records}
    states = consent_states(keys, registries.by_participant())
    secret = load_pseudonym_key(config.pseudonym_key_file)
    return ConsentView(
        Path(config.consent),
        frozenset(keys),
        {pseudonymize(secret, key): state for key, state in states.items()},
    )


def release_consent(
    config: InputConfig, version_dir: Path | None, config_name: str = "the input config"
) -> ConsentView:
    """The consent view a release step of the build in `version_dir` (None: a staged
    folder away from its build) decides with; refused when the registries changed since
    the build."""
    from redvox.builder.provenance import check_inputs

    view = read_consent_view(config)
    if version_dir is not None:
        check_inputs(Path(version_dir), config, config_name, other_inputs=True)
    return view


def user_ids_of(folder: Path) -> Counter[str]:
    """user_id -> rows, over every shard of a built or staged set (only that column read)."""
    counts: Counter[str] = Counter()
    for shard in shard_paths(folder):
        counts.update(pq.read_table(shard, columns=["user_id"]).column("user_id").to_pylist())
    return counts


def outsiders(user_ids: Counter[str], view: ConsentView, dataset_set: str) -> dict[str, int]:
    """user_id -> rows, for the user_ids that may not be in `dataset_set` today."""
    allowed = view.allowed(dataset_set)
    return {uid: n for uid, n in sorted(user_ids.items()) if uid not in allowed}


def outsiders_message(
    folder: Path, found: dict[str, int], view: ConsentView, dataset_set: str
) -> str:
    first = next(iter(found))
    return (
        f"{folder}: {len(found)} speaker(s) ({sum(found.values())} rows) have no consent for "
        f"the {dataset_set} set in {view.consent_file} today (e.g. user_id {first}: "
        f"{view.why_not(first)}); whatever the folder is called, it is not the {dataset_set} "
        "set of these registries: rebuild the version with the current registries and "
        "release the folder the build wrote"
    )


def refuse_outsiders(folder: Path, view: ConsentView, dataset_set: str) -> None:
    found = outsiders(user_ids_of(folder), view, dataset_set)
    if found:
        raise ConsentRecheckError(outsiders_message(folder, found, view, dataset_set))

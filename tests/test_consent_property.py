"""Over random consent registries: no public row ever belongs to a participant
without public consent or with a withdrawal, and no full-set row to one without
participation consent (deny by default)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from redvox.builder.consent import consent_audit, consent_states, rows_for_set
from redvox.schemas import ConsentRecord

KEYS = [f"p{i:02d}" for i in range(8)]

answers = st.sampled_from([True, False, None])
records = st.builds(
    ConsentRecord,
    participant_key=st.sampled_from(KEYS),
    participation_consent=answers,
    public_release_consent=answers,
    withdrawal_date=st.one_of(st.none(), st.dates(dt.date(2024, 1, 1), dt.date(2030, 1, 1))),
    consent_form_version=st.sampled_from([None, "v1.0", "v1.1"]),
)


@dataclass(frozen=True)
class Row:
    participant_key: str
    audio_type: str


rows = st.lists(
    st.builds(Row, st.sampled_from(KEYS), st.sampled_from(["speech", "silence", "noise_a"])),
    max_size=40,
)


def registry_of(recs: list[ConsentRecord]) -> dict[str, list[ConsentRecord]]:
    registry: dict[str, list[ConsentRecord]] = {}
    for rec in recs:
        registry.setdefault(rec.participant_key, []).append(rec)
    return registry


def clearly_public(recs: list[ConsentRecord]) -> bool:
    """The oracle, straight from the consent rules: at least one record, none withdrawn,
    every record a complete yes to both questions."""
    return bool(recs) and all(
        r.withdrawal_date is None
        and r.consent_form_version
        and r.participation_consent is True
        and r.public_release_consent is True
        for r in recs
    )


def clearly_participating(recs: list[ConsentRecord]) -> bool:
    if not recs or any(r.withdrawal_date is not None for r in recs):
        return False
    if not all(r.consent_form_version and r.participation_consent is True for r in recs):
        return False
    # Records that disagree about public release are ambiguous: excluded.
    return len({r.public_release_consent is True for r in recs}) == 1


@settings(max_examples=300, deadline=None)
@given(registry=st.lists(records, max_size=12), built=rows)
def test_public_rows_only_from_clear_public_consent(registry, built):
    by_key = registry_of(registry)
    states = consent_states({r.participant_key for r in built}, by_key)
    public = rows_for_set(built, states, "public")
    full = rows_for_set(built, states, "full")
    for row in public:
        assert clearly_public(by_key.get(row.participant_key, []))
    for row in full:
        assert clearly_participating(by_key.get(row.participant_key, []))
    assert set(public) <= set(full)
    # and nothing consented is lost
    assert [r for r in built if clearly_public(by_key.get(r.participant_key, []))] == public


@settings(max_examples=100, deadline=None)
@given(registry=st.lists(records, max_size=12), built=rows)
def test_audit_accounts_for_every_participant_and_recording(registry, built):
    states = consent_states({r.participant_key for r in built}, registry_of(registry))
    per_participant = {k: sum(r.participant_key == k for r in built) for k in states}
    for dataset_set in ("full", "public"):
        audit = consent_audit(states, per_participant, dataset_set)
        people = audit.participants
        assert people.kept + sum(people.excluded.values()) == len(states)
        recs = audit.recordings
        assert recs.kept == len(rows_for_set(built, states, dataset_set))
        assert recs.kept + sum(recs.excluded.values()) == len(built)
        assert not any(key in str(audit) for key in KEYS), "the audit must not name anyone"

"""`builder_version`: the first declared version whose config produces the row unchanged."""

from __future__ import annotations

from redvox.builder.rows import built_by
from redvox.builder.versions import VERSIONS, DatasetVersion
from redvox.schemas import Entry


def _next(version: DatasetVersion, number: str, **config) -> DatasetVersion:
    return DatasetVersion(
        version=number,
        release_notes="test",
        config=version.config.model_copy(update=config),
    )


def test_1_1_0_keeps_1_0_0_on_the_rows_it_carries_over():
    v11 = VERSIONS["1.1.0"]
    for audio_type in ("speech", "silence", "noise_a", "noise_b"):
        assert built_by(v11, audio_type, "en") == "1.0.0"
    assert built_by(v11, "speech_noise_a", "en") == "1.1.0"
    assert built_by(VERSIONS["1.0.0"], "speech", "it") == "1.0.0"


def test_a_changed_condition_or_seed_makes_new_rows():
    v11 = VERSIONS["1.1.0"]
    louder = v11.config.conditions[1].model_copy(update={"params": {"level_dbfs": [-20.0, -10.0]}})
    conditions = (v11.config.conditions[0], louder, *v11.config.conditions[2:])
    changed = _next(v11, "2.0.0", conditions=conditions)
    assert built_by(changed, "noise_a", "en") == "2.0.0"
    assert built_by(changed, "silence", "en") == "1.0.0"
    reseeded = _next(v11, "2.0.0", seed=1)
    assert {built_by(reseeded, a, "en") for a in ("speech", "silence")} == {"2.0.0"}


def test_an_undeclared_version_with_the_same_config_keeps_the_earlier_versions():
    # e.g. the next MAJOR version a withdrawal builds: the remaining rows are unchanged
    withdrawal = _next(VERSIONS["1.1.0"], "2.0.0")
    assert built_by(withdrawal, "speech", "de") == "1.0.0"
    assert built_by(withdrawal, "speech_noise_a", "de") == "1.1.0"


def test_the_column_description_says_so():
    description = Entry.model_fields["builder_version"].description
    assert "first built" in description and "keeps" in description

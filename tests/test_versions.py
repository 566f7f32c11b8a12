"""Versions as code: a released configuration never changes silently, and each new
version bumps the part its changes require (docs/ARCHITECTURE.md, "Version bump rules")."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from redvox.builder import versions
from redvox.builder.versions import (
    VERSIONS,
    BuildConfig,
    bump_between,
    bump_is_enough,
    get_version,
    read_lock,
    required_bump,
)
from redvox.schemas import COLUMNS, ItemSelection, NoiseCondition

HOW_TO = (
    "a released configuration is frozen: declare a new version with a release note in "
    "builder/versions.py, then run `python -m redvox.builder.versions` to pin it"
)


def ordered_versions():
    return sorted(VERSIONS.values(), key=lambda v: v.parts)


def test_every_declared_version_is_pinned_with_its_config_hash():
    lock = read_lock()
    for name, version in VERSIONS.items():
        assert name in lock, (
            f"version {name} is not pinned; run `python -m redvox.builder.versions`"
        )
        assert lock[name]["config_hash"] == version.config.config_hash(), (
            f"the configuration of {name} changed: {HOW_TO}"
        )


def test_pinned_versions_are_still_declared():
    missing = set(read_lock()) - set(VERSIONS)
    assert not missing, f"pinned versions {missing} are no longer declared; released versions stay"


def test_each_version_has_its_own_release_note():
    notes = [v.release_notes.strip() for v in VERSIONS.values()]
    assert all(notes)
    assert len(set(notes)) == len(notes), "a new version needs a note saying what changed"


@pytest.mark.parametrize("pair", range(len(VERSIONS) - 1))
def test_consecutive_versions_bump_what_their_changes_require(pair):
    previous, current = ordered_versions()[pair : pair + 2]
    required, reasons = required_bump(previous.config, current.config)
    actual = bump_between(previous, current)
    assert bump_is_enough(actual, required), (
        f"{previous.version} -> {current.version} is a {actual} bump but needs {required}: "
        + "; ".join(reasons)
    )


def test_latest_version_declares_the_columns_the_builder_writes():
    assert get_version().config.columns == COLUMNS, (
        "Entry's columns changed: declare a new version (added columns: MINOR) listing them"
    )


def test_1_1_0_only_adds_a_condition_to_1_0_0():
    required, reasons = required_bump(VERSIONS["1.0.0"].config, VERSIONS["1.1.0"].config)
    assert (required, reasons) == ("minor", ["condition speech_noise_a added"])


BASE = VERSIONS["1.0.0"].config
EXTRA = NoiseCondition(name="noise_c", kind="babble", params={"speakers": [3, 5]})


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"conditions": (*BASE.conditions, EXTRA)}, "minor"),
        ({"columns": (*BASE.columns, "snr_db")}, "minor"),
        ({"conditions": BASE.conditions[:-1]}, "major"),
        ({"columns": BASE.columns[:-1]}, "major"),
        ({"seed": BASE.seed + 1}, "major"),
        ({"items": ItemSelection(seed=1)}, "major"),
        ({"vad": BASE.vad.model_copy(update={"threshold": 0.6})}, "major"),
        ({"languages": ("en", "de")}, "major"),
        (
            {
                "conditions": (
                    *BASE.conditions[:-1],
                    BASE.conditions[-1].model_copy(update={"params": {"speakers": [3, 5]}}),
                )
            },
            "major",
        ),
        (
            {
                "representativeness": BASE.representativeness.model_copy(
                    update={"max_cramers_v": 0.2}
                )
            },
            "patch",
        ),
    ],
)
def test_bump_rules(change, expected):
    changed = BASE.model_copy(update=change)
    assert required_bump(BASE, changed)[0] == expected


def test_pinning_adds_new_versions_and_never_rewrites_a_pin(tmp_path):
    lock = tmp_path / "versions.lock.json"
    lock.write_text(json.dumps({"1.0.0": {"config_hash": "frozen"}}))
    added = versions.pin_new_versions(lock)
    pinned = json.loads(lock.read_text())
    assert added == [v for v in VERSIONS if v != "1.0.0"]
    assert pinned["1.0.0"] == {"config_hash": "frozen"}
    assert pinned["1.1.0"]["config_hash"] == VERSIONS["1.1.0"].config.config_hash()


def test_unknown_version_lists_the_declared_ones():
    with pytest.raises(KeyError, match="1.0.0, 1.1.0"):
        get_version("9.9.9")
    assert get_version("v1.0.0") is VERSIONS["1.0.0"]


def declare(**changes) -> BuildConfig:
    """A config built the way `VERSIONS` declares one, so validation runs."""
    return BuildConfig(
        **{**BASE.model_dump(exclude={"conditions"}), "conditions": BASE.conditions, **changes}
    )


def test_a_config_asking_for_another_sample_rate_is_refused():
    with pytest.raises(ValidationError, match="this builder writes 16 kHz only"):
        declare(sample_rate=22_050)


def test_a_clip_condition_must_last_clip_s():
    longer = NoiseCondition(name="noise_long", kind="ambient", duration_s=8.0)
    with pytest.raises(ValidationError, match="'noise_long'.*8.0 s clips but clip_s is 6.0"):
        declare(conditions=(*BASE.conditions, longer))
    with pytest.raises(ValidationError, match="'silence'"):
        declare(clip_s=4.0)
    # a condition mixed onto the recording lasts as long as the recording
    mixed = NoiseCondition(name="speech_noise_x", kind="speech_ambient", duration_s=3.0)
    assert declare(conditions=(*BASE.conditions, mixed)).clip_s == 6.0

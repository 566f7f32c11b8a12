"""Seeded generators, validation of a condition's ranges, and the level arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from redvox import noise
from redvox.builder.variants import VariantError, load_condition
from redvox.builder.versions import VERSIONS
from redvox.noise.levels import dbfs, scale_to_dbfs, snr_db
from redvox.noise.seeding import draw_offset, rng_for
from redvox.schemas import NoiseCondition, UserError


def test_rng_depends_on_seed_entry_and_condition_only():
    draws = rng_for(1, "en/a", "noise_a").random(4)
    np.testing.assert_array_equal(rng_for(1, "en/a", "noise_a").random(4), draws)
    for other in (
        rng_for(2, "en/a", "noise_a"),
        rng_for(1, "en/b", "noise_a"),
        rng_for(1, "en/a", "noise_b"),
    ):
        assert not np.array_equal(other.random(4), draws)


def test_rng_ignores_global_random_state():
    np.random.seed(0)
    first = rng_for(5, "k", "c").random()
    np.random.seed(1)
    assert rng_for(5, "k", "c").random() == first


def test_offset_stays_inside_the_file_and_is_zero_for_a_short_file():
    rng = np.random.default_rng(0)
    offsets = [draw_offset(rng, 8.0, 6.0) for _ in range(200)]
    assert 0.0 <= min(offsets) and max(offsets) <= 2.0
    assert all(round(o, 3) == o for o in offsets)
    assert draw_offset(rng, 1.5, 6.0) == 0.0


def test_every_declared_condition_is_valid():
    for version in VERSIONS.values():
        for condition in version.config.conditions:
            noise.check_condition(condition)


def condition(kind: str, **params) -> NoiseCondition:
    return NoiseCondition(name="noise_z", kind=kind, params=params)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (condition("ambient", level_dbfs=[-20.0, -30.0]), "min -20.0 is greater than max -30.0"),
        (condition("ambient", level_dbfs=[-30.0, 3.0]), r"max 3.0 is above 0.0"),
        (condition("ambient", level_dbfs=-30.0), "is not a \\[min, max\\] range"),
        (condition("ambient"), r"params.level_dbfs: missing"),
        (condition("ambient", level_dbfs=[-30, -20], snr=[0, 5]), r"unknown params \['snr'\]"),
        (condition("babble", speakers=[0, 3], level_dbfs=[-30, -20]), "min 0 must be >= 1"),
        (condition("babble", speakers=[3.5, 7], level_dbfs=[-30, -20]), "two integers"),
        (condition("speech_ambient", snr_db=[15, 10]), "min 15 is greater than max 10"),
        (condition("speech_ambient", snr_db=[float("nan"), 10]), "must be finite"),
        (condition("silence", level_dbfs=[-30, -20]), "takes no params"),
    ],
)
def test_bad_params_name_the_condition_and_field(bad: NoiseCondition, message: str):
    with pytest.raises(ValueError, match=message) as err:
        noise.check_condition(bad)
    assert "'noise_z'" in str(err.value)


def test_levels_in_dbfs():
    t = np.arange(16_000) / 16_000
    sine = np.sin(2 * np.pi * 440 * t)
    assert dbfs(sine) == pytest.approx(-3.01, abs=0.01)
    assert dbfs(scale_to_dbfs(sine, -30.0)) == pytest.approx(-30.0, abs=1e-9)
    assert snr_db(sine, 0.1 * sine) == pytest.approx(20.0)
    assert dbfs(np.zeros(10)) == -np.inf
    with pytest.raises(ValueError, match="digital silence"):
        scale_to_dbfs(np.zeros(10), -30.0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (condition("speech_ambient", snr_db=[0, 1e308]), r"params.snr_db: max 1e\+308 is above 60"),
        (condition("speech_ambient", snr_db=[-30, 10]), r"params.snr_db: min -30 must be >= -20"),
        (condition("speech_ambient", snr_db=[0, 10**400]), r"params.snr_db: max 1000.* is above"),
        (
            condition("ambient", level_dbfs=[-400, -30]),
            r"params.level_dbfs: min -400 must be >= -80",
        ),
        (condition("ambient", level_dbfs=[float("nan"), -30]), r"level_dbfs: .* must be finite"),
        (
            condition("babble", speakers=[0, 3], level_dbfs=[-30, -20]),
            "speakers: min 0 must be >= 1",
        ),
        (condition("babble", speakers=[3, 100], level_dbfs=[-30, -20]), "max 100 is above 16"),
    ],
)
def test_params_outside_physical_bounds_are_user_errors(bad: NoiseCondition, message: str):
    with pytest.raises(noise.ConditionError, match=message) as err:
        noise.check_condition(bad)
    assert isinstance(err.value, UserError) and "'noise_z'" in str(err.value)
    assert "must lie within [" in str(err.value)


def test_condition_name_and_duration_are_bounded():
    assert NoiseCondition(name="n" * 64, kind="silence").name == "n" * 64
    for bad in (
        {"name": "n" * 5000},
        {"name": "Noise"},
        {"name": "noise_z", "duration_s": float("nan")},
        {"name": "noise_z", "duration_s": float("inf")},
        {"name": "noise_z", "duration_s": 0},
    ):
        with pytest.raises(ValidationError) as err:
            NoiseCondition(kind="silence", **bad)
        assert ("duration_s" if "duration_s" in bad else "name") in str(err.value)


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("name: noise_z\nkind: speech_ambient\nparams: {snr_db: [0, 1e308]}\n", "snr_db"),
        ("name: noise_z\nkind: ambient\nparams: {level_dbfs: [-400, -30]}\n", "level_dbfs"),
        (
            "name: noise_z\nkind: babble\nparams: {speakers: [0, 3], level_dbfs: [-30, -20]}\n",
            "speakers",
        ),
        ("name: noise_z\nkind: ambient\nparams: {level_dbfs: [.nan, -30]}\n", "level_dbfs"),
        (f"name: {'n' * 5000}\nkind: silence\n", "name"),
    ],
)
def test_variants_add_reports_a_bad_condition_file_in_one_line(tmp_path, yaml_text, field):
    path = tmp_path / "condition.yaml"
    path.write_text(yaml_text)
    with pytest.raises(VariantError, match="not a usable noise condition") as err:
        load_condition(path)
    assert field in str(err.value)

"""The tests every registered noise kind gets, derived from what the kind declares
(`BOUNDS`, `MIXES_SPEECH`, `PARAMS`): a kind added to the registry is covered here
without editing this file (`test_a_registered_kind_gets_these_tests` shows it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_noise_kinds import make_bank, speech_recording

from redvox import noise
from redvox.noise.levels import num_samples
from redvox.schemas import NoiseCondition
from redvox.sources.musan import NoiseBank, read_noise_bank

SEED = 20260601
DURATION_S = 2.0
KEYS = [f"en/m-alert:{n}/u/x" for n in range(6)]


@pytest.fixture(scope="module")
def bank(tmp_path_factory) -> NoiseBank:
    return make_bank(tmp_path_factory.mktemp("bank"))


def full_ranges(module) -> dict[str, list[float]]:
    """The widest valid params of a kind: each range spans its bound."""
    return {key: [bound.low, bound.high] for key, bound in module.BOUNDS.items()}


def condition_of(module, params: dict, sampling: str = "per_entry") -> NoiseCondition:
    return NoiseCondition(
        name="noise_t", kind=module.KIND, params=params, duration_s=DURATION_S, sampling=sampling
    )


def draw_and_render(module, bank: NoiseBank, entry_key: str):
    """(params JSON, audio) of one clip of the kind's widest condition."""
    speech = speech_recording(1.5) if module.MIXES_SPEECH else None
    duration = speech.size / 16_000 if module.MIXES_SPEECH else None
    params = noise.sample_params(
        condition_of(module, full_ranges(module)), bank,
        seed=SEED, entry_key=entry_key, duration_s=duration,
    )  # fmt: skip
    return params, noise.render(params, bank, speech=speech), speech


def same_samples(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical float32 audio. A plain bool, so a failed assert prints the message, not
    pytest's diff of two byte strings: that diff is quadratic in their length and, with
    pytest's truncation off (it is off when CI is set), ran past 60 s for one 2 s clip
    here and past an hour in CI."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_render(module, bank: NoiseBank) -> None:
    params, audio, speech = draw_and_render(module, bank, KEYS[0])
    length = speech.size if module.MIXES_SPEECH else num_samples(DURATION_S)
    assert audio.dtype == np.float32 and audio.shape == (length,)
    assert np.isfinite(audio).all() and float(np.abs(audio).max()) <= 1.0


def check_determinism(module, bank: NoiseBank) -> None:
    first, audio, _ = draw_and_render(module, bank, KEYS[0])
    again, audio_again, _ = draw_and_render(module, read_noise_bank(bank.root), KEYS[0])
    assert first.to_json() == again.to_json(), "the same seed and key drew other params"
    assert same_samples(audio, audio_again), "the same params rendered other audio"
    if module.BOUNDS:  # something is drawn: other entries draw otherwise
        drawn = {draw_and_render(module, bank, key)[0].to_json() for key in KEYS}
        assert len(drawn) > 1, "every entry key drew the same params"


def check_round_trip(module, bank: NoiseBank) -> None:
    params, audio, speech = draw_and_render(module, bank, KEYS[1])
    again = noise.params_from_json(params.to_json())
    assert again == params and type(again) is module.PARAMS
    rendered = noise.render(again, bank, speech=speech)
    assert same_samples(rendered, audio), "params read back from JSON rendered other audio"


def bound_violations(module) -> list[tuple[dict, str]]:
    """(params, the error it must raise) for each way a condition can leave the bounds."""
    valid = full_ranges(module)
    cases = [({**valid, "zz_unknown": [0, 1]}, r"unknown params \['zz_unknown'\]")]
    for key, bound in module.BOUNDS.items():
        where = rf"params\.{key}: "
        low, high = bound.low, bound.high
        cases += [
            ({**valid, key: [low - 1, high]}, where + rf"min {low - 1} must be >= {low}"),
            ({**valid, key: [low, high + 1]}, where + rf"max {high + 1} is above {high}"),
            ({**valid, key: [high, low]}, where + "min .* is greater than max"),
            ({**valid, key: low}, where + r".* is not a \[min, max\] range"),
            ({k: v for k, v in valid.items() if k != key}, where + "missing"),
            ({**valid, key: [math.nan, high]}, where + ".*(finite|integers)"),
        ]
        if bound.integer:
            cases.append(({**valid, key: [low + 0.5, high]}, where + ".*two integers"))
    return cases


def check_bounds(module) -> None:
    noise.check_condition(condition_of(module, full_ranges(module)))  # the bounds are inclusive
    for params, message in bound_violations(module):
        with pytest.raises(noise.ConditionError, match=message):
            noise.check_condition(condition_of(module, params))


CHECKS = {"renders": check_render, "determinism": check_determinism, "round_trip": check_round_trip}


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("kind", sorted(noise.KINDS))
def test_every_kind(kind: str, check: str, bank: NoiseBank):
    CHECKS[check](noise.KINDS[kind], bank)


@pytest.mark.parametrize("kind", sorted(noise.KINDS))
def test_every_kind_refuses_params_outside_its_bounds(kind: str):
    check_bounds(noise.KINDS[kind])

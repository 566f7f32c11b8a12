"""Kind `babble`: excerpts of several distinct MUSAN speakers, each at the same level,
summed and brought to an absolute RMS level (Kaldi/VoxCeleb recipes use 3-7).

Speakers are distinct by `NoiseFile.speaker`, so two files of one voice never
make a "crowd" of one. A bank with fewer voices than the range's maximum (but at
least its minimum) caps the number drawn at the voices it has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from redvox.schemas import NoiseCondition
from redvox.sources.musan import NoiseBank, NoiseBankError, NoiseFile

from .kind import ClipParams, field_values
from .levels import LEVEL_DBFS, clip_to_full_scale, is_silent, num_samples, scale_to_dbfs
from .seeding import Bound, ConditionError, checked_ranges, draw_db, draw_offset, usable_files

KIND = "babble"
MIXES_SPEECH = False
# Distinct voices: one is no crowd's worth of babble below 1, and above 16 it is a noise floor.
BOUNDS = {"speakers": Bound(1, 16, "speakers", integer=True), "level_dbfs": LEVEL_DBFS}


@dataclasses.dataclass(frozen=True)
class BabbleVoice:
    speaker: str
    file: str  # relative to the bank's root
    offset_s: float

    @classmethod
    def from_dict(cls, data: Any) -> BabbleVoice:
        if not isinstance(data, Mapping):
            raise ConditionError(f"babble params: a voice is {data!r}, not an object")
        return cls(**field_values(cls, data, "babble voice"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BabbleParams(ClipParams, kind=KIND):
    speakers: tuple[BabbleVoice, ...]
    level_dbfs: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BabbleParams:
        speakers = data.get("speakers")
        if not isinstance(speakers, list | tuple):
            raise ConditionError(f"babble params: speakers is {speakers!r}, not a list")
        voices = tuple(BabbleVoice.from_dict(voice) for voice in speakers)
        return super().from_dict({**data, "speakers": voices})


PARAMS = BabbleParams


def check_condition(condition: NoiseCondition) -> dict[str, tuple[float, float]]:
    return checked_ranges(condition, BOUNDS)


def sample_params(
    rng: np.random.Generator,
    condition: NoiseCondition,
    bank: NoiseBank,
    *,
    duration_s: float | None = None,
) -> BabbleParams:
    """Draws, in this order: how many speakers, which ones, then per speaker a file and
    an offset, then the level of the mix."""
    ranges = check_condition(condition)
    by_speaker = _files_by_speaker(bank)
    fewest, most = ranges["speakers"]
    if len(by_speaker) < fewest:
        raise NoiseBankError(
            f"{bank.root}: condition {condition.name!r} needs at least {fewest} distinct speakers "
            f"in {bank.root / 'speech'}, found {len(by_speaker)}; add speech files of other voices"
        )
    count = int(rng.integers(fewest, min(most, len(by_speaker)) + 1))
    names = sorted(by_speaker)
    speakers = []
    for index in rng.choice(len(names), size=count, replace=False):
        files = by_speaker[names[index]]
        chosen = files[rng.integers(len(files))]
        offset = draw_offset(rng, chosen.duration_s, condition.duration_s)
        speakers.append(BabbleVoice(chosen.speaker, chosen.rel, offset))
    return BabbleParams(
        duration_s=condition.duration_s,
        speakers=tuple(speakers),
        level_dbfs=draw_db(rng, *ranges["level_dbfs"]),
    )


def render(
    params: BabbleParams, bank: NoiseBank, *, speech: np.ndarray | None = None
) -> np.ndarray:
    length = num_samples(params.duration_s)
    mix = np.zeros(length, dtype=np.float64)
    for voice in params.speakers:
        excerpt = bank.excerpt(voice.file, voice.offset_s, length)
        if is_silent(excerpt):
            raise NoiseBankError(
                f"{bank.root / voice.file}: digital silence from {voice.offset_s} s, "
                "no voice to add to the babble; remove the file from the bank"
            )
        # Equal levels, so no single voice stands out of the crowd.
        mix += scale_to_dbfs(excerpt, 0.0)
    return clip_to_full_scale(scale_to_dbfs(mix, params.level_dbfs))


def _files_by_speaker(bank: NoiseBank) -> dict[str, list[NoiseFile]]:
    by_speaker: dict[str, list[NoiseFile]] = {}
    for noise_file in usable_files(bank, "speech"):
        by_speaker.setdefault(noise_file.speaker, []).append(noise_file)
    return by_speaker

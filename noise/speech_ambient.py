"""Kind `speech_ambient`: the speech recording itself with MUSAN ambient noise at an SNR.

The mixing is audiomentations' `AddBackgroundNoise` (relative level: noise RMS =
speech RMS / 10^(snr/20)), but never its sampling: its `randomize_parameters`
draws from Python's global `random`, so the file, offset and SNR are drawn here
from the seeded generator, written into the transform's parameters, and the
parameters frozen so that calling it only applies them.

Two deliberate differences from the transform used as is:
- the noise is looped to the speech's length *before* the transform measures its
  RMS (through its `noise_transform` hook); it would otherwise measure the
  unlooped excerpt and miss the SNR when a noise file is shorter than the speech;
- a mix that would exceed full scale is scaled down as a whole instead of
  clipped, which keeps the SNR the condition promises.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from redvox.schemas import SAMPLE_RATE, NoiseCondition
from redvox.sources.musan import NoiseBank, NoiseBankError

from .excerpt import ExcerptParams, sample_excerpt
from .levels import is_silent, num_samples
from .seeding import Bound, checked_ranges

KIND = "speech_ambient"
MIXES_SPEECH = True
# Speech-to-noise ratio: beyond 60 dB the noise is inaudible, below -20 dB the speech is.
BOUNDS = {"snr_db": Bound(-20.0, 60.0, "dB")}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpeechAmbientParams(ExcerptParams, kind=KIND):
    """`duration_s` is the recording's: the params are for that recording only."""

    snr_db: float


PARAMS = SpeechAmbientParams


def check_condition(condition: NoiseCondition) -> dict[str, tuple[float, float]]:
    return checked_ranges(condition, BOUNDS)


def sample_params(
    rng: np.random.Generator,
    condition: NoiseCondition,
    bank: NoiseBank,
    *,
    duration_s: float | None = None,
) -> SpeechAmbientParams:
    """Draws, in this order: the noise file, the offset, the SNR. `duration_s` is the
    speech recording's (len(speech) / 16000); `condition.duration_s` does not apply."""
    ranges = check_condition(condition)
    if duration_s is None or duration_s <= 0:
        raise ValueError(
            f"condition {condition.name!r} (speech_ambient): pass duration_s, the speech "
            f"recording's duration in seconds (got {duration_s!r})"
        )
    return sample_excerpt(SpeechAmbientParams, rng, bank, duration_s, ranges)


def render(
    params: SpeechAmbientParams, bank: NoiseBank, *, speech: np.ndarray | None = None
) -> np.ndarray:
    # Imported here: audiomentations pulls in scipy.signal and librosa (~2 s), which
    # every `redvox` command importing this package would otherwise pay for.
    from audiomentations import AddBackgroundNoise

    speech = _checked_speech(params, speech)
    noise_path = bank.path(params.file)
    # audiomentations reads the file itself; NoiseBank.load first refuses a file with
    # NaN/inf samples with a NoiseBankError naming it (librosa would raise its own error).
    bank.load(params.file)
    transform = AddBackgroundNoise(
        sounds_path=noise_path,
        min_snr_db=params.snr_db,
        max_snr_db=params.snr_db,
        noise_rms="relative",
        noise_transform=_looped_to(speech.size, noise_path, params.offset_s),
        p=1.0,
    )
    transform.parameters = {
        "should_apply": True,
        "snr_db": params.snr_db,
        "noise_file_path": str(noise_path),
        "offset": params.offset_s,
        "duration": params.duration_s,
    }
    transform.freeze_parameters()
    mix = transform(speech, SAMPLE_RATE)
    peak = float(np.max(np.abs(mix)))
    return (mix / peak if peak > 1.0 else mix).astype(np.float32)


def _checked_speech(params: SpeechAmbientParams, speech: np.ndarray | None) -> np.ndarray:
    if speech is None:
        raise ValueError("speech_ambient renders onto a speech recording: pass speech=")
    speech = np.ascontiguousarray(speech, dtype=np.float32)
    if speech.ndim != 1 or speech.size != num_samples(params.duration_s):
        raise ValueError(
            f"speech has shape {speech.shape} but the params are for a mono recording of "
            f"{params.duration_s} s ({num_samples(params.duration_s)} samples at 16 kHz): "
            "they were sampled for another recording"
        )
    if is_silent(speech):
        raise ValueError("speech is digital silence: an SNR relative to it is undefined")
    return speech


def _looped_to(length: int, noise_path: Path, offset_s: float):
    """The transform's noise hook: loop the loaded excerpt to exactly `length` samples."""

    def loop(noise: np.ndarray, sample_rate: int) -> np.ndarray:
        if is_silent(noise):
            raise NoiseBankError(
                f"{noise_path}: digital silence from {offset_s} s, nothing to mix at an SNR; "
                "remove the file from the bank"
            )
        return np.resize(noise, length).astype(np.float32)

    return loop

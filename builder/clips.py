"""Variant clips of the noise conditions, through the cache.

A clip is identified by its params JSON (plus the speech it is mixed onto, for
kinds that mix the recording): the same params never render twice, so a new
version renders only its new conditions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from redvox.noise import SHARED_KEY, ClipParams, mixes_speech, render, sample_params
from redvox.schemas import SAMPLE_RATE, NoiseCondition
from redvox.schemas.audio_cell import encode_flac, flac_samples
from redvox.schemas.fields import checked
from redvox.sources.musan import NoiseBank

from .cache import BuildCache, digest_of
from .rows import AudioRef, audio_name, shared_audio_name


@dataclass(frozen=True)
class ClipFact:
    """A rendered clip, as the `clip` cache stores it (`to_dict`): its FLAC blob and
    duration, all a row needs to point at it without loading the audio."""

    KIND: ClassVar[str] = "clip"

    blob: str
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"blob": self.blob, "duration_s": self.duration_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClipFact:
        return cls(checked(d, "blob", str), checked(d, "duration_s", float))


@dataclass
class ClipRenderer:
    """Samples params from (seed, entry key, condition) and renders misses only."""

    bank: NoiseBank
    cache: BuildCache
    seed: int

    def shared(self, condition: NoiseCondition) -> tuple[AudioRef, str]:
        """The one clip every row of a shared condition points at, and its params JSON."""
        params = sample_params(condition, self.bank, seed=self.seed, entry_key=SHARED_KEY)
        name = shared_audio_name(condition.name)
        return self._clip(params, name, None), params.to_json()

    def per_entry(
        self,
        condition: NoiseCondition,
        key: str,
        *,
        speech_digest: str | None = None,
        speech_s: float | None = None,
    ) -> tuple[AudioRef, str]:
        """The clip of one row (`key` = its entry key). Kinds that mix the recording take
        the speech blob and its duration; the samples are loaded only to render a miss."""
        mixes = mixes_speech(condition)
        if mixes and speech_digest is None:
            raise ValueError(f"condition {condition.name!r} mixes the recording: pass its audio")
        params = sample_params(
            condition,
            self.bank,
            seed=self.seed,
            entry_key=key,
            duration_s=speech_s if mixes else None,
        )
        clip = self._clip(params, audio_name(key), speech_digest if mixes else None)
        return clip, params.to_json()

    def _clip(self, params: ClipParams, name: str, speech_digest: str | None) -> AudioRef:
        # The bank's content is in the key: a bank file replaced under the same name
        # (a voice taken out of it) never leaves the old clip in use.
        key = digest_of("clip", params.to_json(), speech_digest or "", self.bank.fingerprint())
        fact = self.cache.get(ClipFact, key)
        if fact is None:
            samples = flac_samples(self.cache.blob(speech_digest)) if speech_digest else None
            clip = render(params, self.bank, speech=samples)
            fact = ClipFact(self.cache.put_blob(encode_flac(clip)), len(clip) / SAMPLE_RATE)
            self.cache.put(key, fact)
        return AudioRef(fact.blob, name, fact.duration_s)

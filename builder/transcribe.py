"""The optional `transcribe` stage: Whisper ASR for speech rows without a transcript.

The collection's transcript (`Contribution.transcript`) wins when present; ASR
fills only the missing ones. Each transcript is a cache fact keyed by the
released audio (its FLAC blob digest, i.e. the decoded samples), the model
identity (its name, or the sha256 of a local checkpoint), the forced language and
the decoding options, so a rebuild loads no model and transcribes nothing.

`whisper` is imported only when the stage is on: `pip install 'redvox[asr]'`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tqdm import tqdm

from redvox.schemas.audio_cell import flac_samples
from redvox.schemas.errors import UserError
from redvox.schemas.fields import checked
from redvox.schemas.layout import sha256_file

from .cache import BuildCache, digest_of
from .join import Recording
from .recordings import SpeechOutcome
from .versions import TranscribeConfig

# Bumped when what is stored, or how it is computed, changes.
TRANSCRIPT_FORMAT = "transcript-v1"
INSTALL_HINT = "install with pip install 'redvox[asr]'"


@dataclass(frozen=True)
class TranscriptFact:
    """One recording's ASR transcript, as the `transcript` cache stores it (`to_dict`),
    with the identity of the model that wrote it (for whoever reads the cache: the key
    already binds it)."""

    KIND: ClassVar[str] = "transcript"

    text: str
    model: str

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "model": self.model}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TranscriptFact:
        return cls(checked(d, "text", str), checked(d, "model", str))


class TranscribeError(UserError, RuntimeError):
    """The transcribe stage is on but cannot run; the message says what to fix."""


def decode_options(config: TranscribeConfig, lang: str) -> dict[str, Any]:
    """What `model.transcribe` is called with: language forced, greedy and deterministic."""
    options: dict[str, Any] = {
        "language": lang,
        "task": "transcribe",
        "fp16": False,
        "temperature": 0.0,
        "condition_on_previous_text": False,
    }
    if config.sample_len is not None:
        options["sample_len"] = config.sample_len
    return options


def _whisper() -> Any:
    try:
        import whisper
    except ImportError as exc:
        raise TranscribeError(
            f"the version's transcribe stage needs openai-whisper ({exc}); {INSTALL_HINT}"
        ) from None
    return whisper


def model_identity(config: TranscribeConfig) -> tuple[str, str | None]:
    """(identity for the cache key, checkpoint path or None for a named model).

    A named model is its name (Whisper checks a downloaded checkpoint against its
    published sha256); a local checkpoint is the sha256 of its bytes, so replacing the
    file recomputes every transcript.
    """
    whisper = _whisper()
    model = config.model
    path = Path(model).expanduser()
    if not path.is_file():
        if model in whisper.available_models():
            return f"openai-whisper:{model}", None
        what = "is not a file" if path.exists() else "does not exist"
        raise TranscribeError(
            f"transcribe model {model!r}: the path {what} and it is not a Whisper model name "
            f"({', '.join(whisper.available_models())}); give a local checkpoint file or a name"
        )
    return f"openai-whisper:sha256:{sha256_file(path)}", str(path)


def transcript_key(audio_digest: str, identity: str, lang: str, options: dict[str, Any]) -> str:
    return digest_of(
        TRANSCRIPT_FORMAT, audio_digest, identity, lang, json.dumps(options, sort_keys=True)
    )


class _LazyModel:
    """Loaded on the first cache miss only: a warm rebuild never loads it."""

    def __init__(self, config: TranscribeConfig, path: str | None) -> None:
        self.name_or_path = path or config.model
        self._model: Any = None
        self.calls = 0  # recordings actually transcribed

    def transcribe(self, samples: Any, options: dict[str, Any]) -> str:
        if self._model is None:
            whisper = _whisper()
            try:
                self._model = whisper.load_model(self.name_or_path, device="cpu")
            except (RuntimeError, OSError, KeyError, ValueError) as exc:
                raise TranscribeError(
                    f"transcribe model {self.name_or_path!r} could not be loaded: {exc}"
                ) from exc
        self.calls += 1
        result = self._model.transcribe(samples, verbose=None, **options)
        return str(result["text"]).strip()


def transcribe_recordings(
    recordings: Sequence[Recording],
    outcomes: Sequence[SpeechOutcome],
    config: TranscribeConfig | None,
    cache: BuildCache,
    progress: bool = True,
) -> list[str | None]:
    """The transcript of each recording's speech rows, aligned with `recordings`.

    The collection's transcript when it has one; else, with the stage on and the
    recording usable, Whisper's (language forced to the row's); else None.
    """
    transcripts: list[str | None] = [r.contribution.transcript for r in recordings]
    if config is None:
        return transcripts
    todo = [
        i
        for i, (rec, outcome) in enumerate(zip(recordings, outcomes, strict=True))
        if rec.contribution.transcript is None and outcome.audio is not None
    ]
    if not todo:
        return transcripts
    whisper = _whisper()
    identity, path = model_identity(config)
    model = _LazyModel(config, path)
    bar = tqdm(todo, desc="transcribe", unit="rec", disable=not progress)
    for i in bar:
        lang = recordings[i].contribution.lang
        if lang not in whisper.tokenizer.LANGUAGES:
            raise TranscribeError(f"Whisper has no language {lang!r}")
        options = decode_options(config, lang)
        digest = outcomes[i].audio.digest  # type: ignore[union-attr]
        key = transcript_key(digest, identity, lang, options)
        fact = cache.get(TranscriptFact, key)
        if fact is None:
            samples = flac_samples(cache.blob(digest))
            fact = TranscriptFact(model.transcribe(samples, options), identity)
            cache.put(key, fact)
        transcripts[i] = fact.text
    return transcripts

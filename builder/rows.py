"""Row expansion: one speech row per valid recording and one row per condition
(docs/ARCHITECTURE.md, "Release schema contract"), then the dense `ID` per language.

Pure: audio is referred to by its cache digest, consent and files are handled
elsewhere. The ID order is decided per recording (`RowSource`), not per row, so a
shard's rows can be made in that order one at a time (`id_order`) instead of all
being held and sorted: the build's memory does not grow with its rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from redvox.noise import mixes_speech
from redvox.schemas import AudioCell, Entry, NoiseCondition, entry_key, primary_language
from redvox.schemas.vocab import SPEECH_AUDIO_TYPE

from .join import Recording
from .versions import VERSIONS, BuildConfig, DatasetVersion
from .write import ShardRow


@dataclass(frozen=True)
class AudioRef:
    digest: str  # cache blob holding the FLAC bytes
    path: str  # relative name stored in the shard
    duration_s: float


@dataclass(frozen=True)
class PendingRow:
    """An Entry before its ID is known (`numbered` gives it one); `participant_key`
    decides consent, never written."""

    entry: Entry
    audio_digest: str
    participant_key: str


# BuildConfig fields every row depends on: a version that changes one rebuilds every row.
_ROW_SETTINGS = ("items", "sample_rate", "clip_s", "seed", "vad", "transcribe", "columns")


def built_by(version: DatasetVersion, audio_type: str, lang: str) -> str:
    """The `builder_version` of a row of `audio_type` in `lang` built by `version`: the
    earliest declared version, in an unbroken run of versions up to `version`, whose
    config produces that row unchanged (same row-wide settings, the language in it,
    and, for a condition row, the condition declared with the same parameters).

    So 1.1.0's speech, silence and noise rows say 1.0.0 (they are 1.0.0's rows,
    carried over) and only its new speech_noise_a rows say 1.1.0."""
    earlier = sorted(
        (v for v in VERSIONS.values() if v.parts < version.parts), key=lambda v: v.parts
    )
    origin = version.version
    for candidate in reversed(earlier):
        if not _produces_same(candidate.config, version.config, audio_type, lang):
            break
        origin = candidate.version
    return origin


def _produces_same(old: BuildConfig, new: BuildConfig, audio_type: str, lang: str) -> bool:
    if any(getattr(old, name) != getattr(new, name) for name in _ROW_SETTINGS):
        return False
    if lang not in old.languages:
        return False
    if audio_type == SPEECH_AUDIO_TYPE:
        return True
    before = {c.name: c for c in old.conditions}
    after = {c.name: c for c in new.conditions}
    return audio_type in before and before[audio_type] == after.get(audio_type)


def audio_name(key: str) -> str:
    """Relative file name of a row's own audio: the entry key made path-safe."""
    return re.sub(r"[/:]", "_", key) + ".flac"


def shared_audio_name(condition: str) -> str:
    return f"{condition}.flac"


def row_entry_key(recording: Recording, user_id: str, audio_type: str) -> str:
    return entry_key(recording.lang, recording.contribution.item_key, user_id, audio_type)


def speech_row(
    recording: Recording,
    user_id: str,
    audio: AudioRef,
    version: str,
    transcript: str | None = None,
) -> PendingRow:
    """The participant's spoken request; the typed follow-up goes in `user_text`.

    `transcript`: the ASR transcript, used only when the collection gave none."""
    return _row(recording, user_id, SPEECH_AUDIO_TYPE, audio, version, True, None, transcript)


def condition_row(
    recording: Recording,
    user_id: str,
    condition: NoiseCondition,
    audio: AudioRef,
    params_json: str,
    version: str,
    transcript: str | None = None,
) -> PendingRow:
    """A row of `condition`: a text request with a distracting clip, or (kinds that
    mix the recording) the spoken request in noise, with the recording's transcript."""
    spoken = mixes_speech(condition)
    return _row(recording, user_id, condition.name, audio, version, spoken, params_json, transcript)


def _row(
    recording: Recording,
    user_id: str,
    audio_type: str,
    audio: AudioRef,
    version: str,
    spoken: bool,
    params: str | None,
    transcript: str | None = None,
) -> PendingRow:
    contribution, item, participant = recording.contribution, recording.item, recording.participant
    entry = Entry(
        ID=0,  # numbered once the set's rows are known: see number_rows
        audio=AudioCell(path=audio.path),
        original_id=item.item_id,
        user_id=user_id,
        lang=contribution.lang,
        vulnerability_type=item.vulnerability_type,
        audio_type=audio_type,
        modality="speech" if spoken else "text",
        user_text=contribution.speech_followup if spoken else contribution.audio_request_text,
        transcript=_transcript(contribution.transcript, transcript) if spoken else None,
        gender=participant.gender,
        mother_tongue=participant.mother_tongue,
        ethnicity=participant.ethnicity,
        age_group=participant.age_group,
        entry_key=row_entry_key(recording, user_id, audio_type),
        source=item.source,
        prompt_text=item.text[contribution.lang],
        native_speaker=primary_language(participant.mother_tongue) == contribution.lang,
        duration_s=audio.duration_s,
        condition_params=params,
        builder_version=version,
    )
    return PendingRow(entry, audio.digest, contribution.participant_key)


def numbered(row: PendingRow, row_id: int) -> ShardRow:
    """The row as written, with its dense `ID`."""
    return ShardRow(row.entry.model_copy(update={"ID": row_id}), row.audio_digest)


def _transcript(collected: str | None, asr: str | None) -> str | None:
    """The collection's transcript wins; ASR fills only a missing one."""
    return collected if collected is not None else asr


def natural_key(text: str) -> tuple:
    """'7.10' after '7.9', '10330' after '9000': numbers compare as numbers."""
    return tuple(
        (0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p
    )


@dataclass(frozen=True)
class RowSource:
    """One recording as its rows are made from it: `speech`, its released audio as the
    shard names it (None when decode, VAD or ownership refused it: its text rows
    remain), and `transcript`, the ASR one for a recording the collection left
    without."""

    recording: Recording
    user_id: str
    speech: AudioRef | None
    transcript: str | None = None

    @property
    def participant_key(self) -> str:  # consent is decided per participant (rows_for_set)
        return self.recording.participant_key

    @property
    def lang(self) -> str:
        return self.recording.lang

    def has_row(self, condition: NoiseCondition | None) -> bool:
        """Whether it has a row of `condition` (None: its speech row): those that use the
        recording need its audio, the others use its text only."""
        return self.speech is not None or (condition is not None and not mixes_speech(condition))

    def kinds(self, conditions: Sequence[NoiseCondition]) -> tuple[NoiseCondition | None, ...]:
        """The kinds of its rows, in ID order (None: its speech row)."""
        return tuple(kind for kind in row_kinds(conditions) if self.has_row(kind))

    def order(self) -> tuple:
        """Its place among its language's rows of one audio type: source, then item id
        compared as numbers, then participant."""
        item = self.recording.item
        return (item.source, natural_key(item.item_id), self.user_id)


def row_source(
    recording: Recording, user_id: str, speech: AudioRef | None, transcript: str | None = None
) -> RowSource:
    """The recording's RowSource, its speech audio named by its speech row's entry key."""
    if speech is not None:
        name = audio_name(row_entry_key(recording, user_id, SPEECH_AUDIO_TYPE))
        speech = AudioRef(speech.digest, name, speech.duration_s)
    return RowSource(recording, user_id, speech, transcript)


def row_kinds(conditions: Sequence[NoiseCondition]) -> tuple[NoiseCondition | None, ...]:
    """Every kind of row in audio type rank order: the speech row (None), then the
    conditions in declaration order."""
    return (None, *conditions)


def kind_name(kind: NoiseCondition | None) -> str:
    """The `audio_type` of a kind of row."""
    return SPEECH_AUDIO_TYPE if kind is None else kind.name


def shard_sources(
    sources: Iterable[RowSource], conditions: Sequence[NoiseCondition]
) -> dict[str, list[RowSource]]:
    """Per language with at least one row (sorted), its recordings in `RowSource.order`
    (stable: equal keys keep their input order)."""
    by_lang: dict[str, list[RowSource]] = {}
    for source in sources:
        if source.kinds(conditions):
            by_lang.setdefault(source.lang, []).append(source)
    return {lang: sorted(by_lang[lang], key=RowSource.order) for lang in sorted(by_lang)}


def id_order(
    ordered: Sequence[RowSource], conditions: Sequence[NoiseCondition]
) -> Iterator[tuple[RowSource, NoiseCondition | None]]:
    """The rows of one shard in ID order, ID = 0, 1, 2, ... (`ordered`: its language's
    recordings as `shard_sources` orders them): speech rows first, then each
    condition's in declaration order (a condition added by a MINOR version comes
    after the existing ones, so their IDs stay put), each audio type's rows in
    recording order. The same order as sorting every row by (audio type rank,
    source, item id, participant), without holding the rows."""
    for kind in row_kinds(conditions):
        for source in ordered:
            if source.has_row(kind):
                yield source, kind

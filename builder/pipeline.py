"""`redvox build`: the steps of docs/ARCHITECTURE.md, "Data flow", 1 (inputs) to 9
(shards), in that order.

Each step is its own module; this one wires them, keeps the expensive work
behind the cache and writes the two sets. Recordings are processed in chunks, and
rows are never held: what the parent keeps grows with the recordings (their
records), not with the rows, which each shard makes one at a time as it is written.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from redvox.noise import check_condition, mixes_speech, renders_one_clip
from redvox.schemas import ConsentState, InputConfig, NoiseCondition
from redvox.schemas.errors import UserError
from redvox.schemas.layout import sha256_file, shard_path, shard_paths
from redvox.schemas.vocab import PUBLIC, SETS, DatasetSet
from redvox.sources.inputs import Inputs, load_inputs
from redvox.sources.musan import NoiseBank, read_noise_bank

from .cache import BuildCache
from .clips import ClipRenderer
from .consent import (
    admitted_keys,
    admitted_to_any,
    consent_audit,
    consent_states,
    rows_for_set,
)
from .join import Recording, join_inputs, recording_quarantine
from .manifest import (
    CONSENT_AUDIT,
    MANIFEST,
    QUARANTINE,
    BuildManifest,
    QuarantineRecord,
    count_rows,
    file_hashes,
    quarantine_summary,
    recorded_files,
    write_quarantine,
)
from .ownership import bank_audio, contribution_audio, exclude_shared_audio, unclaimed_audio
from .provenance import check_same_collection, record_inputs
from .pseudonym import load_pseudonym_key, pseudonymize
from .recordings import SpeechOutcome, normalise_recordings
from .rows import (
    AudioRef,
    PendingRow,
    RowSource,
    built_by,
    condition_row,
    id_order,
    kind_name,
    numbered,
    row_entry_key,
    row_source,
    shard_sources,
    speech_row,
)
from .takes import resolve_takes
from .transcribe import transcribe_recordings
from .versions import DatasetVersion
from .write import (
    PendingFiles,
    ShardRow,
    ShardUpdate,
    build_lock,
    remove_leftovers,
    write_shard,
)

CONSENT_REASONS: dict[ConsentState, str] = {
    ConsentState.WITHDRAWN: "consent withdrawn",
    ConsentState.NO_RECORD: "no consent record",
    ConsentState.AMBIGUOUS: "ambiguous consent record",
    ConsentState.NO_PARTICIPATION_CONSENT: "no participation consent",
    ConsentState.PARTICIPATION_ONLY: "no public-release consent",
}


class BuildError(UserError, RuntimeError):
    """The build cannot run; the message says which input to fix."""


@dataclass(frozen=True)
class BuildOptions:
    out: Path
    sets: tuple[DatasetSet, ...] = SETS
    workers: int = 1
    cache_dir: Path | None = None
    progress: bool = True


@dataclass
class SetReport:
    folder: Path
    rows: dict[str, int]
    quarantined: Counter[str]
    excluded_participants: dict[str, int]
    shards_written: int
    # kept shards whose bytes differed from the sha256 the last manifest recorded: rewritten
    shards_repaired: int = 0


@dataclass
class BuildReport:
    version: str
    sets: dict[str, SetReport] = field(default_factory=dict)
    computed: Counter[str] = field(default_factory=Counter)  # decoded, vad, clip
    cache_hits: Counter[str] = field(default_factory=Counter)
    cache_discarded: Counter[str] = field(default_factory=Counter)  # damaged entries removed


def build_version(
    version: DatasetVersion, config: InputConfig, options: BuildOptions
) -> BuildReport:
    """Build the requested sets of `version` under `options.out/<version>/`, holding the
    output folder's build lock throughout (a second build into it fails at once)."""
    with build_lock(options.out):
        return _build_locked(version, config, options)


def _build_locked(
    version: DatasetVersion, config: InputConfig, options: BuildOptions
) -> BuildReport:
    if version.config.items is not None:
        config = config.model_copy(update={"items": version.config.items})
    check_same_collection(Path(options.out) / version.version, config)
    context = _prepare(version, config, options)
    report = BuildReport(version.version)
    # Every file of the build waits under a temporary name until all are written: a
    # build that fails on the way leaves the earlier one's files as they were.
    pending = PendingFiles(last=[MANIFEST])
    try:
        record_inputs(Path(options.out) / version.version, context.inputs_hashes, pending)
        for dataset_set in options.sets:
            folder = Path(options.out) / version.version / dataset_set
            report.sets[dataset_set] = write_set(context, dataset_set, folder, pending)
        pending.commit()
    except BaseException:
        pending.discard()
        raise
    cache = context.cache
    report.computed, report.cache_hits = cache.computed, cache.hits
    report.cache_discarded = cache.discarded
    return report


def _prepare(version: DatasetVersion, config: InputConfig, options: BuildOptions) -> _SetContext:
    """Every step before the sets are written: inputs, join, consent, decode, VAD,
    ownership, takes, transcripts and the rows' sources. A function of its own so that
    what only these steps use (the inputs as read, with the raw cells of every
    contributions line; the audio paths) is let go before the shards are written."""
    inputs = load_inputs(config, version.config.languages, progress=options.progress)
    _refuse_fatal(inputs)
    key = load_pseudonym_key(config.pseudonym_key_file)
    bank = read_noise_bank(config.noise_bank)
    for condition in version.config.conditions:
        check_condition(condition)
    joined = join_inputs(inputs, version.config.languages)
    states = consent_states({r.participant_key for r in joined.recordings}, inputs.consent)
    cache = BuildCache(options.cache_dir or Path(options.out) / ".cache")
    wanted, file_shas, outcomes = _speech(
        joined.recordings, states, version, config, cache, options, inputs, bank
    )
    takes = resolve_takes(wanted, outcomes)
    renderer = ClipRenderer(bank, cache, version.config.seed)
    user_ids = _user_ids(inputs, joined.quarantine, key)
    transcripts = transcribe_recordings(
        takes.recordings, takes.chosen, version.config.transcribe, cache, options.progress
    )
    sources, maker = expand_rows(
        takes.recordings, takes.chosen, user_ids, version, renderer, options.progress, transcripts
    )
    return _SetContext(
        version=version,
        inputs_hashes=inputs.input_hashes,
        noise_bank=bank.fingerprint(),
        file_shas={
            r.contribution.audio_file: sha for r, sha in zip(wanted, file_shas, strict=True)
        },
        sources=sources,
        maker=maker,
        states=states,
        recordings=joined.recordings,
        join_quarantine=joined.quarantine,
        outcomes=takes.outcomes,
        user_ids=user_ids,
        item_keys=frozenset(item.key for item in inputs.items),
        cache=cache,
        progress=options.progress,
    )


def _speech(
    recordings: Sequence[Recording],
    states: dict[str, ConsentState],
    version: DatasetVersion,
    config: InputConfig,
    cache: BuildCache,
    options: BuildOptions,
    inputs: Inputs,
    bank: NoiseBank,
) -> tuple[list[Recording], list[str], list[SpeechOutcome]]:
    """The recordings admitted to any set, the sha256 of their files and their outcomes:
    decoded, judged by VAD, and refused where their audio holds audio filed under another
    participant (every other contributions row, joined or not, is fingerprinted for that
    too); a noise-bank file holding a contribution's audio stops the build."""
    wanted = [r for r in recordings if admitted_to_any(states[r.participant_key], options.sets)]
    paths = [Path(config.audio_root) / r.contribution.audio_file for r in wanted]
    file_shas = [sha256_file(p) for p in paths]
    outcomes = normalise_recordings(
        paths,
        file_shas,
        wanted,
        version.config.vad,
        cache,
        options.workers,
        options.progress,
        limits=config.audio_limits,
    )
    admitted_lines = {r.line for r in wanted}
    others = contribution_audio(config, inputs.contribution_rows, admitted_lines)
    others += unclaimed_audio(config, inputs.contribution_rows)
    everyone = consent_states(inputs.consent, inputs.consent)
    cleared = {k for k, state in everyone.items() if all(map(state.allows, options.sets))}
    outcomes = exclude_shared_audio(
        wanted,
        outcomes,
        others,
        cache,
        config.audio_limits,
        cleared=cleared,
        bank=bank_audio(bank),
        bank_loader=lambda path: bank.load(path.relative_to(bank.root).as_posix()),
    )
    return wanted, file_shas, outcomes


def _refuse_fatal(inputs: Inputs) -> None:
    fatal = [str(p) for p in inputs.problems if p.fatal]
    if fatal:
        raise BuildError(
            "the inputs cannot be built; fix these first (`redvox sources check` lists all "
            "problems):\n  " + "\n  ".join(fatal)
        )


def _user_ids(inputs: Inputs, quarantine: Sequence[QuarantineRecord], key: bytes) -> dict[str, str]:
    """user_id of every participant key the build may mention, registered or not."""
    keys = set(inputs.participants) | set(inputs.consent)
    keys |= {c.participant_key for c in inputs.contributions}
    keys |= {r.participant_key for r in quarantine if r.participant_key}
    return {k: pseudonymize(key, k) for k in sorted(keys)}


def _audio_digest(recordings: Sequence[Recording], file_shas: dict[str, str]) -> str:
    """One hash over the recording files of a set (name and content)."""
    digest = hashlib.sha256()
    for name in sorted(r.contribution.audio_file for r in recordings):
        digest.update(f"{name}\x1f{file_shas[name]}\n".encode())
    return digest.hexdigest()


# --- rows -------------------------------------------------------------------------


def expand_rows(
    recordings: Sequence[Recording],
    outcomes: Sequence[SpeechOutcome],
    user_ids: dict[str, str],
    version: DatasetVersion,
    renderer: ClipRenderer,
    progress: bool = True,
    transcripts: Sequence[str | None] | None = None,
) -> tuple[list[RowSource], RowMaker]:
    """What every row of every admitted recording is made from, and the maker of the rows.

    Every row is made once here, and let go: the clips the cache lacks are rendered
    and every row is validated before any file is written, so a failure leaves the
    output as it was. A recording refused by decode or VAD loses its spoken rows
    only: its text requests do not use the recording
    (docs/ARCHITECTURE.md, "Release schema contract"). `transcripts`, aligned with
    `recordings`: the transcribe stage's, for spoken rows the collection left
    without one.
    """
    if transcripts is None:
        transcripts = [None] * len(recordings)
    conditions = version.config.conditions
    shared = {c.name: renderer.shared(c) for c in conditions if renders_one_clip(c)}
    maker = RowMaker(version, renderer, shared)
    sources = [
        row_source(rec, user_ids[rec.participant_key], outcome.audio, transcript)
        for rec, outcome, transcript in zip(recordings, outcomes, transcripts, strict=True)
    ]
    for source in tqdm(sources, desc="render", unit="rec", disable=not progress):
        for kind in source.kinds(conditions):
            maker.row(source, kind)
    return sources, maker


@dataclass(frozen=True)
class RowMaker:
    """Makes any row of the build from its recording, on demand: the same row each time
    (clips come from the cache once rendered), so rows need not be kept."""

    version: DatasetVersion
    renderer: ClipRenderer
    shared: dict[str, tuple[AudioRef, str]]  # each shared condition's one clip, its params

    def row(self, source: RowSource, kind: NoiseCondition | None) -> PendingRow:
        """The speech row (`kind` None) or the row of condition `kind` of `source`."""
        rec = source.recording
        origin = built_by(self.version, kind_name(kind), rec.lang)
        if kind is None:
            return speech_row(rec, source.user_id, source.speech, origin, source.transcript)
        clip, params = self._clip(source, kind)
        return condition_row(rec, source.user_id, kind, clip, params, origin, source.transcript)

    def _clip(self, source: RowSource, condition: NoiseCondition) -> tuple[AudioRef, str]:
        key = row_entry_key(source.recording, source.user_id, condition.name)
        if mixes_speech(condition):
            speech = source.speech
            return self.renderer.per_entry(
                condition, key, speech_digest=speech.digest, speech_s=speech.duration_s
            )
        if condition.name in self.shared:
            return self.shared[condition.name]
        return self.renderer.per_entry(condition, key)


@dataclass(frozen=True)
class _ShardRows:
    """The rows of one shard in ID order, made anew on each iteration (`write_shard`
    goes over them twice: its recipe, then the rows), one at a time."""

    ordered: list[RowSource]  # its language's recordings, as shard_sources orders them
    maker: RowMaker

    def __iter__(self) -> Iterator[ShardRow]:
        conditions = self.maker.version.config.conditions
        for row_id, (source, kind) in enumerate(id_order(self.ordered, conditions)):
            yield numbered(self.maker.row(source, kind), row_id)


# --- one set ----------------------------------------------------------------------


@dataclass(frozen=True)
class _SetContext:
    version: DatasetVersion
    inputs_hashes: dict[str, str]  # sha256 of each input file, as build-inputs.json records
    noise_bank: str  # the noise bank's fingerprint
    file_shas: dict[str, str]  # audio_file -> sha256, recordings admitted to any set
    sources: list[RowSource]  # one per recording that has rows (takes resolved)
    maker: RowMaker
    states: dict[str, ConsentState]
    recordings: Sequence[Recording]
    join_quarantine: list[QuarantineRecord]
    outcomes: Sequence[SpeechOutcome]
    user_ids: dict[str, str]
    item_keys: frozenset[str]  # the items of this build: the only item keys reports name
    cache: BuildCache
    progress: bool


def write_set(
    context: _SetContext, dataset_set: DatasetSet, folder: Path, pending: PendingFiles
) -> SetReport:
    """Shards, quarantine, consent audit and manifest of one set, into `pending`: they
    replace the folder's files when the caller commits it."""
    admitted = admitted_keys(context.states, dataset_set)
    kept = rows_for_set(context.sources, context.states, dataset_set)
    shards = shard_sources(kept, context.version.config.conditions)
    folder.mkdir(parents=True, exist_ok=True)
    remove_leftovers(folder)
    _remove_stale_shards(folder, set(shards), pending)
    recorded = recorded_files(folder)
    written = repaired = 0
    bar = tqdm(
        shards.items(), desc=f"write {dataset_set}", unit="shard", disable=not context.progress
    )
    for lang, ordered in bar:
        path = shard_path(folder, lang)
        rel = path.relative_to(folder).as_posix()
        rows = _ShardRows(ordered, context.maker)
        update = write_shard(path, rows, context.cache.blob, recorded.get(rel), pending)
        written += update is not ShardUpdate.KEPT
        repaired += update is ShardUpdate.REPAIRED
    quarantine = _set_quarantine(context, admitted, dataset_set)
    public = dataset_set == PUBLIC
    withheld = set(context.user_ids) - admitted if public else set()
    write_quarantine(
        folder / QUARANTINE,
        quarantine,
        context.user_ids,
        public=public,
        withheld=withheld,
        item_keys=context.item_keys,
        pending=pending,
    )
    # Contributions, not files: the retakes of one (language, item, participant) count once.
    recordings_of = Counter(key for _, _, key in {r.contribution.key for r in context.recordings})
    audit = consent_audit(context.states, recordings_of, dataset_set)
    audit.write(folder, pending)
    shard_names = [shard_path(folder, lang).relative_to(folder).as_posix() for lang in shards]
    files = file_hashes(folder, [*shard_names, QUARANTINE, CONSENT_AUDIT], pending)
    conditions = context.version.config.conditions
    counts = {lang: sum(1 for _ in id_order(o, conditions)) for lang, o in shards.items()}
    _manifest(context, dataset_set, admitted, shards, counts, files).write(folder, pending)
    return SetReport(
        folder=folder,
        rows=counts,
        quarantined=quarantine_summary(r for r in quarantine if not (public and r.private)),
        excluded_participants=audit.participants.excluded,
        shards_written=written,
        shards_repaired=repaired,
    )


def _remove_stale_shards(folder: Path, languages: set[str], pending: PendingFiles) -> None:
    """A language with no rows left (e.g. after a withdrawal) must not keep an old shard
    (removed when `pending` is committed)."""
    for shard in shard_paths(folder):
        if shard.parent.name not in languages:
            pending.remove(shard)


def _set_quarantine(
    context: _SetContext, admitted: set[str], dataset_set: DatasetSet
) -> list[QuarantineRecord]:
    records = list(context.join_quarantine)
    for rec in context.recordings:
        state = context.states[rec.participant_key]
        if not state.allows(dataset_set):
            reason = f"{CONSENT_REASONS[state]} ({state.value})"
            records.append(recording_quarantine(rec, "consent", reason, public_reason=reason))
    records += [
        outcome.quarantine
        for outcome in context.outcomes
        if outcome.quarantine and outcome.quarantine.participant_key in admitted
    ]
    return records


def _manifest(
    context: _SetContext,
    dataset_set: DatasetSet,
    admitted: set[str],
    shards: dict[str, list[RowSource]],
    rows: dict[str, int],
    files: dict[str, str],
) -> BuildManifest:
    config = context.version.config
    recordings = [r for r in context.recordings if r.participant_key in admitted]
    audio = _audio_digest(recordings, context.file_shas)
    inputs = {**context.inputs_hashes, "noise_bank": context.noise_bank, "audio": audio}
    return BuildManifest(
        version=context.version.version,
        dataset_set=dataset_set,
        config_hash=config.config_hash(),
        seed=config.seed,
        languages=list(config.languages),
        conditions=[c.model_dump(mode="json") for c in config.conditions],
        inputs=dict(sorted(inputs.items())),
        shared_clips={
            name: {"params": json.loads(params), "audio_sha256": clip.digest}
            for name, (clip, params) in sorted(context.maker.shared.items())
        },
        rows=rows,
        counts=count_rows(_counted(shards, config.conditions)),
        files=files,
        items=sorted(context.item_keys),  # the build's items, to compare or pin them
    )


def _counted(
    shards: dict[str, list[RowSource]], conditions: Sequence[NoiseCondition]
) -> Iterator[dict[str, str]]:
    """The manifest's counted columns of every row of the set, without making the rows."""
    for ordered in shards.values():
        for source, kind in id_order(ordered, conditions):
            yield {
                "lang": source.lang,
                "audio_type": kind_name(kind),
                "vulnerability_type": source.recording.item.vulnerability_type,
            }

"""`redvox variants add`: a copy of a build with the rows of one more noise condition.

The clips come from the clip renderer (builder/clips.py), through the cache, so a
new condition renders only its own clips.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from pydantic import ValidationError
from tqdm import tqdm

from redvox.noise import check_condition, mixes_speech, renders_one_clip
from redvox.schemas import SAMPLE_RATE, AudioCell, Entry, NoiseCondition, entry_key
from redvox.schemas.audio_cell import flac_samples, read_cell
from redvox.schemas.config import InputConfig
from redvox.schemas.errors import UserError
from redvox.schemas.layout import sha256_file, shard_path, shard_paths
from redvox.schemas.records import item_key
from redvox.schemas.vocab import PUBLIC, SPEECH_AUDIO_TYPE
from redvox.sources.contributions import read_contributions
from redvox.sources.musan import NoiseBank
from redvox.sources.registry import read_registries

from .cache import BuildCache, digest_of
from .clips import ClipRenderer
from .consent import consent_states
from .manifest import (
    CONSENT_AUDIT,
    MANIFEST,
    QUARANTINE,
    BuildManifest,
    ManifestError,
    count_rows,
    file_hashes,
    recorded_files,
)
from .ownership import bank_audio, check_noise_bank, contribution_audio, unclaimed_audio
from .rows import AudioRef, natural_key
from .versions import VERSIONS
from .write import (
    ShardRow,
    atomic_write_bytes,
    build_lock,
    remove_leftovers,
    write_shard,
)

# --- redvox variants add ------------------------------------------------------------


class VariantError(UserError, ValueError):
    """A condition that cannot be added to this build; the message says what to change."""


@dataclass
class VariantReport:
    folder: Path
    version: str
    added: dict[str, int]  # new rows per language
    skipped: int  # contributions without a row to take the new one from


def load_condition(path: Path) -> NoiseCondition:
    """A NoiseCondition from a YAML file, checked against its kind's params."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        condition = NoiseCondition.model_validate(raw)
        check_condition(condition)
    except FileNotFoundError:
        raise VariantError(f"{path}: condition file not found") from None
    except (yaml.YAMLError, ValidationError, ValueError) as exc:
        raise VariantError(f"{path}: not a usable noise condition: {exc}") from None
    return condition


def add_condition(
    condition: NoiseCondition,
    source: Path,
    out: Path | None,
    bank: NoiseBank,
    *,
    seed: int | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
    voices: InputConfig | None = None,
) -> VariantReport:
    """Write a copy of the build at `source` (a set folder, or a release folder with
    shards and maybe a manifest) with rows of `condition` added; returns where.

    Existing rows keep their bytes and IDs; new rows take the next IDs per language.
    `voices`: the input config whose every contribution the bank is checked against
    before anything is written (NoiseBankVoiceError: the bank holds one of them).
    """
    source = Path(source)
    manifest = _source_manifest(source)
    base = manifest.version if manifest else _rows_version(source)
    seed = _source_seed(manifest, base, source) if seed is None else seed
    root = Path(out) if out else default_out_root(source)
    with build_lock(root):
        if voices is not None:
            _same_contributions(manifest, voices, source)
            cache = BuildCache(cache_dir or root / ".cache")
            _check_bank(voices, bank, cache)
        return _add_locked(
            condition, source, root, _Source(manifest, base), bank, seed, cache_dir, progress
        )


def _same_contributions(manifest: BuildManifest | None, voices: InputConfig, source: Path) -> None:
    """The bank is checked against the voices of the build it is mixed into: a build whose
    manifest pins other contributions than `voices` (the demo corpus's, when no --config
    was given) is refused."""
    pinned = manifest.inputs.get("contributions") if manifest else None
    if pinned is not None and pinned != sha256_file(Path(voices.contributions)):
        raise VariantError(
            f"{source} was built from other contributions than {voices.contributions}: the "
            "noise bank must be checked against the voices of that build, so pass its input "
            "config (--config)"
        )


def _check_bank(config: InputConfig, bank: NoiseBank, cache: BuildCache) -> None:
    """The bank must hold no contribution's voice: every row of the contributions
    manifest counts, whether or not it would join."""
    read = read_contributions(config.contributions, config.audio_root)
    registries = read_registries(config.participants, config.consent)
    fatal = [str(p) for p in [*read.problems, *registries.problems] if p.fatal]
    if fatal:
        raise VariantError(f"the noise bank cannot be checked: {fatal[0]}")
    states = consent_states(registries.by_participant(), registries.by_participant())
    check_noise_bank(
        contribution_audio(config, read.rows) + unclaimed_audio(config, read.rows),
        bank_audio(bank),
        lambda path: bank.load(path.relative_to(bank.root).as_posix()),
        cache,
        config.audio_limits,
        cleared={key for key, state in states.items() if state.allows(PUBLIC)},
    )


@dataclass(frozen=True)
class _Source:
    """The build a variant is made from: its manifest (None for a release folder without
    one) and its version."""

    manifest: BuildManifest | None
    version: str


def _add_locked(
    condition: NoiseCondition,
    source: Path,
    root: Path,
    origin: _Source,
    bank: NoiseBank,
    seed: int,
    cache_dir: Path | None,
    progress: bool,
) -> VariantReport:
    version = f"{origin.version}+{condition.name}"
    folder = root / version / (origin.manifest.dataset_set if origin.manifest else source.name)
    cache = BuildCache(cache_dir or folder.parent.parent / ".cache")
    renderer = ClipRenderer(bank, cache, seed)
    shards = shard_paths(source)
    if not shards:
        raise VariantError(f"{source}: no parquet shards under data/<lang>/; point at a set folder")
    remove_leftovers(folder)
    recorded = recorded_files(folder)
    shared = renderer.shared(condition) if renders_one_clip(condition) else None
    report = VariantReport(folder, version, {}, 0)
    counted: list[dict] = []
    for shard in tqdm(shards, desc=f"add {condition.name}", unit="shard", disable=not progress):
        existing = _cache_rows(shard, cache)
        new, missing = _new_rows(existing, condition, renderer, shared, version)
        lang = shard.parent.name
        path = shard_path(folder, lang)
        rel = path.relative_to(folder).as_posix()
        if write_shard(path, existing + new, cache.blob, recorded.get(rel)):
            (folder / MANIFEST).unlink(missing_ok=True)  # no longer describes the shards
        report.added[lang] = len(new)
        report.skipped += missing
        counted += [r.entry.model_dump(include=set(COUNTED)) for r in existing + new]
    for name in (QUARANTINE, CONSENT_AUDIT):
        if (source / name).is_file():
            atomic_write_bytes(folder / name, (source / name).read_bytes())
    written = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    files = file_hashes(folder, [n for n in written if n != MANIFEST])
    updated = _variant_manifest(origin.manifest, condition, seed, bank, shared, counted)
    updated.model_copy(
        update={
            "version": version,
            "dataset_set": folder.name,
            "derived_from": {"version": origin.version, "manifest_sha256": _manifest_sha(source)},
            "files": files,
        }
    ).write(folder)
    return report


COUNTED = ("lang", "audio_type", "vulnerability_type")


def _variant_manifest(
    manifest: BuildManifest | None,
    condition: NoiseCondition,
    seed: int,
    bank: NoiseBank,
    shared: tuple[AudioRef, str] | None,
    counted: list[dict],
) -> BuildManifest:
    """The source's manifest (an empty one for a release folder without it) with the new
    condition, its seed, bank and row counts; version, set and files still the source's."""
    if manifest is None:
        manifest = BuildManifest(
            version="", dataset_set="", config_hash="", seed=seed, conditions=[], inputs={},
            rows={}, counts={}, files={},
        )  # fmt: skip
    clips = manifest.shared_clips
    if shared is not None:
        clip, params = shared
        entry = {"params": json.loads(params), "audio_sha256": clip.digest}
        clips = {**(clips or {}), condition.name: entry}
    return manifest.model_copy(
        update={
            "seed": seed,
            "config_hash": digest_of(manifest.config_hash, condition.model_dump_json()),
            "conditions": [*manifest.conditions, condition.model_dump(mode="json")],
            "inputs": {**manifest.inputs, f"noise_bank_{condition.name}": bank.fingerprint()},
            "rows": dict(sorted(Counter(r["lang"] for r in counted).items())),
            "counts": count_rows(counted),
            "shared_clips": clips,
        }
    )


def default_out_root(source: Path) -> Path:
    """Where the new version folder goes without --out: beside the version folder of a
    build (OUT/<version>/<set> -> OUT, next to the build cache), beside the folder
    itself for a release folder without a manifest (e.g. downloaded from the Hub)."""
    source = Path(source).resolve()
    return source.parent.parent if (source / MANIFEST).is_file() else source.parent


def _source_seed(manifest: BuildManifest | None, version: str, source: Path) -> int:
    """The manifest's seed; without one, the seed of the declared version the rows were
    built by (a local `+condition` suffix does not change it)."""
    if manifest is not None:
        return manifest.seed
    base = version.split("+", 1)[0]
    if base not in VERSIONS:
        raise VariantError(
            f"{source}: no manifest records the seed, and version {version!r} of "
            f"the rows is not declared by this builder ({', '.join(VERSIONS)}); pass --seed"
        )
    return VERSIONS[base].config.seed


def _source_manifest(source: Path) -> BuildManifest | None:
    """The build manifest; None for a release folder without one."""
    if not (source / MANIFEST).is_file():
        return None
    try:
        return BuildManifest.load(source)
    except ManifestError as exc:
        raise VariantError(str(exc)) from None


def _rows_version(source: Path) -> str:
    """The newest `builder_version` in the shards of a release folder without a manifest."""
    versions = set()
    for shard in shard_paths(source):
        try:
            column = pq.read_table(shard, columns=["builder_version"]).column(0)
        except (OSError, pa.ArrowException, KeyError) as exc:
            raise VariantError(
                f"{shard}: not a readable RedVox shard ({_first_line(exc)}); "
                "download or build it again"
            ) from None
        versions |= set(column.to_pylist())
    if not versions:
        raise VariantError(f"{source}: no {MANIFEST} and no rows to read a version from")
    return max(versions, key=natural_key)


def _manifest_sha(source: Path) -> str | None:
    path = source / MANIFEST
    return sha256_file(path) if path.is_file() else None


def _cache_rows(shard: Path, cache: BuildCache) -> list[ShardRow]:
    """The shard's rows, validated, with their audio moved into the cache (shared clips
    dedupe there), one record batch at a time."""
    rows = []
    for n, record in enumerate(_shard_records(shard)):
        try:
            cell = read_cell(record.pop("audio"))
            entry = Entry(**record, audio=AudioCell(path=cell.path))
        except (ValidationError, KeyError, TypeError, ValueError) as exc:
            raise VariantError(
                f"{shard}: row {n} is not a RedVox row ({_first_line(exc)}); "
                "download or build the shard again"
            ) from None
        rows.append(ShardRow(entry, cache.put_blob(cell.bytes)))
    return rows


def _shard_records(shard: Path) -> Iterator[dict]:
    """The shard's records; a file that does not read as parquet is a VariantError naming it."""
    try:
        for batch in pq.ParquetFile(shard).iter_batches(batch_size=256):
            yield from batch.to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise VariantError(
            f"{shard}: not a readable parquet shard ({_first_line(exc)}); "
            "download or build it again"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _new_rows(
    existing: list[ShardRow],
    condition: NoiseCondition,
    renderer: ClipRenderer,
    shared: tuple[AudioRef, str] | None,
    version: str,
) -> tuple[list[ShardRow], int]:
    """One row of `condition` per contribution found in `existing`, numbered after them;
    and how many contributions had no row to take the new one from."""
    if any(r.entry.audio_type == condition.name for r in existing):
        raise VariantError(f"the build already has rows of {condition.name!r}; pick another name")
    spoken = mixes_speech(condition)
    templates: dict[tuple[str, str, str], ShardRow] = {}
    contributions: set[tuple[str, str, str]] = set()
    for row in existing:
        e = row.entry
        key = (e.source, e.original_id, e.user_id)
        contributions.add(key)
        wanted = e.audio_type == SPEECH_AUDIO_TYPE if spoken else e.modality == "text"
        if wanted and key not in templates:
            templates[key] = row
    next_id = max((r.entry.ID for r in existing), default=-1) + 1
    ordered = sorted(templates, key=lambda k: (k[0], natural_key(k[1]), k[2]))
    rows = []
    for offset, key in enumerate(ordered):
        template = templates[key]
        e = template.entry
        entry_id = entry_key(e.lang, item_key(e.source, e.original_id), e.user_id, condition.name)
        if spoken:
            speech_s = len(flac_samples(renderer.cache.blob(template.audio_digest))) / SAMPLE_RATE
            clip, params = renderer.per_entry(
                condition, entry_id, speech_digest=template.audio_digest, speech_s=speech_s
            )
        else:
            clip, params = shared or renderer.per_entry(condition, entry_id)
        fields = e.model_dump(exclude={"audio"})
        fields.update(
            ID=next_id + offset,
            audio_type=condition.name,
            modality="speech" if spoken else "text",
            entry_key=entry_id,
            duration_s=clip.duration_s,
            condition_params=params,
            builder_version=version,
        )
        rows.append(ShardRow(Entry(**fields, audio=AudioCell(path=clip.path)), clip.digest))
    return rows, len(contributions) - len(templates)

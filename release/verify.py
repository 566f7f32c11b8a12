"""Check a staged folder the way downstream users will meet it, before it is pushed.

Every check is a function returning problems (empty: passed), so each can be
tested alone; `verify_staged` runs them all: layout, card, `load_dataset`
with the pinned `datasets` for every config, audio decoding through
`datasets` (torchcodec) and through soundfile, consent read again from the
registry, and no direct identifier or absolute path anywhere.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redvox.schemas import COLUMNS, LANGUAGES, SAMPLE_RATE, InputConfig

from .card import ALL_CONFIG, SPLIT, CardError, read_card, staged_provenance
from .stage import LOADING_SCRIPT, TOP_LEVEL, staged_files

DURATION_TOLERANCE_S = 0.002
# Column names that would carry a direct identifier, whatever the schema says.
IDENTIFYING_NAMES = re.compile(
    r"(^|_)(name|first_?name|last_?name|surname|e_?mail|phone|address|participant_key|"
    r"audio_file|file_?name|original_file)($|_)",
    re.IGNORECASE,
)
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
ABSOLUTE_PATH = re.compile(
    r"(?<![\w:/.~-])(?:/(?:home|Users|tmp|root|work|mnt|media|var|srv|opt|scratch|data|private)/"
    r"[^\s\"'`)]*|[A-Za-z]:\\[^\s\"'`]+|file://\S+)"
)


@dataclass(frozen=True)
class Problem:
    check: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}"


@dataclass
class VerificationResult:
    staged: Path
    problems: list[Problem] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # config -> rows loaded
    decoded_clips: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            configs = ", ".join(f"{c} {n}" for c, n in self.rows.items())
            return (
                f"{self.staged}: verified (rows per config: {configs}; "
                f"{self.decoded_clips} distinct clips decoded)"
            )
        return "\n".join(f"  {p}" for p in self.problems)


@dataclass(frozen=True)
class Registry:
    """What verify needs from the private inputs: who may be in the set today, and
    the strings that would identify someone if they leaked into the files."""

    allowed_user_ids: frozenset[str]
    private_strings: frozenset[str]  # participant keys, original file names


def read_registry(config: InputConfig, dataset_set: str) -> Registry:
    """Read the consent registry again (not the build's view of it)."""
    from redvox.builder.pseudonym import load_pseudonym_key, pseudonymize
    from redvox.schemas import resolve_consent
    from redvox.sources.contributions import read_contributions
    from redvox.sources.registry import read_consent, read_participants

    key = load_pseudonym_key(config.pseudonym_key_file)
    records: dict[str, list] = {}
    for record in read_consent(config.consent).records:
        records.setdefault(record.participant_key, []).append(record)
    allowed = frozenset(
        pseudonymize(key, participant)
        for participant, rows in records.items()
        if resolve_consent(rows).allows(dataset_set)
    )
    private = set(records)
    private |= {p.participant_key for p in read_participants(config.participants).records}
    for contribution in read_contributions(config.contributions, config.audio_root).records:
        private.add(contribution.audio_file)
        private.add(Path(contribution.audio_file).name)
    return Registry(allowed, frozenset(s for s in private if len(s) >= 4))


# --- checks on files ---


def check_layout(staged: Path) -> list[Problem]:
    """Only the files the Hub repo should hold; no root script `datasets` >= 4 trips on."""
    problems = []
    shard = re.compile(r"^data/(?P<lang>[a-z]{2})/test-\d{5}-of-\d{5}\.parquet$")
    for rel in staged_files(staged):
        if rel in TOP_LEVEL or rel == LOADING_SCRIPT:
            continue
        match = shard.match(rel)
        if match and match["lang"] in LANGUAGES:
            continue
        if rel.startswith("evaluation/") and "__pycache__" not in rel and not rel.endswith(".pyc"):
            continue
        problems.append(Problem("layout", f"{staged / rel}: stray file; remove it or stage again"))
    for needed in TOP_LEVEL:
        if not (staged / needed).is_file():
            problems.append(Problem("layout", f"{staged / needed}: missing; stage again"))
    if not (staged / "evaluation").is_dir():
        problems.append(Problem("layout", f"{staged / 'evaluation'}: evaluator missing"))
    return problems


def check_file_names(staged: Path, registry: Registry) -> list[Problem]:
    problems = []
    for rel in staged_files(staged):
        for secret in registry.private_strings:
            if secret in rel:
                problems.append(
                    Problem(
                        "identifiers",
                        f"{staged / rel}: file name contains a private key or original file name",
                    )
                )
        if EMAIL.search(rel):
            problems.append(
                Problem("identifiers", f"{staged / rel}: file name contains an e-mail address")
            )
    return problems


def check_text_files(
    staged: Path, registry: Registry, local_prefixes: Iterable[str]
) -> list[Problem]:
    """No absolute path, e-mail address or private string in the card, terms and code."""
    problems = []
    prefixes = [p for p in local_prefixes if len(p) > 1]
    for rel in staged_files(staged):
        if rel.endswith(".parquet"):
            continue
        try:
            text = (staged / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            where = f"{staged / rel}:{lineno}"
            if ABSOLUTE_PATH.search(line) or any(p in line for p in prefixes):
                problems.append(Problem("paths", f"{where}: absolute path {line.strip()[:80]!r}"))
            if any(s in line for s in registry.private_strings):
                problems.append(
                    Problem(
                        "identifiers", f"{where}: contains a participant key or original file name"
                    )
                )
    return problems


# --- checks on the card ---


def check_card(staged: Path, counts: dict[str, Counter]) -> list[Problem]:
    """YAML parses; one config per language plus `all` (default), split test; the
    counts it states equal the rows; shard hashes equal the files."""
    try:
        meta, _ = read_card(staged)
    except CardError as exc:
        return [Problem("card", str(exc))]
    card = staged / "README.md"
    problems = []
    langs = sorted(counts)
    configs = {c.get("config_name"): c for c in meta.get("configs") or []}
    if set(configs) != {ALL_CONFIG, *langs}:
        problems.append(
            Problem("card", f"{card}: configs {sorted(configs)} != {[ALL_CONFIG, *langs]}")
        )
    if not configs.get(ALL_CONFIG, {}).get("default"):
        problems.append(Problem("card", f"{card}: config 'all' is not the default"))
    for name, config in configs.items():
        splits = {f.get("split") for f in config.get("data_files") or []}
        if splits != {SPLIT}:
            problems.append(
                Problem("card", f"{card}: config {name} has splits {sorted(splits)}, not ['test']")
            )
    stated = {
        info.get("config_name"): sum(s.get("num_examples", 0) for s in info.get("splits") or [])
        for info in meta.get("dataset_info") or []
    }
    actual = {lang: sum(c.values()) for lang, c in counts.items()}
    actual[ALL_CONFIG] = sum(actual.values())
    for name, n in actual.items():
        if stated.get(name) != n:
            problems.append(
                Problem(
                    "counts",
                    f"{card}: dataset_info says {stated.get(name)} rows for {name}, the shards hold {n}",
                )
            )
    provenance = staged_provenance(staged)
    problems += _check_provenance_counts(card, provenance.get("counts") or {}, counts)
    for rel, digest in (provenance.get("shards") or {}).items():
        path = staged / rel
        if not path.is_file():
            problems.append(Problem("card", f"{card}: lists shard {rel}, which is missing"))
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(
                Problem("card", f"{path}: sha256 differs from the card (changed after staging)")
            )
    if provenance.get("set") == "public" and "extra_gated_fields" not in meta:
        problems.append(Problem("card", f"{card}: public set without the gated access form"))
    return problems


def _check_provenance_counts(card: Path, stated: dict, counts: dict[str, Counter]) -> list[Problem]:
    flat_stated = Counter(
        {
            (lang, a, v): n
            for lang, per_a in stated.items()
            for a, per_v in per_a.items()
            for v, n in per_v.items()
        }
    )
    flat_actual = Counter({(lang, *k): n for lang, c in counts.items() for k, n in c.items()})
    diff = sorted(set(flat_stated.items()) ^ set(flat_actual.items()))
    if not diff:
        return []
    (lang, audio_type, vuln), _ = diff[0]
    return [
        Problem(
            "counts",
            f"{card}: counts for {lang}/{audio_type}/{vuln}: card {flat_stated[(lang, audio_type, vuln)]}, "
            f"shards {flat_actual[(lang, audio_type, vuln)]}",
        )
    ]


# --- checks through `datasets` ---


def load_configs(staged: Path, configs: list[str], cache_dir: Path) -> tuple[dict, list[Problem]]:
    """`load_dataset(STAGED, cfg, split="test")` for every config, in a fresh cache.

    A config that fails as users would call it is a problem; it is then loaded
    once more without `datasets`' own checks, so the row checks still run.
    """
    import datasets

    loaded, problems = {}, []
    for cfg in configs:
        try:
            loaded[cfg] = datasets.load_dataset(
                str(staged), cfg, split=SPLIT, cache_dir=str(cache_dir)
            )
            continue
        except Exception as exc:  # noqa: BLE001 - any failure here is what users would hit
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            problems.append(Problem("load", f"load_dataset({staged}, {cfg!r}) failed: {reason}"))
        try:
            loaded[cfg] = datasets.load_dataset(
                str(staged),
                cfg,
                split=SPLIT,
                cache_dir=str(cache_dir),
                verification_mode="no_checks",
            )
        except Exception:  # noqa: BLE001, S112 - already reported above
            continue
    return loaded, problems


def check_columns(loaded: dict) -> list[Problem]:
    from redvox.schemas import release_features

    problems = []
    for cfg, ds in loaded.items():
        if tuple(ds.column_names) != COLUMNS:
            problems.append(
                Problem(
                    "columns",
                    f"config {cfg}: columns {ds.column_names} differ from the contract {list(COLUMNS)}",
                )
            )
        elif ds.features != release_features():
            problems.append(
                Problem(
                    "columns",
                    f"config {cfg}: features differ from redvox.schemas.release_features()",
                )
            )
    return problems


def check_rows(ds, registry: Registry, local_prefixes: Iterable[str]) -> list[Problem]:
    """Consent, identifiers and paths in the cells of every row (audio not decoded)."""
    from datasets import Audio

    raw = ds.cast_column("audio", Audio(decode=False))
    problems = []
    prefixes = [p for p in local_prefixes if len(p) > 1]
    text_columns = [c for c, f in raw.features.items() if getattr(f, "dtype", None) == "string"]
    for i, row in enumerate(raw):
        where = f"row {i} ({row['lang']} ID {row['ID']})"
        if row["user_id"] not in registry.allowed_user_ids:
            problems.append(
                Problem(
                    "consent",
                    f"{where}: user_id {row['user_id']} has no valid consent for this set in the registry today",
                )
            )
        cells = {c: row[c] for c in text_columns if row[c]}
        cells["audio.path"] = row["audio"]["path"] or ""
        for column, value in cells.items():
            absolute = column == "audio.path" and (value.startswith("/") or "\\" in value)
            if absolute or ABSOLUTE_PATH.search(value) or any(p in value for p in prefixes):
                problems.append(
                    Problem("paths", f"{where}, column {column}: absolute path {value[:80]!r}")
                )
            if EMAIL.search(value):
                problems.append(Problem("identifiers", f"{where}, column {column}: e-mail address"))
            if any(s in value for s in registry.private_strings):
                problems.append(
                    Problem(
                        "identifiers",
                        f"{where}, column {column}: participant key or original file name",
                    )
                )
    return problems


def check_audio(ds) -> tuple[int, list[Problem]]:
    """Every audio cell decodes through `datasets` (torchcodec) and through soundfile,
    completely: every frame the FLAC header announces is read back, and the samples
    hash to the MD5 the encoder stored, so a damaged byte anywhere in a clip fails,
    not only in its header. Mono at 16 kHz with the row's `duration_s`. Cells with
    the same bytes (shared clips) are decoded once."""
    from datasets import Audio

    raw = ds.cast_column("audio", Audio(decode=False))
    seen: dict[str, int] = {}
    problems = []
    for i, row in enumerate(raw):
        data = row["audio"]["bytes"] or b""
        digest = hashlib.sha256(data).hexdigest()
        where = f"row {i} ({row['lang']} ID {row['ID']})"
        if digest not in seen:
            try:
                samples = ds[i]["audio"].get_all_samples()
                via_datasets = (samples.data.shape[0], samples.sample_rate, samples.data.shape[-1])
                via_soundfile, damage = decode_flac_fully(data)
            except Exception as exc:  # noqa: BLE001 - a broken cell, whatever the codec says
                problems.append(
                    Problem("audio", f"{where}: audio does not decode: {type(exc).__name__}: {exc}")
                )
                seen[digest] = -1
                continue
            if damage:
                problems.append(Problem("audio", f"{where}: {damage}"))
                seen[digest] = -1
                continue
            if via_datasets != via_soundfile:
                problems.append(
                    Problem(
                        "audio",
                        f"{where}: datasets decodes {via_datasets}, soundfile {via_soundfile}",
                    )
                )
            channels, rate, frames = via_soundfile
            if channels != 1 or rate != SAMPLE_RATE:
                problems.append(
                    Problem(
                        "audio", f"{where}: {channels} channels at {rate} Hz, expected mono 16 kHz"
                    )
                )
            seen[digest] = frames
        frames = seen[digest]
        if frames >= 0 and abs(frames / SAMPLE_RATE - row["duration_s"]) > DURATION_TOLERANCE_S:
            problems.append(
                Problem(
                    "audio",
                    f"{where}: audio lasts {frames / SAMPLE_RATE:.3f} s, duration_s says {row['duration_s']:.3f}",
                )
            )
    return sum(1 for f in seen.values() if f >= 0), problems


def decode_flac_fully(data: bytes) -> tuple[tuple[int, int, int], str | None]:
    """(channels, sample rate, frames) of FLAC bytes decoded to the last sample, and what
    is wrong with them (None: nothing): fewer frames than the header announces, or
    samples that differ from the MD5 in STREAMINFO. soundfile raises on a frame
    whose CRC does not match."""
    import soundfile as sf

    info = sf.info(io.BytesIO(data))
    samples, _ = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    shape = (info.channels, info.samplerate, len(samples))
    if len(samples) != info.frames:
        return shape, f"short read: {len(samples)} of the {info.frames} frames the header announces"
    md5, bits = _streaminfo_md5(data)
    decoded = hashlib.md5(samples.astype("<i2").tobytes(), usedforsecurity=False).digest()
    if md5 and bits == 16 and decoded != md5:
        return shape, "decoded samples differ from the MD5 in the FLAC header (damaged audio)"
    return shape, None


def _streaminfo_md5(data: bytes) -> tuple[bytes | None, int]:
    """The MD5 of the unencoded samples and the bits per sample from a FLAC STREAMINFO
    block; (None, 0) when absent or all zero (the encoder did not compute it)."""
    if data[:4] != b"fLaC" or len(data) < 42 or data[4] & 0x7F != 0:
        return None, 0
    info = data[8:42]  # the 34 bytes of STREAMINFO, right after its block header
    bits = (((info[12] & 0x01) << 4) | (info[13] >> 4)) + 1
    md5 = info[18:34]
    return (md5 if any(md5) else None), bits


def check_target_visibility(provenance: dict[str, Any], repo_id: str | None, api) -> list[Problem]:
    """The full set never goes to a public repo."""
    if provenance.get("set") != "full" or api is None or not repo_id:
        return []
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        info = api.dataset_info(repo_id)
    except RepositoryNotFoundError:
        return []
    if not info.private:
        return [
            Problem("target", f"{repo_id} is public: the full set may only go to a private repo")
        ]
    return []


def shard_counts(staged: Path) -> dict[str, Counter]:
    """lang -> Counter of (audio_type, vulnerability_type) over the staged shards."""
    import pyarrow.parquet as pq

    counts: dict[str, Counter] = {}
    for shard in sorted((staged / "data").glob("*/*.parquet")):
        table = pq.read_table(shard, columns=["audio_type", "vulnerability_type"])
        pairs = zip(
            table.column("audio_type").to_pylist(),
            table.column("vulnerability_type").to_pylist(),
            strict=True,
        )
        counts.setdefault(shard.parent.name, Counter()).update(pairs)
    return counts


def verify_staged(
    staged: Path,
    *,
    config: InputConfig,
    repo_id: str | None = None,
    api=None,
    manifest: dict[str, Any] | None = None,
    echo: Callable[[str], None] = lambda _: None,
) -> VerificationResult:
    """Run every check; `manifest` (the build's) adds a comparison of row counts with it."""
    staged = Path(staged).resolve()
    result = VerificationResult(staged)
    problems = result.problems
    problems += check_layout(staged)
    try:
        meta, _ = read_card(staged)
    except CardError as exc:
        problems.append(Problem("card", str(exc)))
        return result
    provenance = staged_provenance(staged)
    dataset_set = provenance.get("set", "public")
    problems += check_target_visibility(provenance, repo_id, api)
    echo("reading the consent registry again")
    registry = read_registry(config, dataset_set)
    local = [str(staged), str(Path.home()), str(config.audio_root), str(config.consent.parent)]
    problems += check_file_names(staged, registry)
    problems += check_text_files(staged, registry, local)
    counts = shard_counts(staged)
    problems += check_card(staged, counts)
    if manifest is not None and manifest.get("counts") is not None:
        problems += _check_provenance_counts(
            Path(f"{manifest.get('set')}/manifest.json"), manifest["counts"], counts
        )
    cache = Path(tempfile.mkdtemp(prefix="redvox-verify-"))
    try:
        echo(f"load_dataset for configs {[ALL_CONFIG, *sorted(counts)]}")
        loaded, load_problems = load_configs(staged, [ALL_CONFIG, *sorted(counts)], cache)
        problems += load_problems
        result.rows = {cfg: len(ds) for cfg, ds in loaded.items()}
        problems += check_columns(loaded)
        for cfg, n in result.rows.items():
            expected = (
                sum(counts[cfg].values())
                if cfg in counts
                else sum(sum(c.values()) for c in counts.values())
            )
            if n != expected:
                problems.append(
                    Problem(
                        "counts",
                        f"config {cfg}: load_dataset gives {n} rows, the shards hold {expected}",
                    )
                )
        if ALL_CONFIG in loaded and not any(p.check == "columns" for p in problems):
            echo("checking consent, identifiers and paths in every row")
            problems += check_rows(loaded[ALL_CONFIG], registry, local)
            echo("decoding every distinct audio clip (torchcodec and soundfile)")
            result.decoded_clips, audio_problems = check_audio(loaded[ALL_CONFIG])
            problems += audio_problems
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return result

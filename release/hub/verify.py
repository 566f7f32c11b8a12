"""Check a staged folder the way downstream users will meet it, before it is pushed.

Every check is a function returning problems (empty: passed), so each can be
tested alone; `verify_staged` runs them all: layout, card, `load_dataset`
with the pinned `datasets` for every config, audio decoding through
torchcodec (what `datasets` decodes with) and through soundfile, consent read again from the
registry, and no direct identifier or absolute path anywhere.

Verify runs at build speed: each language config is converted by `load_dataset`
once, and `all` is checked as the concatenation of those (its file list, read
from the card without converting the shards again, must be the languages' files
in the fixed order en, de, es, fr, it); every distinct clip is decoded once, by
the hash of its bytes (soundfile on a pool of threads, torchcodec in a child
process, so its 400 MB of imports stay out of this one); the rows are read as
Arrow batches.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redvox.builder.manifest import MANIFEST, BuildManifest
from redvox.builder.versions import declared_languages
from redvox.schemas import COLUMNS, SAMPLE_RATE, InputConfig
from redvox.schemas.audio_cell import column_bytes, decode_fully
from redvox.schemas.layout import SHARD_RE, sha256_file, shard_paths
from redvox.schemas.vocab import FULL, PUBLIC, language_order

from .card import ALL_CONFIG, SPLIT, TEMPLATES, CardError, read_card, staged_provenance
from .stage import EVALUATOR, LOADING_SCRIPT, TOP_LEVEL, staged_files

DURATION_TOLERANCE_S = 0.002
# Threads that decode clips (soundfile and torchcodec release the GIL while decoding).
VERIFY_WORKERS = max(1, min(4, os.cpu_count() or 1))
BATCH_ROWS = 256
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
                f"{self.decoded_clips} distinct clips decoded, each once across all shards; "
                f"stage counts a clip once per shard it is stored in)"
            )
        return "\n".join(f"  {p}" for p in self.problems)


# A token: a run of the characters keys and file names are made of. A private string is
# found only as a whole token or a whole cell value, never inside an ordinary word
# (a key `en` is not found in `entry`, nor `audio` in `audio_type`).
_TOKEN = re.compile(r"[\w@.+-]+")
# Columns whose values come from a vocabulary (or a public source id): a private string
# spelled like one of their values (a key `female`, `en` or `speech`) is that value there.
VOCABULARY_COLUMNS = frozenset(
    {"lang", "vulnerability_type", "attack_type", "audio_type", "modality", "gender",
     "age_group", "mother_tongue", "source", "builder_version", "original_id"}
)  # fmt: skip


def tokens(text: str) -> set[str]:
    """The tokens of `text`, each also without the full stops around it (end of a sentence)."""
    found = set(_TOKEN.findall(text))
    return found | {t.strip(".") for t in found}


@dataclass(frozen=True)
class Registry:
    """What verify needs from the private inputs: who may be in the set today, and
    the strings that would identify someone if they leaked into the files.

    `ordinary_words` are the words of what the release is made of in public (the
    items' and contributions' texts, the vocabularies, the noise bank's file names,
    the card and evaluator templates): a private string that is also one of them
    (a key `speech`) cannot be told from that word, so it is only looked for as a
    whole cell value outside the vocabulary columns, never as a token."""

    allowed_user_ids: frozenset[str]
    private_strings: frozenset[str]  # participant keys, original file names and paths
    ordinary_words: frozenset[str] = frozenset()

    @property
    def searchable(self) -> tuple[frozenset[str], tuple[str, ...]]:
        """(private tokens that are no ordinary word, private strings of several tokens)."""
        cached = self.__dict__.get("_searchable")
        if cached is None:
            single = {s for s in self.private_strings if _TOKEN.fullmatch(s)}
            phrases = tuple(sorted(self.private_strings - single))
            cached = (frozenset(single - self.ordinary_words), phrases)
            object.__setattr__(self, "_searchable", cached)
        return cached

    def found_in(self, text: str) -> bool:
        """Whether a private string that is no ordinary word is a token of `text` (one of
        several tokens, such as a file name with a space: a part of `text`)."""
        single, phrases = self.searchable
        return not single.isdisjoint(tokens(text)) or any(p in text for p in phrases)

    def leaks(self, column: str, value: str) -> bool:
        if value in self.private_strings and column not in VOCABULARY_COLUMNS:
            return True
        return self.found_in(value)


def read_registry(config: InputConfig, dataset_set: str, build: Path | None = None) -> Registry:
    """Read the registries again, through the build's fail-closed reader (not the build's
    view of them): ConsentRecheckError when a row cannot be read as the build reads it
    or, with `build` (its version folder), when they changed since that build."""
    from redvox.sources.contributions import read_contributions

    from .consent import release_consent

    view = release_consent(config, build)
    contributions = read_contributions(config.contributions, config.audio_root).records
    private = set(view.participant_keys)
    for contribution in contributions:
        private.add(contribution.participant_key)
        private.add(contribution.audio_file)
        private.add(Path(contribution.audio_file).name)
    return Registry(view.allowed(dataset_set), frozenset(private), ordinary_words(config))


def ordinary_words(config: InputConfig) -> frozenset[str]:
    """The tokens of every public text the release is made of (see `Registry`)."""
    from redvox.builder.versions import VERSIONS
    from redvox.schemas import vocab
    from redvox.sources.contributions import read_contributions
    from redvox.sources.texts import read_texts, text_sources

    words: set[str] = set(COLUMNS) | {SPLIT, ALL_CONFIG}
    for values in (declared_languages(), vocab.GENDERS, vocab.AGE_GROUPS, vocab.VULNERABILITY_TYPES,
                   vocab.SETS, vocab.LANGUAGE_NAMES.values(), ("speech", "text",
                   *(m.NAME for m in text_sources()), vocab.ATTACK_TYPE)):  # fmt: skip
        words.update(values)
    for version in VERSIONS.values():
        words.update(c.name for c in version.config.conditions)
    texts: list[str] = []
    # Each declared version's languages (a file may lack a language a later one adds).
    for languages in dict.fromkeys(version.config.languages for version in VERSIONS.values()):
        for _, read in read_texts(config, languages):
            for item in read.records:
                texts += [item.item_id, item.source_category, *item.text.values()]
    for c in read_contributions(config.contributions, config.audio_root).records:
        texts += [c.spoken_text, c.speech_followup, c.audio_request_text, c.transcript or ""]
    bank = Path(config.noise_bank)
    texts += [p.relative_to(bank).as_posix() for p in bank.rglob("*") if p.is_file()]
    # What the card, terms, loading script and evaluator are written from.
    shipped = [*TEMPLATES.rglob("*"), *EVALUATOR.rglob("*"), Path(__file__).with_name("card.py")]
    for path in shipped:
        if path.is_file() and path.suffix in (".md", ".py", ".txt", ".jsonl", ".json"):
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    for text in texts:
        words |= tokens(text)
    return frozenset(words)


# --- checks on files ---


def check_consent(staged: Path, registry: Registry, dataset_set: str) -> list[Problem]:
    """Every user_id of the staged shards has consent for `dataset_set` today."""
    from .consent import user_ids_of

    counts = user_ids_of(staged)
    return [
        Problem(
            "consent",
            f"user_id {uid} ({counts[uid]} rows) has no valid consent for the {dataset_set} "
            "set in the registry today",
        )
        for uid in sorted(counts)
        if uid not in registry.allowed_user_ids
    ]


def check_layout(staged: Path) -> list[Problem]:
    """Only the files the Hub repo should hold; no root script `datasets` >= 4 trips on."""
    problems = []
    for rel in staged_files(staged):
        if rel in TOP_LEVEL or rel == LOADING_SCRIPT:
            continue
        match = SHARD_RE.match(rel)
        if match and match["lang"] in declared_languages():
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
        if registry.found_in(rel):
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
            if registry.found_in(line):
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
        elif sha256_file(path) != digest:
            problems.append(
                Problem("card", f"{path}: sha256 differs from the card (changed after staging)")
            )
    if provenance.get("set") == PUBLIC and "extra_gated_fields" not in meta:
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

    `all` is not converted a second time: `datasets` resolves its file list from
    the card (`load_dataset_builder`, nothing read), which must be the language
    configs' files, languages in the order en, de, es, fr, it; it is then the
    concatenation of the language datasets, which is what `load_dataset` builds
    from that list. Only when the list differs is `all` loaded on its own.
    """
    import datasets

    loaded, problems = {}, []
    langs = [c for c in configs if c != ALL_CONFIG]
    if ALL_CONFIG in configs:
        files, order_problems = _all_config_files(staged, cache_dir)
        problems += order_problems
        if not order_problems:  # `all` is then built from every language it reads
            langs += [lang for lang in files if lang not in langs]
    for cfg in langs:
        loaded[cfg], cfg_problems = _load(staged, cfg, cache_dir)
        problems += cfg_problems
    if ALL_CONFIG in configs:
        if order_problems or any(loaded.get(lang) is None for lang in files):
            loaded[ALL_CONFIG], cfg_problems = _load(staged, ALL_CONFIG, cache_dir)
            problems += cfg_problems
        else:
            loaded[ALL_CONFIG] = datasets.concatenate_datasets([loaded[lang] for lang in files])
    return {cfg: loaded[cfg] for cfg in configs if loaded.get(cfg) is not None}, problems


def _load(staged: Path, cfg: str, cache_dir: Path):
    """(dataset or None, problems) of one config, as users load it."""
    import datasets
    import pyarrow as pa

    problems = []
    for options in ({}, {"verification_mode": "no_checks"}):
        try:
            return datasets.load_dataset(
                str(staged), cfg, split=SPLIT, cache_dir=str(cache_dir), **options
            ), problems
        except Exception as exc:  # noqa: BLE001 - any failure here is what users would hit
            if not problems:
                reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                problems.append(
                    Problem("load", f"load_dataset({staged}, {cfg!r}) failed: {reason}")
                )
        finally:
            # The conversion's buffers are freed, but Arrow's allocator keeps them
            # mapped: hand them back so the next config does not stack on top.
            pa.default_memory_pool().release_unused()
    return None, problems


def _all_config_files(staged: Path, cache_dir: Path) -> tuple[dict[str, list[str]], list[Problem]]:
    """lang -> the files `datasets` resolves for config `all`, and what is wrong with them:
    not the languages' own configs' files, or not in the order en, de, es, fr, it."""
    import datasets

    from redvox.schemas import release_features

    def resolved(cfg: str) -> list[str]:
        builder = datasets.load_dataset_builder(str(staged), cfg, cache_dir=str(cache_dir))
        features[cfg] = builder.info.features
        return [str(f) for f in builder.config.data_files[SPLIT]]

    features: dict = {}
    try:
        files = resolved(ALL_CONFIG)
    except Exception as exc:  # noqa: BLE001 - reported; `all` is then loaded on its own
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return {}, [Problem("load", f"config {ALL_CONFIG}: cannot resolve its files: {reason}")]
    if features[ALL_CONFIG] not in (None, release_features()):
        # the concatenated languages would not show the card's features for `all`
        return {}, [
            Problem(
                "columns",
                f"config {ALL_CONFIG}: the card's features differ from redvox.schemas.release_features()",
            )
        ]
    by_lang: dict[str, list[str]] = {}
    for path in files:
        by_lang.setdefault(Path(path).parent.name, []).append(path)
    order = sorted(by_lang, key=language_order)
    expected = []
    try:
        for lang in order:
            expected += resolved(lang)
    except Exception as exc:  # noqa: BLE001
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return by_lang, [Problem("load", f"config {ALL_CONFIG}: a language config fails: {reason}")]
    if files != expected:
        rel = [
            Path(f).relative_to(staged).as_posix() if Path(f).is_relative_to(staged) else f
            for f in files
        ]
        return by_lang, [
            Problem(
                "order",
                f"config {ALL_CONFIG} reads {rel}: not the language configs' files in the order "
                f"{', '.join(order)}; rows would come in another order than the loading script's",
            )
        ]
    return {lang: by_lang[lang] for lang in order}, []


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


def check_keys(ds) -> list[Problem]:
    """The documented unique keys: `entry_key`, and (`lang`, `ID`), each once per config."""
    problems = []
    keys = _column(ds, "entry_key")
    pairs = list(zip(_column(ds, "lang"), _column(ds, "ID"), strict=True))
    for name, values in (("entry_key", keys), ("(lang, ID)", pairs)):
        repeated = [k for k, n in Counter(values).items() if n > 1]
        if repeated:
            problems.append(
                Problem(
                    "keys",
                    f"{name} is not unique: {len(repeated)} values repeat, e.g. {repeated[0]!r}",
                )
            )
    return problems


def _column(ds, name: str) -> list:
    return [v for batch in _batches(ds, [name]) for v in batch.column(name).to_pylist()]


def _batches(ds, columns: list[str] | None = None) -> Iterator:
    """The rows of `ds` as pyarrow tables (no cell decoded), in order.

    A dataset that is exactly its `datasets` cache files (what `load_dataset` and
    `concatenate_datasets` return) is read from those files as a stream, batch by
    batch, so memory holds one batch: memory-mapping them would keep every page
    read, all the audio, resident. Anything else is read through `datasets`."""
    import pyarrow as pa

    files = [f["filename"] for f in ds.cache_files]
    if files and getattr(ds, "_indices", None) is None:
        try:
            streams = [pa.ipc.open_stream(pa.OSFile(f)) for f in files]
        except (OSError, pa.ArrowInvalid):
            streams = []
        if streams and all(s.schema.names == ds.column_names for s in streams):
            yield from _stream_batches(streams, columns, len(ds))
            return
    source = ds.select_columns(columns) if columns else ds
    yield from source.with_format("arrow").iter(batch_size=BATCH_ROWS)


def _stream_batches(streams, columns: list[str] | None, expected_rows: int) -> Iterator:
    import pyarrow as pa

    rows = 0
    for stream in streams:
        with stream:
            for batch in stream:
                rows += batch.num_rows
                table = pa.Table.from_batches([batch])
                yield table.select(columns) if columns else table
                del batch, table
        pa.default_memory_pool().release_unused()
    if rows != expected_rows:
        raise RuntimeError(f"the cache files hold {rows} rows, the dataset {expected_rows}")


def check_rows(ds, registry: Registry, local_prefixes: Iterable[str]) -> list[Problem]:
    """Identifiers and paths in the cells of every row, as `datasets` loads them (audio
    not decoded); consent is checked on the shards (`check_consent`)."""
    problems = []
    prefixes = [p for p in local_prefixes if len(p) > 1]
    text_columns = [
        c for c, f in ds.features.items() if c != "audio" and getattr(f, "dtype", None) == "string"
    ]
    i = 0
    for batch in _batches(
        ds, list(dict.fromkeys(["ID", "lang", "user_id", "audio", *text_columns]))
    ):
        columns = {c: batch.column(c).to_pylist() for c in ("ID", "lang", "user_id", *text_columns)}
        paths = [p for c in batch.column("audio").chunks for p in c.field("path").to_pylist()]
        for j in range(batch.num_rows):
            where = f"row {i} ({columns['lang'][j]} ID {columns['ID'][j]})"
            i += 1
            cells = {c: columns[c][j] for c in text_columns if columns[c][j]}
            cells["audio.path"] = paths[j] or ""
            for column, value in cells.items():
                absolute = column == "audio.path" and (value.startswith("/") or "\\" in value)
                if absolute or ABSOLUTE_PATH.search(value) or any(p in value for p in prefixes):
                    problems.append(
                        Problem("paths", f"{where}, column {column}: absolute path {value[:80]!r}")
                    )
                if EMAIL.search(value):
                    problems.append(
                        Problem("identifiers", f"{where}, column {column}: e-mail address")
                    )
                if registry.leaks(column, value):
                    problems.append(
                        Problem(
                            "identifiers",
                            f"{where}, column {column}: participant key or original file name",
                        )
                    )
    return problems


def check_audio(ds, workers: int = VERIFY_WORKERS) -> tuple[int, list[Problem]]:
    """Every audio cell decodes through torchcodec (what `datasets` decodes with) and
    through soundfile, completely: every frame the FLAC header announces is read back,
    and the samples hash to the MD5 the encoder stored, so a damaged byte anywhere in a
    clip fails, not only in its header. Mono at 16 kHz with the row's `duration_s`.
    Cells with the same bytes (shared clips) are decoded once, by the sha256 of their
    bytes: soundfile on `workers` threads, torchcodec in a child process (importing it
    costs some 400 MB, which stays out of this process)."""
    rows: list[tuple[str, str, float]] = []  # (where, digest, duration_s) per row
    futures: dict[str, Future] = {}
    with tempfile.TemporaryDirectory(prefix="redvox-verify-clips-") as clips, \
            _TorchcodecChild() as torchcodec, \
            ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # fmt: skip
        i = 0
        for batch in _batches(ds, ["ID", "lang", "duration_s", "audio"]):
            ids, langs = batch.column("ID").to_pylist(), batch.column("lang").to_pylist()
            durations = batch.column("duration_s").to_pylist()
            cells = column_bytes(batch.column("audio"))
            for j, data in enumerate(cells):
                data = data or b""
                digest = hashlib.sha256(data).hexdigest()
                if digest not in futures:
                    futures[digest] = pool.submit(_decode_soundfile, data)
                    torchcodec.decode(digest, Path(clips) / f"{digest}.flac", data)
                rows.append((f"row {i} ({langs[j]} ID {ids[j]})", digest, durations[j]))
                i += 1
            del cells, batch
        via_torchcodec = torchcodec.results()
        problems, frames_of = [], {}
        for where, digest, duration_s in rows:
            if digest not in frames_of:
                outcome = futures.pop(digest).result()
                frames_of[digest], found = _judge_clip(where, via_torchcodec[digest], outcome)
                problems += found
            frames = frames_of[digest]
            if frames >= 0 and abs(frames / SAMPLE_RATE - duration_s) > DURATION_TOLERANCE_S:
                problems.append(
                    Problem(
                        "audio",
                        f"{where}: audio lasts {frames / SAMPLE_RATE:.3f} s, duration_s says {duration_s:.3f}",
                    )
                )
    return sum(1 for f in frames_of.values() if f >= 0), problems


# Run by `_TorchcodecChild`: one clip path per line in, one JSON line per clip out.
_TORCHCODEC_DECODER = """
import json, sys
from torchcodec.decoders import AudioDecoder
for line in sys.stdin:
    digest, path = line.rstrip("\\n").split("\\t", 1)
    try:
        samples = AudioDecoder(path).get_all_samples()
        shape = [samples.data.shape[0], samples.sample_rate, samples.data.shape[-1]]
        print(json.dumps({"digest": digest, "shape": shape}), flush=True)
    except Exception as exc:
        print(json.dumps({"digest": digest, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
"""


class _TorchcodecChild:
    """torchcodec decoding in a child process, fed clip files as they are found; a
    thread drains its answers so neither side can block the other."""

    def __enter__(self) -> _TorchcodecChild:
        import subprocess
        import sys
        import threading

        self.process = subprocess.Popen(
            [sys.executable, "-P", "-c", _TORCHCODEC_DECODER],  # -P: cwd not on sys.path
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.answers: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.answers.extend(self.process.stdout), daemon=True
        )
        self.reader.start()
        return self

    def decode(self, digest: str, path: Path, data: bytes) -> None:
        path.write_bytes(data)
        self.process.stdin.write(f"{digest}\t{path}\n")

    def results(self) -> dict[str, tuple[int, int, int] | str]:
        """digest -> (channels, rate, frames), or the error torchcodec raised."""
        import json

        self.process.stdin.close()
        self.reader.join()
        code = self.process.wait()
        if code != 0:
            raise RuntimeError(f"torchcodec decoder exited {code}: {self.process.stderr.read()}")
        results: dict[str, tuple[int, int, int] | str] = {}
        for line in self.answers:
            answer = json.loads(line)
            results[answer["digest"]] = (
                tuple(answer["shape"]) if "shape" in answer else answer["error"]
            )
        return results

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _decode_soundfile(data: bytes):
    """(shape, damage) of one clip decoded by soundfile, or the exception it raised."""
    try:
        return decode_fully(data)
    except Exception as exc:  # noqa: BLE001 - a broken cell, whatever the codec says
        return exc


def _judge_clip(where: str, via_torchcodec, outcome) -> tuple[int, list[Problem]]:
    """(frames, problems) of a decoded clip; frames -1 when it is broken."""
    if isinstance(via_torchcodec, str):
        return -1, [Problem("audio", f"{where}: audio does not decode: {via_torchcodec}")]
    if isinstance(outcome, Exception):
        reason = f"{type(outcome).__name__}: {outcome}"
        return -1, [Problem("audio", f"{where}: audio does not decode: {reason}")]
    via_soundfile, damage = outcome
    if damage:
        return -1, [Problem("audio", f"{where}: {damage}")]
    problems = []
    if via_torchcodec != via_soundfile:
        problems.append(
            Problem(
                "audio", f"{where}: torchcodec decodes {via_torchcodec}, soundfile {via_soundfile}"
            )
        )
    channels, rate, frames = via_soundfile
    if channels != 1 or rate != SAMPLE_RATE:
        problems.append(
            Problem("audio", f"{where}: {channels} channels at {rate} Hz, expected mono 16 kHz")
        )
    return frames, problems


def check_target_visibility(provenance: dict[str, Any], repo_id: str | None, api) -> list[Problem]:
    """The full set never goes to a public repo."""
    if provenance.get("set") != FULL or api is None or not repo_id:
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
    for shard in shard_paths(staged):
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
    manifest: BuildManifest | None = None,
    build: Path | None = None,
    echo: Callable[[str], None] = lambda _: None,
) -> VerificationResult:
    """Run every check; `manifest` (the build's) adds a comparison of row counts with it;
    `build` (its version folder) refuses registries changed since that build. A registry
    that cannot be read as the build reads it raises ConsentRecheckError."""
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
    dataset_set = provenance.get("set", PUBLIC)
    problems += check_target_visibility(provenance, repo_id, api)
    echo("reading the consent registry again")
    registry = read_registry(config, dataset_set, build)
    consent = check_consent(staged, registry, dataset_set)
    if consent:  # decisive: the folder is not released, whatever else holds
        problems += consent
        return result
    local = [str(staged), str(Path.home()), str(config.audio_root), str(config.consent.parent)]
    problems += check_file_names(staged, registry)
    problems += check_text_files(staged, registry, local)
    counts = shard_counts(staged)
    problems += check_card(staged, counts)
    if manifest is not None:
        problems += _check_provenance_counts(
            Path(manifest.dataset_set) / MANIFEST, manifest.counts, counts
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
            problems += check_keys(loaded[ALL_CONFIG])
            echo("decoding every distinct audio clip (torchcodec and soundfile)")
            result.decoded_clips, audio_problems = check_audio(loaded[ALL_CONFIG])
            problems += audio_problems
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return result

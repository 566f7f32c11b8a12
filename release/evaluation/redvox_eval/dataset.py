"""Read RedVox rows for inference, streamed: a local staged folder (`data/<lang>/test-*.parquet`),
parquet shards named directly, or a Hub repo id through `datasets` when it is installed.

Rows come a parquet batch at a time, so memory holds a few dozen clips, not the release.
Each row is a dict of the release columns with `audio` as `{"bytes": ..., "path": ...}`
(the encoded FLAC/WAV, never decoded here).
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from .errors import EvaluationError
from .labels import LANGUAGES

BATCH_ROWS = 32
# The release layout, as redvox/schemas/layout.py defines it (this copy runs without redvox
# installed; tests/test_eval_standalone.py pins the two equal): one folder per language
# under DATA_DIR, its shards named by SHARD_GLOB (the card's `data_files` pattern).
DATA_DIR = "data"
SHARD_GLOB = "test-*.parquet"
FILTER_COLUMNS = ("lang", "audio_type", "vulnerability_type")


@dataclass(frozen=True)
class Selection:
    """Which rows to run: languages (None = all) and optional filters (None = any)."""

    langs: tuple[str, ...] | None = None
    audio_types: tuple[str, ...] | None = None
    vulnerability_types: tuple[str, ...] | None = None

    @classmethod
    def of(cls, lang: str, audio_types: Sequence[str], vulnerability_types: Sequence[str]):
        langs = None if lang == "all" else tuple(lang.split(","))
        for code in langs or ():
            if code not in LANGUAGES:
                raise EvaluationError(
                    f"--lang {code}: not a RedVox language ({', '.join(LANGUAGES)} or all)"
                )
        return cls(langs, tuple(audio_types) or None, tuple(vulnerability_types) or None)

    def keeps(self, lang: str, audio_type: str, vulnerability_type: str) -> bool:
        return (
            (self.langs is None or lang in self.langs)
            and (self.audio_types is None or audio_type in self.audio_types)
            and (self.vulnerability_types is None or vulnerability_type in self.vulnerability_types)
        )


def is_hub_id(source: str) -> bool:
    """`FBK-MT/RedVox` is a repo id; a path that exists, or looks like one, is not."""
    return (
        not Path(source).exists()
        and source.count("/") == 1
        and not source.startswith((".", "/", "~"))
        and not source.endswith(".parquet")
    )


def shards_of(source: str | Path, selection: Selection) -> list[Path]:
    """The parquet shards of a staged/built folder (`data/<lang>/test-*.parquet`), a folder
    of shards, or one shard; only the selected languages' folders. A parquet file there
    that the card's configs would not select stops the run (read it or not, the figures
    would differ from those of the Hub copy)."""
    root = Path(source)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise EvaluationError(f"{root}: no such dataset folder or parquet file")
    data = root / DATA_DIR if (root / DATA_DIR).is_dir() else root
    shards = []
    for shard in sorted(data.rglob("*.parquet")):
        if shard.name.startswith("."):
            continue  # a temporary file of an interrupted write
        if not shard.match(SHARD_GLOB):
            raise EvaluationError(
                f"{shard}: not a shard name ({DATA_DIR}/<lang>/{SHARD_GLOB}, as the card's "
                f"configs select); rename it or move it out of {data}"
            )
        lang = shard.parent.name
        if selection.langs is not None and lang in LANGUAGES and lang not in selection.langs:
            continue
        shards.append(shard)
    if not shards:
        raise EvaluationError(
            f"{root}: no parquet shards (expected {DATA_DIR}/<lang>/{SHARD_GLOB}, as in the "
            f"Hub repo)"
        )
    return shards


def count_rows(shards: Sequence[Path], selection: Selection) -> int:
    """Selected rows, reading only the filter columns."""
    total = 0
    for shard in shards:
        table = pq.read_table(shard, columns=list(FILTER_COLUMNS))
        columns = [table[name].to_pylist() for name in FILTER_COLUMNS]
        total += sum(selection.keeps(*values) for values in zip(*columns, strict=True))
    return total


def iter_shard_rows(shards: Sequence[Path], selection: Selection) -> Iterator[dict]:
    for shard in shards:
        try:
            handle = pq.ParquetFile(shard)
        except Exception as exc:  # pyarrow raises several types for a broken file
            raise EvaluationError(f"{shard}: not a readable parquet shard ({exc})") from None
        for batch in handle.iter_batches(batch_size=BATCH_ROWS):
            for row in batch.to_pylist():
                if selection.keeps(row["lang"], row["audio_type"], row["vulnerability_type"]):
                    yield row


def iter_hub_rows(
    repo_id: str, revision: str | None, selection: Selection
) -> tuple[Iterator[dict], int | None]:
    """Rows of a Hub dataset through `datasets` (streamed, audio left encoded)."""
    try:
        # optional: the evaluator does not require `datasets`; a downloaded copy is enough
        datasets = importlib.import_module("datasets")
    except ImportError:
        raise EvaluationError(
            f"reading {repo_id} from the Hub needs the `datasets` package (pip install "
            f"datasets), or download it first and pass the folder:\n"
            f"  hf download {repo_id} --repo-type dataset"
            f"{f' --revision {revision}' if revision else ''} --local-dir redvox\n"
            f"  ... --dataset redvox"
        ) from None
    langs = selection.langs or LANGUAGES

    def rows() -> Iterator[dict]:
        for lang in langs:
            split = datasets.load_dataset(
                repo_id, lang, revision=revision, split="test", streaming=True
            ).cast_column("audio", datasets.Audio(decode=False))
            for row in split:
                if selection.keeps(row["lang"], row["audio_type"], row["vulnerability_type"]):
                    yield row
            # released while Python runs: pyarrow's reader threads still holding buffers
            # at interpreter exit abort it on datasets 5 (datasets issue #7566)
            del split
            gc.collect()

    return rows(), None


def open_rows(
    source: str, revision: str | None, selection: Selection
) -> tuple[Iterator[dict], int | None]:
    """(row iterator, number of rows or None when unknown) for a --dataset value."""
    if is_hub_id(source):
        return iter_hub_rows(source, revision, selection)
    shards = shards_of(source, selection)
    return iter_shard_rows(shards, selection), count_rows(shards, selection)

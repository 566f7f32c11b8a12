"""The one definition of the on-disk release layout and of a file's sha256.

A built set, a staged folder and the Hub repo all hold one parquet shard per
language at `data/<lang>/test-00000-of-00001.parquet`. The builder writes that
name; the card's configs and the loading script select shards by `SHARD_GLOB`;
verify accepts any `test-NNNNN-of-NNNNN.parquet` under a known language folder.
(The standalone evaluator in release/evaluation/ reads the same layout on its
own: it must run without redvox installed.)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

DATA_DIR = "data"
SPLIT = "test"
SHARD_NAME = f"{SPLIT}-00000-of-00001.parquet"
# The shard file names a config selects (the Hub's `data_files` pattern).
SHARD_GLOB = f"{SPLIT}-*.parquet"
# A staged file that is a shard: data/<two-letter lang>/test-NNNNN-of-NNNNN.parquet.
SHARD_RE = re.compile(rf"^{DATA_DIR}/(?P<lang>[a-z]{{2}})/{SPLIT}-\d{{5}}-of-\d{{5}}\.parquet$")


def shard_path(folder: Path, lang: str) -> Path:
    """Where the builder writes the shard of `lang` in a set folder."""
    return Path(folder) / DATA_DIR / lang / SHARD_NAME


def shard_glob(lang: str = "*") -> str:
    """The repo-relative pattern of the shards of `lang` (all languages by default)."""
    return f"{DATA_DIR}/{lang}/{SHARD_GLOB}"


def shard_paths(folder: Path) -> list[Path]:
    """Every shard of a set, staged or Hub-shaped folder, sorted by path."""
    return sorted(Path(folder).glob(shard_glob()))


def is_shard_file(rel: str) -> bool:
    """Whether a repo-relative path is a parquet file under data/ (any name)."""
    return rel.startswith(f"{DATA_DIR}/") and rel.endswith(".parquet")


def sha256_file(path: Path, *, on_block: Callable[[bytes], object] | None = None) -> str:
    """Hex sha256 of a file's bytes, read in blocks; `on_block` is given each block as it is
    read (to advance a progress bar, or to feed a second digest in the same pass)."""
    with Path(path).open("rb") as handle:
        if on_block is None:
            return hashlib.file_digest(handle, "sha256").hexdigest()
        digest = hashlib.sha256()
        while block := handle.read(2**20):
            digest.update(block)
            on_block(block)
        return digest.hexdigest()


def keyed_hash(*parts: object) -> bytes:
    """sha256 of the parts joined by the unit separator: the one way a seed and the keys
    of a draw become its randomness (the item draw, every noise clip's generator)."""
    return hashlib.sha256("\x1f".join(str(part) for part in parts).encode()).digest()

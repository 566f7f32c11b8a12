"""Every way the card's loading section gives to load RedVox returns the same rows,
in the same order, with the same audio bytes:

- `datasets` 5.x (the pinned one) by parquet config: the reference;
- `datasets` 3.6.0, in its own virtual environment, by parquet config and by
  `loading_script/redvox.py` with `data_dir=` and `trust_remote_code=True`;
- without torchcodec (it cannot be imported): `Audio(decode=False)` + soundfile,
  and streaming with the same cast;
- `datasets` 2.21.0 (it has no `IterableDataset.decode`), in its own virtual
  environment: that torchcodec-free recipe, in memory and streaming.

Each path runs tests/loading_probe.py in a subprocess on the staged demo release.
The old environments are made once and kept under
~/.cache/redvox-test-envs/datasets-VERSION (REDVOX_TEST_ENVS moves them;
tests/old_datasets.py): each is reused while its `datasets` imports at that version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from redvox.release.hub.card import read_card

PROBE = Path(__file__).resolve().parent / "loading_probe.py"
OLD_DATASETS = "3.6.0"  # the conftest fixture old_datasets_python
DATASETS_2 = "2.21.0"  # the conftest fixture datasets_2_python
LANGS = ["en", "de", "es", "fr", "it"]
BLOCK_TORCHCODEC = 'import sys\nsys.modules["torchcodec"] = None  # `import torchcodec` fails\n'


def probe(python, staged: Path, way: str, env: dict | None = None) -> dict:
    done = subprocess.run(
        [str(python), str(PROBE), str(staged), way],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HF_DATASETS_OFFLINE": "1", **(env or {})},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference(demo_release) -> dict:
    """The pinned `datasets` (5.x), parquet configs."""
    result = probe(sys.executable, demo_release["staged"], "parquet")
    assert result["datasets"].startswith("5.")
    return result


@pytest.fixture(scope="module")
def without_torchcodec(tmp_path_factory) -> dict:
    """Environment variables under which `import torchcodec` fails."""
    site = tmp_path_factory.mktemp("no-torchcodec")
    (site / "sitecustomize.py").write_text(BLOCK_TORCHCODEC)
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_the_reference_orders_all_en_de_es_fr_it_and_has_unique_keys(reference):
    configs = reference["configs"]
    rows = configs["all"]
    assert rows == [row for lang in LANGS for row in configs[lang]]
    langs = [row["lang"] for row in rows]
    assert sorted(set(langs), key=langs.index) == LANGS
    assert langs == sorted(langs, key=LANGS.index)
    for lang in LANGS:
        assert [r["ID"] for r in configs[lang]] == sorted(r["ID"] for r in configs[lang])
    assert len({r["entry_key"] for r in rows}) == len(rows)
    assert len({(r["lang"], r["ID"]) for r in rows}) == len(rows)
    assert len({r["ID"] for r in rows}) < len(rows)  # why ID alone is not the key


def test_datasets_3_reads_the_parquet_configs_identically(
    demo_release, reference, old_datasets_python
):
    old = probe(old_datasets_python, demo_release["staged"], "parquet")
    assert old["datasets"] == OLD_DATASETS
    assert old["configs"] == reference["configs"]


def test_datasets_3_loading_script_gives_the_same_rows(
    demo_release, reference, old_datasets_python
):
    old = probe(old_datasets_python, demo_release["staged"], "script")
    assert old["datasets"] == OLD_DATASETS
    assert list(old["configs"]) == ["all", *LANGS]
    assert old["configs"] == reference["configs"]


def test_without_torchcodec_decode_false_and_soundfile(demo_release, reference, without_torchcodec):
    check = [sys.executable, "-c", "import torchcodec"]
    blocked = subprocess.run(check, env={**os.environ, **without_torchcodec}, capture_output=True)
    assert blocked.returncode != 0 and b"torchcodec" in blocked.stderr
    result = probe(sys.executable, demo_release["staged"], "parquet", without_torchcodec)
    assert result["configs"] == reference["configs"]


def test_without_torchcodec_streaming_decode_false(demo_release, reference, without_torchcodec):
    result = probe(sys.executable, demo_release["staged"], "stream", without_torchcodec)
    assert result["configs"] == reference["configs"]


@pytest.mark.parametrize("way", ["parquet", "stream"])
def test_datasets_2_21_runs_the_recipe_without_decoding(
    demo_release, reference, datasets_2_python, way
):
    result = probe(datasets_2_python, demo_release["staged"], way)
    assert result["datasets"] == DATASETS_2
    assert result["configs"] == reference["configs"]


def test_the_card_gives_each_path_and_the_unique_key(demo_release):
    _, body = read_card(demo_release["staged"])
    start = body.index("## How to load")
    loading = body[start : body.index("\n## ", start + 1)]
    loading = " ".join(loading.replace("(", "( ").split())  # as ruff formats the code blocks
    for needed in (
        'load_dataset("FBK-MT/RedVox", "en", split="test", revision="v1.0.0")',
        '"redvox/loading_script/redvox.py", "en", data_dir="redvox",',
        "trust_remote_code=True",
        'ds.cast_column("audio", Audio(decode=False))',
        'stream = stream.cast_column("audio", Audio(decode=False))',
        "sf.read(io.BytesIO(",
        "`entry_key`",
        "en, de, es, fr, it",
    ):
        assert " ".join(needed.replace("(", "( ").split()) in loading, needed
    assert "older `datasets` versions use the loading script" not in body
    assert ".decode(False)" not in body  # IterableDataset.decode: datasets >= 3 only
    assert "any `datasets` version" not in body

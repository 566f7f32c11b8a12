"""Concepts of the release are spelled once, in their home module, and imported elsewhere.

The standalone pieces (the evaluator in release/evaluation/ and the Hub loading
script in release/templates/) must run without redvox, so they keep their own copies.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STANDALONE = ("tests/", "release/evaluation/", "release/templates/")

# literal -> the one module allowed to spell it
HOMES = {
    "the shard file name": (re.compile(r"test-00000-of-00001"), "schemas/layout.py"),
    "the set names as a tuple": (
        re.compile(r"""["'](full|public)["']\s*,\s*["'](full|public)["']"""),
        "schemas/vocab.py",
    ),
    "the speech audio type compared as a literal": (
        re.compile(r"""==\s*["']speech["']|["']speech["']\s*=="""),
        "schemas/vocab.py",
    ),
    "the item key format": (
        re.compile(r"""f["']\{[\w.\[\]'"]*source[\w.\[\]'"]*\}:\{"""),
        "schemas/records.py",
    ),
    "the sha256 of a file": (re.compile(r"hashlib\.file_digest"), "schemas/layout.py"),
}


def source_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [p for p in listed if not p.startswith(STANDALONE) and (ROOT / p).is_file()]


@pytest.mark.parametrize("concept", sorted(HOMES))
def test_spelled_only_in_its_home_module(concept):
    pattern, home = HOMES[concept]
    found = [
        f"{path}:{n}: {line.strip()}"
        for path in source_files()
        if path != home
        for n, line in enumerate((ROOT / path).read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"{concept} is defined in {home}; import it instead of:\n" + "\n".join(found)


def test_the_homes_define_them():
    from redvox.schemas import layout, vocab
    from redvox.schemas.records import item_key

    assert layout.SHARD_NAME == "test-00000-of-00001.parquet"
    assert layout.shard_path(Path("x"), "en") == Path("x/data/en/test-00000-of-00001.parquet")
    assert vocab.SETS == ("full", "public")
    assert vocab.SPEECH_AUDIO_TYPE == "speech"
    assert item_key("shades", "7.1") == "shades:7.1"

"""Concepts of the release are spelled once, in their home module, and imported elsewhere.

The standalone pieces (the evaluator in release/evaluation/ and the Hub loading
script in release/hub/templates/) must run without redvox, so they keep their own copies.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STANDALONE = ("tests/", "release/evaluation/", "release/hub/templates/")

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


# A line that spells each concept again, as a careless edit would.
RESPELLED = {
    "the shard file name": 'name = "data/en/test-00000-of-00001.parquet"',
    "the set names as a tuple": 'for side in ("full", "public"):',
    "the speech audio type compared as a literal": 'if row["audio_type"] == "speech":',
    "the item key format": 'key = f"{row.source}:{row.item_id}"',
    "the sha256 of a file": "digest = hashlib.file_digest(handle, 'sha256')",
}


def test_a_concept_spelled_again_outside_its_home_is_found(tmp_path):
    """The check is live: each pattern finds its concept spelled again, and the scan reads
    a new file of the package (one the check misses would pass everything)."""
    assert sorted(RESPELLED) == sorted(HOMES)
    planted = ROOT / "builder" / f"_respelled_{tmp_path.name}.py"
    planted.write_text("\n".join(RESPELLED.values()) + "\n", encoding="utf-8")
    try:
        assert planted.relative_to(ROOT).as_posix() in source_files()
        for concept, (pattern, _) in HOMES.items():
            assert pattern.search(RESPELLED[concept]), concept
            with pytest.raises(AssertionError, match=f"{concept} is defined in"):
                test_spelled_only_in_its_home_module(concept)
    finally:
        planted.unlink()


def test_the_homes_define_them():
    from redvox.schemas import layout, vocab
    from redvox.schemas.records import item_key

    assert layout.SHARD_NAME == "test-00000-of-00001.parquet"
    assert layout.shard_path(Path("x"), "en") == Path("x/data/en/test-00000-of-00001.parquet")
    assert vocab.SETS == ("full", "public")
    assert vocab.SPEECH_AUDIO_TYPE == "speech"
    assert item_key("shades", "7.1") == "shades:7.1"

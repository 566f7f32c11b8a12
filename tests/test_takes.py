"""Takes of one recording (same language, item and participant) are resolved after
decode, VAD and ownership: the first take that passed is released, in manifest line
order; a corrupt first take no longer knocks out a valid retake."""

from __future__ import annotations

import io
import json
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import soundfile as sf

from redvox.builder.manifest import QuarantineRecord, public_reason
from redvox.builder.pipeline import BuildOptions, build_version
from redvox.builder.pseudonym import KEY_ENV, pseudonymize
from redvox.builder.recordings import SpeechOutcome
from redvox.builder.rows import AudioRef
from redvox.builder.takes import resolve_takes
from redvox.builder.versions import VERSIONS
from redvox.schemas import DEMO_CONFIG, InputConfig

DEMO = DEMO_CONFIG.parent
FIRST, RETAKE = 12, 17  # contributions.csv: demo-p02 it shades:6.0, twice
FIRST_FILE = "demo-p02/it_shades_6.0.flac"
RETAKE_FILE = "demo-p02/it_shades_6.0_take2.flac"
# One row per audio type for a key, however many takes it has.
CONDITIONS = Counter(["speech", *(c.name for c in VERSIONS["1.0.0"].config.conditions)])


# --- the step on its own ------------------------------------------------------------


def recording(line: int, audio_file: str, key=("it", "shades:6.0", "p02")):
    lang, item_key, participant = key
    contribution = SimpleNamespace(
        key=key, lang=lang, item_key=item_key, participant_key=participant, audio_file=audio_file
    )
    return SimpleNamespace(
        contribution=contribution,
        participant_key=participant,
        lang=lang,
        file="contributions.csv",
        line=line,
    )


def passed(name: str) -> SpeechOutcome:
    return SpeechOutcome(AudioRef(name, name, 2.0), None)


def failed(rec, stage: str, reason: str) -> SpeechOutcome:
    return SpeechOutcome(None, QuarantineRecord(stage=stage, reason=reason, row=rec.line))


def test_a_corrupt_first_take_gives_way_to_a_valid_retake():
    first, retake = recording(3, "a.flac"), recording(9, "b.flac")
    outcomes = [failed(first, "decode", "truncated or corrupt audio file"), passed("b")]
    takes = resolve_takes([first, retake], outcomes)
    assert takes.outcomes[0].quarantine.stage == "decode"  # its own reason kept
    assert takes.outcomes[1].audio is not None and takes.outcomes[1].quarantine is None
    assert takes.recordings == [retake] and takes.chosen == [takes.outcomes[1]]


def test_of_two_valid_takes_the_first_in_line_order_is_released():
    later, earlier = recording(9, "b.flac"), recording(3, "a.flac")  # sorted by key, not line
    takes = resolve_takes([later, earlier], [passed("b"), passed("a")])
    superseded = takes.outcomes[0].quarantine
    assert takes.outcomes[0].audio is None and superseded.stage == "takes"
    assert superseded.reason.startswith("superseded take of line 3") and superseded.row == 9
    assert public_reason(superseded) == "superseded take"
    assert takes.outcomes[1].audio is not None
    assert takes.recordings == [earlier]


def test_when_no_take_passed_each_keeps_its_reason_and_the_key_is_rendered_once():
    first, second = recording(3, "a.flac"), recording(9, "b.flac")
    outcomes = [failed(first, "decode", "clipped"), failed(second, "vad", "no speech")]
    takes = resolve_takes([first, second], outcomes)
    assert [o.quarantine.reason for o in takes.outcomes] == ["clipped", "no speech"]
    assert takes.recordings == [first] and takes.chosen[0].audio is None


def test_single_takes_and_other_keys_are_untouched():
    a = recording(2, "a.flac", ("en", "shades:1.0", "p01"))
    b = recording(3, "b.flac", ("en", "shades:2.0", "p01"))
    outcomes = [passed("a"), failed(b, "vad", "no speech")]
    takes = resolve_takes([a, b], outcomes)
    assert takes.outcomes == outcomes and takes.recordings == [a, b]


# --- in a build -----------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A copy of the demo corpus, audio included, so recordings can be broken."""
    folder = tmp_path / "corpus"
    shutil.copytree(DEMO, folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return folder


def build(corpus: Path, out: Path, cache: Path | None = None) -> Path:
    config = InputConfig.load(corpus / "config.yaml")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        options = BuildOptions(out=out, cache_dir=cache, progress=False, sets=("full",))
        build_version(VERSIONS["1.0.0"], config, options)
    return out / "1.0.0" / "full"


def rows_of(folder: Path) -> list[dict]:
    return [
        r for s in sorted(folder.glob("data/*/*.parquet")) for r in pq.read_table(s).to_pylist()
    ]


def quarantine_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "quarantine.jsonl").read_text().splitlines()]


def p02_it_6(rows: list[dict]) -> list[dict]:
    user = pseudonymize((DEMO / "pseudonym.key").read_text().strip().encode(), "demo-p02")
    return [
        r for r in rows if r["user_id"] == user and r["lang"] == "it" and r["original_id"] == "6.0"
    ]


def test_a_truncated_first_take_releases_the_retake_with_no_duplicate_rows(
    corpus, tmp_path, demo_cache
):
    first = corpus / "audio" / FIRST_FILE
    first.write_bytes(first.read_bytes()[:200])  # truncated upload
    folder = build(corpus, tmp_path / "out", demo_cache)
    quarantine = quarantine_of(folder)
    mine = [r for r in quarantine if r.get("participant_key") == "demo-p02" and r["lang"] == "it"]
    assert [(r["stage"], r["row"]) for r in mine] == [("decode", FIRST)]
    assert not any(r["stage"] == "takes" for r in quarantine)
    rows = p02_it_6(rows_of(folder))
    assert Counter(r["audio_type"] for r in rows) == CONDITIONS
    (speech,) = [r for r in rows if r["audio_type"] == "speech"]
    released, _ = sf.read(io.BytesIO(speech["audio"]["bytes"]))
    retake, _ = sf.read(corpus / "audio" / RETAKE_FILE)
    assert abs(len(released) - len(retake)) <= len(retake) * 0.05  # the retake, not silence


def test_two_valid_takes_release_the_first_and_keep_row_counts(corpus, tmp_path, demo_cache):
    folder = build(corpus, tmp_path / "out", demo_cache)
    rows = rows_of(folder)
    mine = p02_it_6(rows)
    assert Counter(r["audio_type"] for r in mine) == CONDITIONS
    (superseded,) = [r for r in quarantine_of(folder) if r["stage"] == "takes"]
    assert superseded["row"] == RETAKE and superseded["audio_file"] == RETAKE_FILE
    assert superseded["reason"].startswith(f"superseded take of line {FIRST}")
    # the retake's line gone, every other recording of the corpus still gives its rows
    (corpus / "contributions.csv").write_text(
        "".join(
            line
            for n, line in enumerate(
                (corpus / "contributions.csv").read_text().splitlines(keepends=True), 1
            )
            if n != RETAKE
        )
    )
    single = build(corpus, tmp_path / "single", demo_cache)
    assert len(rows_of(single)) == len(rows)
    assert not any(r["stage"] == "takes" for r in quarantine_of(single))

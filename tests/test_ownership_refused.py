"""A withheld recording that the build itself refuses, or never reads as a row, still
owns its voice: a copy of it filed under a public participant, or put in the noise
bank, reaches no public clip. Checked by decoding the public set (as
test_ownership_robust.py does), not by reading the quarantine.

The withheld recordings here are refused for their own defects (too little speech,
no speech, clipping), sit on a manifest line the table reader rejects, or have no row
at all; those that cannot be decoded stop the build, since no copy of them could be
found.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from audio_edits import RATE, flac
from click.testing import CliRunner
from test_ownership_robust import DEMO, PRESENT, _file, _slots, best_presence

from redvox.builder.cli import main
from redvox.builder.ownership import UnreadableVoiceError
from redvox.builder.pipeline import BuildOptions, build_version
from redvox.builder.versions import VERSIONS
from redvox.noise import params_from_json, render
from redvox.schemas import InputConfig
from redvox.sources.audio import decode_audio
from redvox.sources.musan import read_noise_bank

WITHHELD = "demo-p10"  # participation only
CONTRIBUTIONS_HEADER = 1  # the manifest's header line


def _pad(samples: np.ndarray) -> np.ndarray:
    return np.r_[samples, np.zeros(30 * RATE, np.float32)]


def _clipped(samples: np.ndarray) -> np.ndarray:
    return np.clip(samples * 4, -1.0, 1.0).astype(np.float32)


# name -> (withheld recording, what its own file becomes (None: left alone), what the
# line of its row becomes ("stray quote", "removed" or None), the copy filed under a
# public participant, made from the withheld file as it is then).
Edit = Callable[[np.ndarray], np.ndarray]
CASES: dict[str, tuple[str, Edit | None, str | None, Edit]] = {
    "own file padded with 30 s of silence (VAD: too little speech), copy unpadded": (
        "en_m-alert_90011",
        _pad,
        None,
        lambda w: w[: len(w) - 30 * RATE],
    ),
    "own file at -60 dB (VAD: no speech), copy at full level": (
        "en_m-alert_90012",
        lambda w: (w * 10 ** (-60 / 20)).astype(np.float32),
        None,
        lambda w: (w * 10 ** (60 / 20)).astype(np.float32),
    ),
    "own file clipped (decode: clipped), copy of it 6 dB down": (
        "en_m-alert_90021",
        _clipped,
        None,
        lambda w: (w * 0.5).astype(np.float32),
    ),
    "own row on a line with a stray quote, copy trimmed by 0.5 s": (
        "en_shades_6.0",
        None,
        "stray quote",
        lambda w: w[RATE // 2 :],
    ),
    "own row missing (the file left in the audio folder), exact copy": (
        "en_shades_7.0",
        None,
        "removed",
        lambda w: w,
    ),
}


def _lines(corpus: Path) -> list[str]:
    return (corpus / "contributions.csv").read_text(encoding="utf-8").splitlines(keepends=True)


def _edit_line(corpus: Path, audio_file: str, how: str) -> None:
    lines = _lines(corpus)
    (at,) = [n for n, line in enumerate(lines) if f",{audio_file}," in line]
    if how == "removed":
        del lines[at]
    else:  # a quote inside an unquoted cell: the table reader rejects the line
        lines[at] = lines[at].replace(f",{audio_file},", f',{audio_file},I"m ', 1)
    (corpus / "contributions.csv").write_text("".join(lines), encoding="utf-8")


def _public_clips(out: Path) -> list[np.ndarray]:
    clips, seen = [], set()
    for shard in sorted((out / "1.0.0" / "public").glob("data/*/*.parquet")):
        for cell in pq.read_table(shard, columns=["audio"]).column("audio").to_pylist():
            if cell["bytes"] not in seen:
                seen.add(cell["bytes"])
                clips.append(sf.read(io.BytesIO(cell["bytes"]), dtype="float32")[0])
    return clips


def _corpus(root: Path) -> Path:
    corpus = root / "demo"
    shutil.copytree(DEMO, corpus, ignore=shutil.ignore_patterns("__pycache__"))
    return corpus


@pytest.fixture(scope="module")
def refused_build(tmp_path_factory, copy_demo_cache) -> dict:
    root = tmp_path_factory.mktemp("refused")
    corpus = _corpus(root)
    slots = iter(_slots(corpus))
    originals = {}
    for name, (recording, own, line, copy) in CASES.items():
        path = corpus / "audio" / WITHHELD / f"{recording}.flac"
        voice = decode_audio(path).samples
        if own is not None:
            voice = own(voice)
            path.write_bytes(flac(voice))
        if line is not None:
            _edit_line(corpus, f"{WITHHELD}/{recording}.flac", line)
        # What of the withheld voice must not be public: as its own file holds it, at a
        # level the oracle can compare (the -45 dB file, brought back up).
        originals[name] = copy(voice)
        _file(corpus, next(slots), flac(copy(voice)), ".flac")
    out = root / "out"
    options = BuildOptions(
        out=out, sets=("full", "public"), cache_dir=copy_demo_cache(root / "cache"), progress=False
    )
    report = build_version(VERSIONS["1.0.0"], InputConfig.load(corpus / "config.yaml"), options)
    quarantine = (out / "1.0.0" / "public" / "quarantine.jsonl").read_text()
    return {"originals": originals, "clips": _public_clips(out), "report": report, "q": quarantine}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_or_unread_withheld_recording_is_in_no_public_clip(refused_build, case):
    found = best_presence(refused_build["originals"][case], refused_build["clips"], 1.0)
    assert found < PRESENT, f"{case}: the withheld voice is in a public clip ({found:.2f})"


def test_the_public_rows_that_held_them_are_quarantined_for_ownership(refused_build):
    assert refused_build["q"].count('"stage": "ownership"') == len(CASES)


def _build(corpus: Path, out: Path, cache: Path) -> object:
    args = ["build", "--version", "1.0.0", "--config", str(corpus / "config.yaml")]
    args += ["--out", str(out), "--cache", str(cache), "--workers", "1"]
    return CliRunner().invoke(main, args)


# How a withheld file can be made undecodable: (file name, bytes from its FLAC).
def _truncated(data: bytes, samples: np.ndarray) -> tuple[str, bytes]:
    return "flac", data[: len(data) // 2]


def _nine_channels(data: bytes, samples: np.ndarray) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    sf.write(buffer, np.repeat(samples[:, None], 9, axis=1), RATE, format="WAV")
    return "wav", buffer.getvalue()


def _too_long(data: bytes, samples: np.ndarray) -> tuple[str, bytes]:
    return "flac", flac(np.r_[samples, np.zeros(125 * RATE, np.float32)])


def _bad_rate(data: bytes, samples: np.ndarray) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    sf.write(buffer, samples, RATE, format="WAV", subtype="PCM_16")
    wav = bytearray(buffer.getvalue())
    wav[24:28] = (500_000).to_bytes(4, "little")  # the fmt chunk's sample rate
    return "wav", bytes(wav)


UNDECODABLE = {
    "truncated FLAC": ("en_m-alert_90011", _truncated),
    "9 channels": ("en_m-alert_90012", _nine_channels),
    "over max_duration_s": ("en_m-alert_90021", _too_long),
    "header rate 500 kHz": ("en_shades_6.0", _bad_rate),
}


def _break(corpus: Path, participant: str, recording: str, how) -> str:
    """Replace a recording's file with an undecodable one (renaming it in its row);
    returns the new audio_file."""
    path = corpus / "audio" / participant / f"{recording}.flac"
    suffix, data = how(path.read_bytes(), decode_audio(path).samples)
    new = f"{participant}/{recording}.{suffix}"
    path.unlink()
    (corpus / "audio" / new).write_bytes(data)
    manifest = corpus / "contributions.csv"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text.replace(f",{participant}/{recording}.flac,", f",{new},"), "utf-8")
    return new


def test_withheld_recordings_that_cannot_be_decoded_stop_the_build(tmp_path, demo_cache):
    corpus = _corpus(tmp_path)
    names = [_break(corpus, WITHHELD, rec, how) for rec, how in UNDECODABLE.values()]
    result = _build(corpus, tmp_path / "out", demo_cache)
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit | UnreadableVoiceError), result.exception
    assert f"{len(names)} recording(s) cannot be decoded" in result.output
    for name in names:
        assert name in result.output, (name, result.output)
    assert "Re-export each file" in result.output
    assert not list((tmp_path / "out").glob("*/*/data/*/*.parquet"))


def test_an_undecodable_file_no_row_names_stops_the_build(tmp_path, demo_cache):
    """An audio file in the audio folder that no readable row names has no established
    consent: when it cannot be decoded, nothing is built. Files that are not audio by
    name or content are not recordings and are left alone."""
    corpus = _corpus(tmp_path)
    (corpus / "audio" / "notes.txt").write_text("collected in March\n", encoding="utf-8")
    (corpus / "audio" / "loop-a.flac").symlink_to("loop-b.flac")  # a loop: no file at all
    (corpus / "audio" / "loop-b.flac").symlink_to("loop-a.flac")
    with (corpus / "contributions.csv").open("a", encoding="utf-8") as manifest:
        manifest.write("demo-p01,shades,3.0,en,loop-a.flac,x.,Do you agree?,x. Do you agree?,,\n")
    (corpus / "audio" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(64))
    stray = corpus / "audio" / WITHHELD / "en_take_2.wav"
    stray.write_bytes(_truncated(*_flac_of(corpus))[1])
    result = _build(corpus, tmp_path / "out", demo_cache)
    assert result.exit_code != 0
    assert str(stray.resolve()) in result.output and "named by no readable" in result.output
    stray.unlink()
    result = _build(corpus, tmp_path / "out", demo_cache)
    assert result.exit_code == 0, result.output
    quarantine = (tmp_path / "out" / "1.0.0" / "full" / "quarantine.jsonl").read_text()
    assert "loop-a.flac" in quarantine  # the row naming a loop is refused, on its line


def _flac_of(corpus: Path) -> tuple[bytes, np.ndarray]:
    path = corpus / "audio" / WITHHELD / "en_shades_7.0.flac"
    return path.read_bytes(), decode_audio(path).samples


def test_a_public_participants_undecodable_recording_does_not_stop_the_build(tmp_path, demo_cache):
    """Their voice may be published with their consent: the row is quarantined as
    before (the demo's own corrupt recording, demo-p03's, is that case too)."""
    corpus = _corpus(tmp_path)
    name = _break(corpus, "demo-p01", "en_m-alert_90011", _nine_channels)
    result = _build(corpus, tmp_path / "out", demo_cache)
    assert result.exit_code == 0, result.output
    quarantine = (tmp_path / "out" / "1.0.0" / "full" / "quarantine.jsonl").read_text()
    assert "9 channels" in quarantine and name in quarantine


def test_a_bank_copy_of_a_recording_on_a_rejected_line_stops_build_and_variants_add(
    tmp_path, demo_release, demo_cache
):
    corpus = _corpus(tmp_path)
    recording = f"{WITHHELD}/en_m-alert_90021.flac"
    _edit_line(corpus, recording, "stray quote")
    babble = corpus / "musan" / "speech" / "demo-babble"
    bank_file = babble / "speaker-09-en.wav"
    sf.write(bank_file, decode_audio(corpus / "audio" / recording).samples, RATE)
    with (babble / "ANNOTATIONS").open("a") as handle:
        handle.write("speaker-09-en male english\n")
    result = _build(corpus, tmp_path / "out", demo_cache)
    assert result.exit_code != 0
    assert str(bank_file) in result.output and "en_m-alert_90021" in result.output
    condition = tmp_path / "babble.yaml"
    condition.write_text(
        "name: noise_c\nkind: babble\nparams: {speakers: [9, 9], level_dbfs: [-30.0, -20.0]}\n"
    )
    source = demo_release["version_dir"] / "public"
    args = ["variants", "add", str(condition), "--from", str(source), "--out", str(tmp_path / "v")]
    args += ["--cache", str(demo_cache), "--config", str(corpus / "config.yaml")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0, result.output
    assert str(bank_file) in result.output and "en_m-alert_90021" in result.output


def test_a_bank_file_replaced_under_its_name_is_rendered_again(tmp_path, demo_cache):
    """The clips' cache holds what the bank held: after a bank file is replaced in place
    (a voice taken out of it), every published clip that names it is what the bank
    holds now, rendered again from the row's own parameters, not the old clip."""
    corpus = _corpus(tmp_path)
    replaced = sorted((corpus / "musan" / "speech" / "demo-babble").glob("*.wav"))[0]
    rel = replaced.relative_to(corpus / "musan").as_posix()
    assert _build(corpus, tmp_path / "out", demo_cache).exit_code == 0
    before = _clips_naming(tmp_path / "out", rel)
    noise = np.random.default_rng(0).normal(0, 0.05, len(decode_audio(replaced).samples))
    sf.write(replaced, noise.astype(np.float32), RATE, subtype="PCM_16")
    shutil.rmtree(tmp_path / "out" / "1.0.0")  # the bank is an input: a new build
    assert _build(corpus, tmp_path / "out", demo_cache).exit_code == 0
    after = _clips_naming(tmp_path / "out", rel)
    assert before and set(before) == set(after)
    bank = read_noise_bank(corpus / "musan")
    for params, clip in after.items():
        expected = render(params_from_json(params), bank)
        assert np.abs(clip - expected).max() < 2 / 32768, params  # the FLAC's 16 bits
        assert np.abs(clip - before[params]).max() > 0.01, "the old clip is still published"


def _clips_naming(out: Path, rel: str) -> dict[str, np.ndarray]:
    """The decoded clips of the text rows whose condition mixes in bank file `rel`, by
    their condition_params."""
    found = {}
    for shard in sorted((out / "1.0.0" / "public").glob("data/*/*.parquet")):
        for row in pq.read_table(
            shard, columns=["audio", "modality", "condition_params"]
        ).to_pylist():
            params = row["condition_params"] or ""
            if row["modality"] == "text" and f'"{rel}"' in params and params not in found:
                found[params] = sf.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")[0]
    return found

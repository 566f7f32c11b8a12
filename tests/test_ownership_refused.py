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
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
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


def _pad(samples: np.ndarray) -> np.ndarray:
    return np.r_[samples, np.zeros(30 * RATE, np.float32)]


def _clipped(samples: np.ndarray) -> np.ndarray:
    return np.clip(samples * 4, -1.0, 1.0).astype(np.float32)


def _float_wav(path: Path, samples: np.ndarray) -> Path:
    target = path.with_suffix(".wav")
    sf.write(target, samples, RATE, subtype="FLOAT")
    return target


def _ffmpeg(path: Path, name: str, *args: str) -> bytes:
    target = path.with_name(name)
    subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), *args, str(target)],
        check=True,
    )
    return target.read_bytes()


def _mpeg_ts(path: Path, samples: np.ndarray) -> Path:
    _ffmpeg(path, "take-2.ts", "-c:a", "mp2", "-f", "mpegts")
    return path.with_name("take-2.ts")


def _nist_bak(path: Path, samples: np.ndarray) -> Path:
    target = path.with_name("take-2.bak")
    sf.write(target, samples, RATE, format="NIST", subtype="PCM_16")
    return target


def _mp3_after_zeros(path: Path, samples: np.ndarray) -> Path:
    data = _ffmpeg(path, "tmp.mp3", "-c:a", "libmp3lame", "-b:a", "64k")
    path.with_name("tmp.mp3").unlink()
    target = path.with_name("take-2.mp3.old")
    target.write_bytes(bytes(16) + data)
    return target


@dataclass(frozen=True)
class Case:
    """A withheld recording (participant/file stem); what its own file becomes (`own`:
    the samples, `store`: another file in its place, the row renamed); what the line of
    its row becomes ("stray quote", "removed" or None); the copy filed under a public
    participant, made from the withheld samples as they are then."""

    recording: str
    copy: Callable[[np.ndarray], np.ndarray]
    own: Callable[[np.ndarray], np.ndarray] | None = None
    line: str | None = None
    store: Callable[[Path, np.ndarray], Path] | None = None


P06 = "demo-p06"  # participation only, too
CASES = {
    "own file padded with 30 s of silence (VAD: too little speech), copy unpadded": Case(
        f"{WITHHELD}/en_m-alert_90011", lambda w: w[: len(w) - 30 * RATE], own=_pad
    ),
    "own file at -60 dB (VAD: no speech), copy at full level": Case(
        f"{WITHHELD}/en_m-alert_90012",
        lambda w: (w * 10 ** (60 / 20)).astype(np.float32),
        own=lambda w: (w * 10 ** (-60 / 20)).astype(np.float32),
    ),
    "own file clipped (decode: clipped), copy of it 6 dB down": Case(
        f"{WITHHELD}/en_m-alert_90021", lambda w: (w * 0.5).astype(np.float32), own=_clipped
    ),
    "own row on a line with a stray quote, copy trimmed by 0.5 s": Case(
        f"{WITHHELD}/en_shades_6.0", lambda w: w[RATE // 2 :], line="stray quote"
    ),
    "own row missing (the file left in the audio folder), exact copy": Case(
        f"{WITHHELD}/en_shades_7.0", lambda w: w, line="removed"
    ),
    "own file a float WAV at -80 dB (digital silence in 16 bits), copy at full level": Case(
        f"{P06}/es_m-alert_90011",
        lambda w: (w * 10 ** (80 / 20)).astype(np.float32),
        own=lambda w: (w * 10 ** (-80 / 20)).astype(np.float32),
        store=_float_wav,
    ),
    "no row, the file as MPEG-TS (.ts), exact copy": Case(
        f"{P06}/es_m-alert_90051", lambda w: w, line="removed", store=_mpeg_ts
    ),
    "no row, the file as NIST SPHERE named .bak, exact copy": Case(
        f"{P06}/es_m-alert_90052", lambda w: w, line="removed", store=_nist_bak
    ),
    "no row, an MP3 after 16 zero bytes named .mp3.old, exact copy": Case(
        f"{P06}/es_shades_2.1", lambda w: w, line="removed", store=_mp3_after_zeros
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
    for name, case in CASES.items():
        audio_file = f"{case.recording}.flac"
        path = corpus / "audio" / audio_file
        voice = decode_audio(path).samples
        if case.own is not None:
            voice = case.own(voice)
            path.write_bytes(flac(voice))
        if case.line is not None:
            _edit_line(corpus, audio_file, case.line)
        if case.store is not None:
            stored = case.store(path, voice)
            path.unlink()
            renamed = stored.relative_to(corpus / "audio").as_posix()
            manifest = corpus / "contributions.csv"
            text = manifest.read_text(encoding="utf-8")
            manifest.write_text(text.replace(f",{audio_file},", f",{renamed},"), "utf-8")
        # What of the withheld voice must not be public: as its own file holds it, at a
        # level the oracle can compare (the quiet files, brought back up).
        originals[name] = case.copy(voice)
        _file(corpus, next(slots), flac(case.copy(voice)), ".flac")
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
    # macOS AppleDouble files beside recordings, named like them: metadata, not audio
    apple = corpus / "audio" / "demo-p01" / "._en_shades_1.0.flac"
    apple.write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00" + bytes(4000))
    # a file that is not audio by name or bytes, and does not decode: no recording
    junk = np.random.default_rng(1).integers(0, 255, 5000, dtype=np.uint8).tobytes()
    (corpus / "audio" / "demo-p01" / "index.db").write_bytes(b"SQLite format 3\x00" + junk)
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
    tmp_path, demo_cache
):
    corpus = _corpus(tmp_path)
    recording = f"{WITHHELD}/en_m-alert_90021.flac"
    _edit_line(corpus, recording, "stray quote")
    assert _build(corpus, tmp_path / "clean", demo_cache).exit_code == 0  # for variants add
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
    source = tmp_path / "clean" / "1.0.0" / "public"
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


def test_a_withheld_folder_linked_outside_audio_root_is_still_looked_at(tmp_path, demo_cache):
    """Rows whose file a link leads outside the audio folder are refused, and their files
    are still fingerprinted: a copy of such a recording is no public voice."""
    corpus = _corpus(tmp_path)
    outside = tmp_path / "elsewhere" / P06
    shutil.move(corpus / "audio" / P06, outside)
    (corpus / "audio" / P06).symlink_to(outside, target_is_directory=True)
    original = decode_audio(outside / "es_shades_3.0.flac").samples
    _file(corpus, _slots(corpus)[0], flac(original[RATE // 4 :]), ".flac")
    result = _build(corpus, tmp_path / "out", demo_cache)
    assert result.exit_code == 0, result.output
    found = best_presence(original[RATE // 4 :], _public_clips(tmp_path / "out"), 1.0)
    assert found < PRESENT, f"the voice behind the link is in a public clip ({found:.2f})"


def test_variants_add_refuses_to_check_the_bank_against_other_voices(
    tmp_path, demo_cache, monkeypatch
):
    """Without --config the bank is checked against the demo corpus: a build of other
    contributions is refused, not checked against the wrong voices."""
    corpus = _corpus(tmp_path)
    _edit_line(corpus, f"{WITHHELD}/en_shades_7.0.flac", "removed")
    assert _build(corpus, tmp_path / "out", demo_cache).exit_code == 0
    condition = tmp_path / "babble.yaml"
    condition.write_text(
        "name: noise_c\nkind: babble\nparams: {speakers: [3, 5], level_dbfs: [-30.0, -20.0]}\n"
    )
    args = ["variants", "add", str(condition), "--from", str(tmp_path / "out" / "1.0.0" / "public")]
    args += ["--out", str(tmp_path / "v"), "--cache", str(demo_cache)]
    result = CliRunner().invoke(main, [*args, "--noise-bank", str(corpus / "musan")])
    assert result.exit_code != 0
    assert "built from other contributions" in result.output and "--config" in result.output
    assert not (tmp_path / "v").exists() or not list((tmp_path / "v").rglob("*.parquet"))
    result = CliRunner().invoke(main, [*args, "--config", str(corpus / "config.yaml")])
    assert result.exit_code == 0, result.output

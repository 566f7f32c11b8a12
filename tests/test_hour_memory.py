"""A build worker's whole path for one recording (decode, released FLAC, fingerprint,
VAD) stays in bounded memory on a 1-hour 48 kHz stereo file, and its scratch file for
the released FLAC changes no byte of the result."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from redvox.builder import recordings
from redvox.builder.cache import BuildCache
from redvox.builder.fingerprint import HOP, SUB, Fingerprint
from redvox.builder.versions import get_version
from redvox.schemas import SAMPLE_RATE
from redvox.schemas.config import AudioLimits
from redvox.sources.audio import AudioDecodeError, audio_problems, decode_audio, encode_flac

DEMO_AUDIO = Path(__file__).resolve().parents[1] / "sources" / "demo" / "audio"
HOUR_S, RATE = 3600, 48_000
LIMITS = AudioLimits(max_duration_s=HOUR_S + 10, max_file_mb=2000)


def demo_speech(count: int) -> list[tuple[Path, np.ndarray]]:
    """The first `count` usable demo recordings (16 kHz mono) and their paths."""
    found = []
    for path in sorted(DEMO_AUDIO.glob("*/*.*")):
        try:
            decoded = decode_audio(path)
        except AudioDecodeError:
            continue  # the demo's deliberately broken files
        if not audio_problems(decoded):  # nor its clipped or silent ones
            found.append((path, decoded.samples))
        if len(found) == count:
            break
    return found


def write_hour(path: Path) -> float:
    """One hour of 48 kHz stereo FLAC: demo speech with half-second pauses, the right
    channel 4 dB under the left, over low noise, repeated. Returns the share of it
    the pauses leave to speech."""
    pause = np.zeros(SAMPLE_RATE // 2, np.float32)
    clips = [samples for _, samples in demo_speech(24)]
    speech = np.concatenate([part for clip in clips for part in (clip, pause)])
    up = soxr.resample(speech, SAMPLE_RATE, RATE, quality="HQ")
    noise = np.random.default_rng(0).normal(0, 0.002, (len(up), 2)).astype(np.float32)
    block = np.stack([up, 0.63 * up], axis=1) + noise
    with sf.SoundFile(path, "w", RATE, 2, format="FLAC", subtype="PCM_16") as out:
        left = HOUR_S * RATE
        while left:
            out.write(block[: min(left, len(block))])
            left -= min(left, len(block))
    return sum(len(c) for c in clips) / len(speech)


# What one build worker does with one recording, VAD model loaded first (as it stays
# loaded in a worker from its first batch on). VmHWM, not ru_maxrss: the latter keeps
# the forking test process's peak across exec.
WORKER = textwrap.dedent("""\
    import json, sys
    from redvox.builder.recordings import _Batch, _judge_batch, _vad_model
    from redvox.builder.versions import get_version
    from redvox.schemas.config import AudioLimits

    def peak_mb():
        return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024

    params = get_version("1.0.0").config.vad
    _vad_model(params)
    loaded_mb = peak_mb()
    limits = AudioLimits(max_duration_s=float(sys.argv[3]), max_file_mb=2000)
    batch = _Batch((sys.argv[1],), (None,), (False,), sys.argv[2], params, limits)
    [(fact, flac, verdict)] = _judge_batch(batch)
    report = {"loaded_mb": loaded_mb, "peak_mb": peak_mb(), "torch": "torch" in sys.modules}
    open(sys.argv[4], "wb").write(flac)
    report.update(fact=fact.to_dict(), verdict=verdict.to_dict())
    print(json.dumps(report))
""")


def test_a_one_hour_recording_goes_through_a_worker_under_500_mb(tmp_path):
    """A legal 1-hour 48 kHz stereo FLAC with the limits raised: decode to 16 kHz, the
    released FLAC, the fingerprint and the VAD, in a fresh process with the VAD model
    loaded, peak under 500 MB RSS (602 MB before: torch, loaded by silero's package,
    and the FLAC bytes beside the samples)."""
    hour = tmp_path / "hour.flac"
    speech_share = write_hour(hour)
    released = tmp_path / "released.flac"
    args = [hour, tmp_path / "cache", LIMITS.max_duration_s, released]
    done = subprocess.run(
        [sys.executable, "-P", "-c", WORKER, *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(report["loaded_mb"], report["peak_mb"])
    assert report["peak_mb"] < 500, report
    assert not report["torch"], "the worker imported torch (about 195 MB)"
    fact, verdict = report["fact"], report["verdict"]
    assert fact["problems"] == [] and fact["duration_s"] == HOUR_S, fact
    # The released audio is the whole hour, 16 kHz mono.
    info = sf.info(released)
    assert (info.samplerate, info.channels, info.frames) == (SAMPLE_RATE, 1, HOUR_S * SAMPLE_RATE)
    with sf.SoundFile(released) as audio:
        audio.seek(HOUR_S * SAMPLE_RATE - 10 * SAMPLE_RATE)
        assert np.abs(audio.read(dtype="float32")).max() > 0.05, "speech to the last minute"
    # Peaks and speech along the whole hour, not only its start.
    fp = Fingerprint.from_text(fact["fingerprint"])
    assert fp.times.max() / SUB * HOP / SAMPLE_RATE > HOUR_S - 60
    assert verdict["valid"] and verdict["segments"][-1][1] > HOUR_S - 60, verdict["segments"][-1]
    assert 0.5 * speech_share < verdict["speech_s"] / HOUR_S <= speech_share, verdict["speech_s"]


@pytest.mark.parametrize(("spill_bytes", "held_s"), [(1, 1800), (1000, 1), (1 << 40, 5)])
def test_scratch_files_and_held_audio_change_no_byte_of_the_result(
    tmp_path, monkeypatch, spill_bytes, held_s
):
    """Recordings whose released FLAC spills to disk (from its first write, or after 1000
    bytes: in the middle of libsndfile's writes), judged by the VAD one by one or a few
    seconds at a time, give the facts, FLAC bytes and verdicts of one batch kept in
    memory; the FLAC bytes are those of `encode_flac`; recordings decoded earlier (from
    the cache) are judged alike in the same batch."""
    paths = tuple(str(p) for p, _ in demo_speech(8))
    params = get_version("1.0.0").config.vad
    cache = BuildCache(tmp_path)

    def judged(decoded: tuple) -> list:
        batch = recordings._Batch(
            paths, decoded, (False,) * len(paths), str(tmp_path), params, AudioLimits()
        )
        return recordings._judge_batch(batch)

    monkeypatch.setattr(recordings, "_SPILL_BYTES", 1 << 40)
    monkeypatch.setattr(recordings, "_HELD_SAMPLES", 1 << 40)
    in_memory = judged((None,) * len(paths))
    monkeypatch.setattr(recordings, "_SPILL_BYTES", spill_bytes)
    monkeypatch.setattr(recordings, "_HELD_SAMPLES", held_s * SAMPLE_RATE)
    assert judged((None,) * len(paths)) == in_memory
    for path, (fact, flac, verdict) in zip(paths, in_memory, strict=True):
        assert flac == encode_flac(decode_audio(path).samples)
        assert fact.usable and verdict is not None, (path, fact, verdict)
    assert sum(verdict.valid for _, _, verdict in in_memory) >= 6
    # Every other recording decoded before: read back from the cache, same verdicts.
    cached = tuple(
        replace(fact, blob=cache.put_blob(flac)) if n % 2 else None
        for n, (fact, flac, _) in enumerate(in_memory)
    )
    again = judged(cached)
    assert [v for _, _, v in again] == [v for _, _, v in in_memory]
    assert [f is None for _, f, _ in again] == [n % 2 == 1 for n in range(len(paths))]

"""Resource-bounds benchmark (`make bench`): a demo build with two hostile recordings
added against the plain demo build, measured in the same run.

- a 1-hour 48 kHz stereo WAV (691 MB), filed as a contribution of a public
  participant: refused from its header (over `audio_limits`), never decoded;
- a 16 KB WAV whose header claims 1 Hz (decoded naively: 128 M samples, 1.4 GB):
  refused from its header;
- the same 1-hour file with the limits raised, through one build worker's whole path
  (decode in blocks, released FLAC, fingerprint, VAD) in a fresh process that has
  loaded the VAD model: under 500 MB peak (the 16 kHz mono samples, 230 MB, are held
  once; the released FLAC waits in a scratch file; no torch).

Each build runs in its own process; peak RSS is the largest of the build process
and its decoding workers. Prints a table, then one JSON line.

    .venv/bin/python bench/bench_limits.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from tabulate import tabulate

from redvox.schemas import DEMO_CONFIG

HOUR_S = 3600
RATE = 48_000


def long_wav(path: Path) -> None:
    """One hour of quiet 48 kHz stereo noise, written in one-minute blocks."""
    rng = np.random.default_rng(0)
    with sf.SoundFile(path, "w", RATE, 2, subtype="PCM_16") as handle:
        for _ in range(HOUR_S // 60):
            handle.write((0.01 * rng.standard_normal((60 * RATE, 2))).astype(np.float32))


def one_hertz_wav(path: Path) -> None:
    """A valid 16 KB WAV with its sample-rate field patched to 1 Hz."""
    sf.write(path, np.zeros(8000, np.int16), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    data[24:28] = (1).to_bytes(4, "little")  # fmt chunk: sample rate
    data[28:32] = (2).to_bytes(4, "little")  # byte rate = rate x block align
    path.write_bytes(bytes(data))


def hostile_corpus(root: Path, long_file: Path) -> Path:
    corpus = root / "demo"
    shutil.copytree(DEMO_CONFIG.parent, corpus, ignore=shutil.ignore_patterns("__pycache__"))
    audio = corpus / "audio" / "demo-p01"
    shutil.copy(long_file, audio / "en_m-alert_90022.wav")
    one_hertz_wav(audio / "en_m-alert_90031.wav")
    with (corpus / "contributions.csv").open("a", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        for item, name in (("90022", "en_m-alert_90022.wav"), ("90031", "en_m-alert_90031.wav")):
            writer.writerow(
                [
                    "demo-p01",
                    "m-alert",
                    item,
                    "en",
                    f"demo-p01/{name}",
                    "x?",
                    "Help?",
                    "x? Help?",
                    "",
                    "",
                ]
            )
    return corpus


def timed_build(config: Path, out: Path) -> dict:
    """`redvox build` in its own process tree: seconds and the largest peak RSS (MB) of
    the build process and its workers, measured by a wrapper that waits for them."""
    redvox = Path(sys.executable).with_name("redvox")
    command = [
        str(redvox),
        "build",
        "--version",
        "1.0.0",
        "--config",
        str(config),
        "--out",
        str(out),
    ]
    wrapper = (
        "import json, resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps({'rc': done.returncode, 'peak': peak, 'log': done.stdout + done.stderr}))"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-P", "-c", wrapper, *command], capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    result = json.loads(done.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"build failed:\n{result['log']}")
    quarantine = (out / "1.0.0" / "full" / "quarantine.jsonl").read_text(encoding="utf-8")
    return {"seconds": seconds, "peak_rss_mb": result["peak"], "quarantine": quarantine}


def worker_in_child(path: Path, max_duration_s: float) -> dict:
    """What one build worker does with `path` (decode, released FLAC, fingerprint, VAD),
    in a fresh process that loads the VAD model first: seconds, the peak RSS (MB) with
    the model loaded and at the end, outcome."""
    code = f"""
import json, time
from redvox.builder.recordings import _Batch, _judge_batch, _vad_model
from redvox.builder.versions import get_version
from redvox.schemas.config import AudioLimits
def peak_mb():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
params = get_version("1.0.0").config.vad
_vad_model(params)
loaded_mb = peak_mb()
limits = AudioLimits(max_duration_s={max_duration_s}, max_file_mb=2048)
start = time.perf_counter()
[(fact, flac, verdict)] = _judge_batch(_Batch(({str(path)!r},), (None,), (False,),
                                              {str(path.parent / "cache")!r}, params, limits))
if fact.error is not None:
    outcome = "refused: " + fact.error[:70]
else:
    outcome = f"{{fact.duration_s:.0f}} s, {{len(flac) / 1e6:.0f}} MB FLAC, VAD: "
    outcome += "speech" if verdict.valid else verdict.reason
print(json.dumps({{"seconds": time.perf_counter() - start, "outcome": outcome,
                  "loaded_mb": loaded_mb, "peak_rss_mb": peak_mb()}}))
"""
    done = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="redvox-bench-limits-"))
    root.mkdir(parents=True, exist_ok=True)
    long_file = root / "one-hour-48k-stereo.wav"
    long_wav(long_file)
    one_hertz = root / "one-hertz.wav"
    one_hertz_wav(one_hertz)

    baseline = timed_build(DEMO_CONFIG, root / "out-baseline")
    hostile = timed_build(hostile_corpus(root, long_file) / "config.yaml", root / "out-hostile")
    refused = {
        name: '"stage": "decode"' in hostile["quarantine"] and text in hostile["quarantine"]
        for name, text in (("1-hour", "larger than"), ("1 Hz", "sample rate of 1 Hz"))
    }
    rejected_1hz = worker_in_child(one_hertz, 120)
    decoded_hour = worker_in_child(long_file, HOUR_S + 1)
    rows = [
        ["demo build (baseline)", f"{baseline['seconds']:.1f}", f"{baseline['peak_rss_mb']:.0f}", ""],
        [
            "demo build + 1-hour 48 kHz stereo + 1 Hz header",
            f"{hostile['seconds']:.1f}",
            f"{hostile['peak_rss_mb']:.0f}",
            "both quarantined" if all(refused.values()) else f"NOT refused: {refused}",
        ],
        ["worker on the 1 Hz header file", f"{rejected_1hz['seconds']:.4f}",
         f"{rejected_1hz['peak_rss_mb']:.0f}", rejected_1hz["outcome"]],
        ["worker on the 1-hour file, limits raised", f"{decoded_hour['seconds']:.1f}",
         f"{decoded_hour['peak_rss_mb']:.0f}", decoded_hour["outcome"]],
        ["(the worker with the VAD model loaded, before any file)", "",
         f"{decoded_hour['loaded_mb']:.0f}", ""],
    ]  # fmt: skip
    print(tabulate(rows, headers=["case", "seconds", "peak RSS (MB)", "outcome"]))
    figures = {
        "baseline_build_s": round(baseline["seconds"], 2),
        "baseline_peak_rss_mb": round(baseline["peak_rss_mb"]),
        "hostile_build_s": round(hostile["seconds"], 2),
        "hostile_peak_rss_mb": round(hostile["peak_rss_mb"]),
        "hostile_refused": refused,
        "one_hertz_reject_s": round(rejected_1hz["seconds"], 4),
        "hour_worker_s": round(decoded_hour["seconds"], 2),
        "hour_worker_peak_rss_mb": round(decoded_hour["peak_rss_mb"]),
        "worker_loaded_rss_mb": round(decoded_hour["loaded_mb"]),
    }
    print(json.dumps(figures))
    if args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

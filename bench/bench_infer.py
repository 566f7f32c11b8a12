"""Inference-harness throughput: `evaluate infer` against a stand-in model that answers at once.

Two datasets: the staged demo release (built here) and a paper-scale synthetic release
(~3,100 public rows in data/<lang>/*.parquet: speech rows with their own 4 s FLAC
recording, text rows sharing a condition clip). Each is run in a fresh child process
(16 concurrent requests) with the default request, base64 WAV input_audio parts converted
from the stored FLAC, and the synthetic one also with vLLM's audio_url carrying the FLAC
as stored; each run reports rows/s and its peak RSS. Targets: >= 100 rows/s and <= 400 MB.

    .venv/bin/python bench/bench_infer.py [--rows-per-lang 620] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from redvox.schemas.layout import shard_path

ROOT = Path(__file__).resolve().parent.parent
MIN_ROWS_PER_S = 100.0
MAX_RSS_MB = 400.0
LANGS = ("en", "de", "es", "fr", "it")
CONDITIONS = ("silence", "noise_a", "noise_b")


def synth_release(folder: Path, rows_per_lang: int, seed: int = 0) -> int:
    """One shard per language (schemas/layout.py shard_path) with the release schema's columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import soundfile

    rng = np.random.default_rng(seed)

    def flac(seconds: float) -> bytes:
        n = int(16000 * seconds)
        tone = np.sin(np.arange(n) * rng.uniform(0.01, 0.1)) * 3000
        samples = (tone + rng.normal(0, 800, n)).astype(np.int16)
        buffer = io.BytesIO()
        soundfile.write(buffer, samples, 16000, format="FLAC")
        return buffer.getvalue()

    total = 0
    for lang in LANGS:
        clips = {c: flac(4.0) for c in CONDITIONS}
        path = shard_path(folder, lang)
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = None
        batch = []
        for i in range(rows_per_lang):
            speech = i % 4 == 0
            audio_type = "speech" if speech else CONDITIONS[i % 3]
            user = f"{i // 4:032x}"
            batch.append(
                {
                    "ID": i,
                    "audio": {
                        "bytes": flac(4.0) if speech else clips[audio_type],
                        "path": f"{lang}_{i}.flac",
                    },
                    "original_id": str(10000 + i // 4),
                    "user_id": user,
                    "lang": lang,
                    "vulnerability_type": "stereotype" if i % 2 else "unsafe_request_crime",
                    "attack_type": "non_adversarial",
                    "audio_type": audio_type,
                    "modality": "speech" if speech else "text",
                    "user_text": "Can you help me?" if speech else f"Item {i}. Can you help me?",
                    "transcript": f"item {i}" if speech else None,
                    "gender": "female",
                    "mother_tongue": lang,
                    "ethnicity": None,
                    "age_group": "25-34",
                    "entry_key": f"{lang}/synth:{i}/{user}/{audio_type}",
                    "prompt_text": f"Item {i}.",
                }
            )
            if len(batch) == 32 or i == rows_per_lang - 1:
                table = pa.Table.from_pylist(batch)
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
                total += len(batch)
                batch = []
        writer.close()
    return total


def demo_release(folder: Path) -> Path:
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "redvox"), "release", "run", "--version", "1.0.0",
         "--out", str(folder)],
        check=True, capture_output=True, env={**os.environ, "HF_TOKEN": ""},
    )  # fmt: skip
    return folder / "1.0.0" / "staged"


def measure(dataset: Path, endpoint: str, out: Path, concurrency: int, request: str) -> dict:
    """In this (child) process: infer over DATASET, REQUEST `part/format`; rows/s, peak RSS."""
    sys.path.insert(0, str(ROOT))
    from redvox.release.evaluation.redvox_eval.dataset import Selection, open_rows
    from redvox.release.evaluation.redvox_eval.infer import (
        AudioEncoder,
        ModelClient,
        ReplicaPool,
        RequestStyle,
        run_inference,
    )

    part, audio_format = request.split("/")
    rows, total = open_rows(str(dataset), None, Selection())
    client = ModelClient(ReplicaPool([endpoint]), concurrency=concurrency, backoff_s=0)
    started = time.perf_counter()
    summary = run_inference(
        rows,
        total=total,
        out=out,
        name="bench",
        style=RequestStyle(model="bench", audio_part=part),
        client=client,
        encoder=AudioEncoder(audio_format),
        resume=False,
        concurrency=concurrency,
        progress=False,
    )
    wall = time.perf_counter() - started
    client.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "rows": summary.answered + summary.errors,
        "errors": summary.errors,
        "wall_s": round(wall, 2),
        "rows_per_s": round((summary.answered + summary.errors) / wall, 1),
        "peak_rss_mb": round(rss_mb, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-lang", type=int, default=620)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--measure", nargs=4, metavar=("DATASET", "ENDPOINT", "OUT", "REQUEST"))
    args = parser.parse_args()
    if args.measure:
        dataset, endpoint, out, request = args.measure
        print(json.dumps(measure(Path(dataset), endpoint, Path(out), args.concurrency, request)))
        return 0

    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "model_server.py"), "--no-decode"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        endpoint = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            synth = tmp / "synth"
            n = synth_release(synth, args.rows_per_lang)
            demo = demo_release(tmp / "demo")
            runs = {
                "demo, input_audio/wav": (demo, "input_audio/wav"),
                f"synth {n}, input_audio/wav": (synth, "input_audio/wav"),
                f"synth {n}, audio_url/flac": (synth, "audio_url/flac"),
            }
            results = {}
            for label, (dataset, request) in runs.items():
                child = subprocess.run(
                    [sys.executable, __file__, "--concurrency", str(args.concurrency),
                     "--measure", str(dataset), endpoint, str(tmp / f"out-{len(results)}"),
                     request],
                    check=True, capture_output=True, text=True,
                )  # fmt: skip
                results[label] = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait()
    print(f"{'dataset, request':<32} {'rows':>6} {'rows/s':>8} {'peak RSS MB':>12}")
    for label, r in results.items():
        print(f"{label:<32} {r['rows']:>6} {r['rows_per_s']:>8} {r['peak_rss_mb']:>12}")
    big = [r for label, r in results.items() if label.startswith("synth")]
    ok = all(r["rows_per_s"] >= MIN_ROWS_PER_S for r in big) and all(
        r["peak_rss_mb"] <= MAX_RSS_MB and not r["errors"] for r in results.values()
    )
    print(json.dumps({"bench": "infer", "concurrency": args.concurrency, **results, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

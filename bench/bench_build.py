"""Build benchmark (`make bench`): the builder at the paper's full scale against a
naive baseline doing the same work the simple way.

Measured in one run, each step in its own process (so its peak RSS is its own):
- cold: 1.0.0, both sets, empty cache;
- warm: the same build again (everything cached, shards unchanged);
- add_condition: 1.1.0 after 1.0.0 (renders only speech_noise_a);
- cold at a smaller scale, to show memory does not grow with the corpus;
- stage and verify: the public set of the cold build staged as its Hub repo
  (representativeness gate overridden: the synthetic corpus is not balanced), then
  `verify_staged` on it, each in its own process, beside the cold build it checks;
- the ownership check's price: cold builds with the same workers, with the check and
  with its fingerprints and lookup taken out, alternated, best of 2;
- the check's parts: in one process, 16 recordings at a time, the CPU time of what
  a worker does for them (decode and released FLAC; the VAD) and of their
  fingerprints (plain; played faster), then the lookup of all of them (whole; plain
  peaks only), so that the machine's changing speed falls on every part alike;
- baseline: per-file `silero_vad.get_speech_timestamps` with the default model
  on all CPUs (torch threads), every row's audio rendered and encoded on its own,
  no cache, shards written with `datasets`.
Prints a table (with each side's processes x threads) and, last, one JSON line
with the figures.

    .venv/bin/python bench/bench_build.py [--scale 1.0] [--workers 2] [--workdir DIR]
    .venv/bin/python bench/bench_build.py --verify-only   # cold build, stage, verify
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

HERE = Path(__file__).resolve().parent


def peak_rss_mb(workers: int) -> dict[str, float]:
    """Peak RSS of this process and of its largest child (pool workers), in MB.
    `total` bounds what was resident at once: the parent plus every worker at its peak."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"own": own, "worker": child, "total": own + (child * workers if workers > 1 else 0)}


def _timed_ownership_step() -> dict:
    """The parent's ownership step (fingerprints of the rows no set admits and of the
    noise bank, then the lookup over the collection), timed: filled in as the build
    runs. Its peak is the process's peak RSS when the step ends."""
    from redvox.builder import pipeline

    found: dict = {}
    step = pipeline.exclude_shared_audio

    def timed(*args, **kwargs):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        start = time.perf_counter()
        try:
            return step(*args, **kwargs)
        finally:
            found["seconds"] = round(time.perf_counter() - start, 2)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            found.update(rss_before_mb=round(before), peak_rss_mb=round(peak))

    pipeline.exclude_shared_audio = timed
    return found


UNCHECKED = "REDVOX_BENCH_UNCHECKED"  # set in the unchecked build's process, seen by its workers


def _without_the_check() -> None:
    """The build with the ownership check taken out, for its price only: every
    recording's fingerprint is that of no samples and the lookup admits every outcome.
    The build's workers are spawned interpreters, which run this file again as
    `__mp_main__` (multiprocessing's spawn start method): they take the fingerprints
    out at the bottom of the file when UNCHECKED is set."""
    _no_fingerprints()
    from redvox.builder import pipeline

    os.environ[UNCHECKED] = "1"
    pipeline.exclude_shared_audio = lambda admitted, outcomes, *args, **kwargs: list(outcomes)


def _no_fingerprints() -> None:
    import numpy as np

    from redvox.builder import recordings

    real = recordings.fingerprint
    recordings.fingerprint = lambda samples: real(np.zeros(0, np.float32))


def run_build(config: Path, out: Path, version: str, workers: int) -> dict:
    from redvox.builder.pipeline import BuildOptions, build_version
    from redvox.builder.vad import BatchedSileroVad
    from redvox.builder.versions import get_version
    from redvox.schemas import InputConfig

    ownership = _timed_ownership_step()
    start, before = time.perf_counter(), os.times()
    report = build_version(
        get_version(version),
        InputConfig.load(config),
        BuildOptions(out=out, workers=workers, progress=False),
    )
    seconds, after = time.perf_counter() - start, os.times()
    return {
        "seconds": seconds,
        # This process's and its workers' (waited for when the pool closes).
        "cpu_s": round(sum(after[:4]) - sum(before[:4]), 2),
        "ownership": ownership,
        "rows": sum(report.sets["full"].rows.values()),
        "public_rows": sum(report.sets["public"].rows.values()),
        "computed": dict(report.computed),
        "rss_mb": peak_rss_mb(workers),
        # The workers build their VAD session with the default thread count.
        "threads": {
            "processes": workers,
            "per_process": inspect.signature(BatchedSileroVad).parameters["num_threads"].default,
            "what": "onnxruntime intra-op",
        },
    }


def run_check_parts(config: Path) -> dict:
    """CPU seconds of the ownership check's parts and of the workers' other work on the
    same recordings, interleaved 16 recordings at a time (see the module docstring)."""
    import numpy as np

    from redvox.builder import fingerprint as fp
    from redvox.builder import ownership, recordings
    from redvox.builder.versions import get_version
    from redvox.schemas import InputConfig

    inputs = InputConfig.load(config)
    with open(inputs.contributions, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    vad = recordings._vad_model(get_version("1.0.0").config.vad)
    _no_fingerprints()  # the worker's own fingerprint is taken out, and timed apart below
    cpu = {"decode": 0.0, "vad": 0.0, "fingerprint_plain": 0.0, "fingerprint_faster": 0.0}
    prints = []

    def timed(part: str, work):
        start = time.process_time()
        result = work()
        cpu[part] += time.process_time() - start
        return result

    def decode(row: dict):  # what a worker does before the VAD, fingerprint taken out
        _, released, samples = recordings._normalise_file(
            str(inputs.audio_root / row["audio_file"])
        )
        recordings._released_bytes(released)
        return samples

    for first in range(0, len(rows), 16):
        batch = rows[first : first + 16]
        samples = timed("decode", lambda batch=batch: [decode(r) for r in batch])
        timed(
            "vad",
            lambda samples=samples: vad.speech_timestamps([s for s in samples if s is not None]),
        )
        for audio in samples:
            audio = np.zeros(0, np.float32) if audio is None else audio
            plain = timed(
                "fingerprint_plain",
                lambda audio=audio: fp._peaks(audio, 1.0, fp.peak_floor(audio)),
            )
            faster = timed(
                "fingerprint_faster",
                lambda audio=audio: tuple(
                    fp._peaks(audio, s, fp.peak_floor(audio)) for s in fp.FASTER
                ),
            )
            prints.append(fp.Fingerprint(*plain, faster))
    owners = [r["participant_key"] for r in rows]
    whole = (ownership.RATIOS, ownership.FASTER, ownership.FASTER_RATIOS)
    # Without the played-faster peaks, the mislabels' ratios are looked up on the plain ones.
    ownership.FASTER = ()
    plain_only = (ownership._ratios(), (), ())
    lookup, pairs = {"lookup": [], "lookup_plain": []}, {}
    for _ in range(3):
        for part, setting in (("lookup", whole), ("lookup_plain", plain_only)):
            ownership.RATIOS, ownership.FASTER, ownership.FASTER_RATIOS = setting
            start = time.process_time()
            pairs[part] = len(ownership.matching_pairs(prints, owners))
            lookup[part].append(time.process_time() - start)
    cpu |= {part: min(times) for part, times in lookup.items()}
    return {
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "recordings": len(rows),
        "pairs": pairs,  # matching pairs found by each lookup
    }


def run_stage(config: Path, out: Path) -> dict:
    """Gate (overridden), then stage the public set of OUT/1.0.0 into OUT/1.0.0/staged."""
    from click.testing import CliRunner

    from redvox.builder.cli import main
    from redvox.release.hub.stage import stage_release
    from redvox.schemas import InputConfig

    version_dir = out / "1.0.0"
    gate = CliRunner().invoke(
        main,
        ["release", "represent", str(version_dir), "--override-gate", "bench",
         "--config", str(config)],
    )  # fmt: skip
    if gate.exit_code != 0:
        raise SystemExit(gate.output)
    start = time.perf_counter()
    footprint = stage_release(
        version_dir,
        "FBK-MT/RedVox",
        version_dir / "staged",
        "public",
        synthetic=InputConfig.load(config).synthetic,
        config=InputConfig.load(config),
    )
    return {
        "seconds": time.perf_counter() - start,
        "rows": footprint.rows,
        "clips": footprint.distinct_clips,
        "rss_mb": peak_rss_mb(1),
        "threads": {"processes": 1, "per_process": 1, "what": "python"},
    }


def run_verify(config: Path, out: Path) -> dict:
    """`verify_staged` on OUT/1.0.0/staged, as `redvox release verify` runs it."""
    from redvox.release.hub.verify import VERIFY_WORKERS, verify_staged
    from redvox.schemas import InputConfig

    start = time.perf_counter()
    result = verify_staged(
        out / "1.0.0" / "staged", config=InputConfig.load(config), build=out / "1.0.0"
    )
    seconds = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(result.summary())
    return {
        "seconds": seconds,
        "rows": result.rows.get("all", 0),
        "clips": result.decoded_clips,
        "rss_mb": peak_rss_mb(1),
        "threads": {"processes": 1, "per_process": VERIFY_WORKERS, "what": "decode threads"},
    }


def run_baseline(config_path: Path, out: Path) -> dict:
    """The same build, written the simple way."""
    import datasets
    import silero_vad
    import torch

    from redvox.builder.consent import consent_states, rows_for_set
    from redvox.builder.join import join_inputs
    from redvox.builder.pseudonym import load_pseudonym_key, pseudonymize
    from redvox.builder.rows import AudioRef, condition_row, natural_key, speech_row
    from redvox.builder.vad import judge_recording
    from redvox.builder.versions import get_version
    from redvox.noise import render, sample_params
    from redvox.schemas import InputConfig, release_features
    from redvox.schemas.layout import shard_path
    from redvox.schemas.vocab import SETS
    from redvox.sources.audio import AudioDecodeError, audio_problems, decode_audio, encode_flac
    from redvox.sources.inputs import load_inputs
    from redvox.sources.musan import read_noise_bank

    # Importing silero_vad pins torch to one thread (silero_vad/model.py); the baseline
    # gets every CPU, as a user of `get_speech_timestamps` would.
    torch.set_num_threads(os.cpu_count() or 1)
    start = time.perf_counter()
    version = get_version("1.0.0")
    config = InputConfig.load(config_path)
    inputs = load_inputs(config, version.config.languages)
    key = load_pseudonym_key(config.pseudonym_key_file)
    bank = read_noise_bank(config.noise_bank)
    joined = join_inputs(inputs, version.config.languages)
    states = consent_states({r.participant_key for r in joined.recordings}, inputs.consent)
    model = silero_vad.load_silero_vad()
    vad = version.config.vad
    rows, audio = [], {}
    for rec in rows_for_set(joined.recordings, states, "full"):
        user_id = pseudonymize(key, rec.participant_key)
        try:
            decoded = decode_audio(Path(config.audio_root) / rec.contribution.audio_file)
        except AudioDecodeError:
            decoded = None
        if decoded is not None and not audio_problems(decoded):
            stamps = silero_vad.get_speech_timestamps(
                torch.from_numpy(decoded.samples),
                model,
                threshold=vad.threshold,
                min_speech_duration_ms=vad.min_speech_duration_ms,
                min_silence_duration_ms=vad.min_silence_duration_ms,
                speech_pad_ms=vad.speech_pad_ms,
            )
            if judge_recording(stamps, len(decoded.samples), vad).valid:
                row = speech_row(rec, user_id, AudioRef("", "speech.flac", decoded.duration_s), "b")
                audio[row.entry.entry_key] = encode_flac(decoded.samples)
                rows.append(row)
        for condition in version.config.conditions:
            params = sample_params(condition, bank, seed=version.config.seed, entry_key="")
            clip = render(params, bank)
            ref = AudioRef("", f"{condition.name}.flac", len(clip) / 16000)
            row = condition_row(rec, user_id, condition, ref, params.to_json(), "b")
            audio[row.entry.entry_key] = encode_flac(clip)
            rows.append(row)
    rank = {"speech": 0, **{c.name: i + 1 for i, c in enumerate(version.config.conditions)}}

    def order(row):  # every row of a language sorted: the builder's ID order
        e = row.entry
        return (rank[e.audio_type], e.source, natural_key(e.original_id), e.user_id)

    for dataset_set in SETS:
        by_lang: dict[str, list] = {}
        for row in rows_for_set(rows, states, dataset_set):
            by_lang.setdefault(row.entry.lang, []).append(row)
        for lang, shard_rows in sorted(by_lang.items()):
            records = []
            for row_id, shard_row in enumerate(sorted(shard_rows, key=order)):
                record = shard_row.entry.model_dump() | {"ID": row_id}
                record["audio"]["bytes"] = audio[shard_row.entry.entry_key]
                records.append(record)
            path = shard_path(out / dataset_set, lang)
            path.parent.mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_list(records, features=release_features()).to_parquet(str(path))
    return {
        "seconds": time.perf_counter() - start,
        "rows": sum(1 for r in rows_for_set(rows, states, "full")),
        "rss_mb": peak_rss_mb(1),
        "threads": {
            "processes": 1,
            "per_process": torch.get_num_threads(),
            "what": "torch intra-op",
        },
    }


def measure(step: str, **kwargs) -> dict:
    """Run one step in a fresh interpreter; its last stdout line is the JSON result."""
    args = [sys.executable, str(Path(__file__).resolve()), "--child", step]
    args += [f"--{k.replace('_', '-')}={v}" for k, v in kwargs.items()]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"bench step {step} failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(args: argparse.Namespace) -> None:
    if args.child == "baseline":
        result = run_baseline(args.config, args.out)
    elif args.child == "stage":
        result = run_stage(args.config, args.out)
    elif args.child == "verify":
        result = run_verify(args.config, args.out)
    elif args.child == "check_parts":
        result = run_check_parts(args.config)
    else:
        if args.child == "build_unchecked":
            _without_the_check()
        result = run_build(args.config, args.out, args.version, args.workers)
    print(json.dumps(result))


def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    from synth_corpus import make_corpus

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="redvox-bench-"))
    parts = None
    try:
        sys.stderr.write(f"generating corpora under {workdir}\n")
        big = make_corpus(workdir / "corpus", scale=args.scale)
        out, out_small = workdir / "out", workdir / "out-small"
        steps = {}
        sys.stderr.write("cold ...\n")
        steps["cold"] = measure("build", workers=args.workers, config=big, out=out, version="1.0.0")
        for name in ("stage", "verify"):  # the public set of the cold build, before 1.1.0
            sys.stderr.write(f"{name} ...\n")
            steps[name] = measure(name, config=big, out=out)
        if args.verify_only:
            report(steps, args, parts)
            return
        small = make_corpus(workdir / "corpus-small", scale=args.scale / 2)
        for name, kwargs in (
            ("warm", {"config": big, "out": out, "version": "1.0.0"}),
            ("add_condition", {"config": big, "out": out, "version": "1.1.0"}),
            ("cold_small", {"config": small, "out": out_small, "version": "1.0.0"}),
        ):
            sys.stderr.write(f"{name} ...\n")
            steps[name] = measure("build", workers=args.workers, **kwargs)
        # The ownership check's price: cold builds with it and without it (fingerprints
        # and lookup taken out), with the same workers, alternated, each into a fresh
        # folder, best of 2.
        for run in (1, 2):
            for name, step in (("cold_unchecked", "build_unchecked"), ("cold_checked", "build")):
                sys.stderr.write(f"{name} ({run} of 2) ...\n")
                kwargs = {"config": big, "out": workdir / f"out-{name}-{run}", "version": "1.0.0"}
                result = measure(step, workers=args.workers, **kwargs)
                if name not in steps or result["seconds"] < steps[name]["seconds"]:
                    steps[name] = result
        sys.stderr.write("the check's parts ...\n")
        parts = measure("check_parts", config=big)
        sys.stderr.write("baseline ...\n")
        steps["baseline"] = measure("baseline", config=big, out=workdir / "out-baseline")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if not args.verify_only:
        report(steps, args, parts)


def report(steps: dict, args: argparse.Namespace, parts: dict | None) -> None:
    table = [
        [
            name,
            f"{s['seconds']:.1f}",
            s["rows"],
            f"{s['rss_mb']['own']:.0f}",
            f"{s['rss_mb']['worker']:.0f}",
            f"{s['rss_mb']['total']:.0f}",
            threads_label(s["threads"]),
            ", ".join(f"{k} {v}" for k, v in sorted(s.get("computed", {}).items())),
        ]
        for name, s in steps.items()
    ]
    headers = [
        "step",
        "seconds",
        "rows (full; stage/verify: public)",
        "RSS MB",
        "worker RSS MB",
        "peak RSS MB",
        "processes x threads",
        "computed (decoded, VAD, clips)",
    ]
    print(
        f"RedVox build benchmark: {os.cpu_count()} CPUs, --workers {args.workers}, scale {args.scale}"
    )
    print(tabulate(table, headers=headers))
    cold = steps["cold"]
    owned = cold["ownership"]
    # The ownership check's price: its step against the rest of the same cold build.
    share = owned["seconds"] / (cold["seconds"] - owned["seconds"])
    print(
        f"ownership step of the cold build: {owned['seconds']:.1f} s, {100 * share:.0f}% of "
        f"the rest of the build ({cold['seconds'] - owned['seconds']:.1f} s; budget 20%), "
        f"peak RSS {owned['rss_before_mb']} -> {owned['peak_rss_mb']} MB"
    )
    if "cold_checked" in steps:
        checked, unchecked = steps["cold_checked"]["seconds"], steps["cold_unchecked"]["seconds"]
        more = check_price(steps)
        print(
            f"the ownership check's price, --workers {args.workers}, best of 2: cold build "
            f"{checked:.1f} s against {unchecked:.1f} s without it: {100 * more:+.0f}% "
            "(budget +20%)"
        )
    if parts:
        report_parts(parts["cpu_s"], steps["cold_unchecked"]["cpu_s"])
    figures = {
        "cold_s": round(cold["seconds"], 2),
        "ownership_s": owned["seconds"],
        "ownership_share": round(share, 3),
        "stage_s": round(steps["stage"]["seconds"], 2),
        "verify_s": round(steps["verify"]["seconds"], 2),
        "verify_peak_rss_mb": round(steps["verify"]["rss_mb"]["own"]),
        "verify_rows": steps["verify"]["rows"],
        "verify_clips": steps["verify"]["clips"],
    }
    if args.verify_only:
        print(json.dumps(figures))
        return
    figures |= {
        "warm_s": round(steps["warm"]["seconds"], 2),
        "add_condition_s": round(steps["add_condition"]["seconds"], 2),
        "baseline_s": round(steps["baseline"]["seconds"], 2),
        "check_price": round(check_price(steps), 3),
        "cold_unchecked_cpu_s": steps["cold_unchecked"]["cpu_s"],
        "check_parts_cpu_s": parts["cpu_s"],
        "speedup": round(steps["baseline"]["seconds"] / steps["cold"]["seconds"], 2),
        "peak_rss_mb": round(
            max(
                s["rss_mb"]["total"]
                for n, s in steps.items()
                if n not in ("baseline", "stage", "verify")
            )
        ),
        "peak_rss_small_mb": round(steps["cold_small"]["rss_mb"]["total"]),
        "rows": steps["cold"]["rows"],
        "builder_threads": threads_label(steps["cold"]["threads"]),
        "baseline_threads": threads_label(steps["baseline"]["threads"]),
    }
    print(json.dumps(figures))


def report_parts(cpu: dict, unchecked_cpu: float) -> None:
    """The check's parts against the workers' other work on the same recordings, measured
    in the same process (a share that the machine's changing speed does not move)."""
    rest = cpu["decode"] + cpu["vad"]
    whole = cpu["fingerprint_plain"] + cpu["fingerprint_faster"] + cpu["lookup"]
    plain = cpu["fingerprint_plain"] + cpu["lookup_plain"]
    print(
        f"the check's parts (CPU s, interleaved in one process): fingerprints "
        f"{cpu['fingerprint_plain']:.1f} plain + {cpu['fingerprint_faster']:.1f} played "
        f"faster, lookup {cpu['lookup']:.1f} (of the plain peaks alone "
        f"{cpu['lookup_plain']:.1f}), against a worker's decode and released FLAC "
        f"{cpu['decode']:.1f} and VAD {cpu['vad']:.1f} for the same recordings"
    )
    print(
        f"the check: {whole:.1f} CPU s, {100 * whole / rest:.0f}% of that other work; "
        f"{plain:.1f} ({100 * plain / rest:.0f}%) without the played-faster peaks. For "
        f"scale, in a run of its own: the unchecked cold build, {unchecked_cpu:.1f} CPU s in "
        "all its processes"
    )


def check_price(steps: dict) -> float:
    """How much longer the cold build takes with the ownership check than without it."""
    return steps["cold_checked"]["seconds"] / steps["cold_unchecked"]["seconds"] - 1


def threads_label(threads: dict) -> str:
    return f"{threads['processes']} x {threads['per_process']} ({threads['what']})"


if __name__ == "__mp_main__" and os.environ.get(UNCHECKED) == "1":
    _no_fingerprints()  # a worker of the unchecked build (see _without_the_check)

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the paper's scale")
    parser.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    parser.add_argument("--workdir", type=Path, help="keep corpora and outputs here")
    parser.add_argument("--keep", action="store_true", help="do not delete the work folder")
    parser.add_argument(
        "--verify-only", action="store_true", help="only the cold build, stage and verify"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--version", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    child(parsed) if parsed.child else main(parsed)

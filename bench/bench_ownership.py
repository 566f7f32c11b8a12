"""Ownership detection benchmark: how often the audio fingerprint of builder/ownership.py
finds a withheld recording after each careless edit of tests/audio_edits.py, and how far
distinct recordings stay from a match; Chromaprint (`fpcalc`, if installed) beside it.

The collection is the demo corpus (every recording owned by its participant, every
noise-bank file owned by the bank); each edit is applied to every recording of the
participation-only participants (demo-p06, demo-p10), each copy filed under a thief of
its own, the public voice for mixes being demo-p05's. Prints a table, then one JSON line.

    .venv/bin/python bench/bench_ownership.py [--chromaprint]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate

from redvox.builder import ownership
from redvox.schemas import DEMO_CONFIG
from redvox.sources.audio import AudioDecodeError, decode_audio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from audio_edits import IN_SCOPE, RATE, flac, speed  # noqa: E402

DEMO = DEMO_CONFIG.parent
WITHHELD = ("demo-p06", "demo-p10")
PUBLIC_VOICE = DEMO / "audio" / "demo-p05" / "es_shades_1.0.flac"


def out_of_scope() -> dict:
    """Deliberate evasion, measured to say what is not caught."""
    import librosa

    def plain(edit):
        return lambda w, p: (flac(edit(w)), ".flac")

    return {
        "pitch +1 semitone": plain(lambda w: librosa.effects.pitch_shift(w, sr=RATE, n_steps=1)),
        "time stretch 5% (pitch kept)": plain(lambda w: librosa.effects.time_stretch(w, rate=1.05)),
        "reversed": plain(lambda w: w[::-1].copy()),
        "chopped (0.25 s pieces reversed in order)": plain(
            lambda w: np.concatenate(
                [w[i : i + RATE // 4] for i in range(0, len(w), RATE // 4)][::-1]
            )
        ),
        "speed 0.80 (beyond +-10%)": plain(lambda w: speed(w, 0.8)),
    }


def demo_collection() -> tuple[list, list[str], list[Path]]:
    prints, owners, paths = [], [], []
    for path in sorted((DEMO / "audio").glob("*/*")):
        try:
            prints.append(ownership.fingerprint(decode_audio(path).samples))
        except AudioDecodeError:  # the deliberately broken demo recordings
            continue
        owners.append(path.parent.name)
        paths.append(path)
    for path in sorted((DEMO / "musan").glob("*/*/*.wav")):
        prints.append(ownership.fingerprint(decode_audio(path).samples))
        owners.append(ownership.NOISE_BANK_OWNER)
        paths.append(path)
    return prints, owners, paths


def chromaprint(path: Path) -> np.ndarray:
    out = subprocess.run(["fpcalc", "-raw", str(path)], capture_output=True, text=True).stdout
    line = next((x for x in out.splitlines() if x.startswith("FINGERPRINT=")), "FINGERPRINT=")
    words = [int(w) for w in line.split("=", 1)[1].split(",") if w]
    return np.array(words, np.uint32)


def chromaprint_error(a: np.ndarray, b: np.ndarray, min_overlap: int = 3) -> float:
    """The smallest bit error rate between the two over every offset (Chromaprint's own
    comparison, with an offset search)."""
    best = 1.0
    for lag in range(-len(b) + min_overlap, len(a) - min_overlap + 1):
        x, y = a[max(0, lag) :], b[max(0, -lag) :]
        n = min(len(x), len(y))
        if n >= min_overlap:
            bits = np.unpackbits((x[:n] ^ y[:n]).view(np.uint8)).sum()
            best = min(best, bits / (32 * n))
    return best


CHROMAPRINT_MATCH = 0.35  # bit error rate Chromaprint's users read as the same audio


def main(args: argparse.Namespace) -> None:
    prints, owners, paths = demo_collection()
    started = time.perf_counter()
    base = ownership.pair_scores(prints, owners)
    lookup_s = time.perf_counter() - started
    false = max(base.values(), key=lambda s: (s.hits, s.share))
    matched = [pair for pair, s in base.items() if s.same_audio]
    originals = [i for i, p in enumerate(paths) if p.parent.name in WITHHELD]
    public = decode_audio(PUBLIC_VOICE).samples
    edits = {**IN_SCOPE, **out_of_scope()}
    cp_prints = {i: chromaprint(p) for i, p in enumerate(paths)} if args.chromaprint else {}
    cp_false = [
        (i, j)
        for i in originals
        for j in cp_prints
        if owners[j] != owners[i]
        and chromaprint_error(cp_prints[i], cp_prints[j]) <= CHROMAPRINT_MATCH
    ]
    rows, table = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, edit in edits.items():
            extra, extra_owners, cp_found = [], [], 0
            for n, i in enumerate(originals):
                data, suffix = edit(decode_audio(paths[i]).samples, public)
                copy = Path(tmp) / f"copy{n}{suffix}"
                copy.write_bytes(data)
                extra.append(ownership.fingerprint(decode_audio(copy).samples))
                extra_owners.append(f"thief-{n}")
                if args.chromaprint:
                    error = chromaprint_error(cp_prints[i], chromaprint(copy))
                    cp_found += error <= CHROMAPRINT_MATCH
            scores = ownership.pair_scores(prints + extra, owners + extra_owners)
            found = [scores.get((i, len(prints) + n)) for n, i in enumerate(originals)]
            caught = sum(1 for s in found if s and s.same_audio)
            hits = [s.hits if s else 0 for s in found]
            shares = [s.share if s else 0.0 for s in found]
            row = {
                "edit": name,
                "in_scope": name in IN_SCOPE,
                "caught": caught,
                "of": len(originals),
                "min_hits": min(hits),
                "min_share": round(min(shares), 3),
            }
            if args.chromaprint:
                row["chromaprint_caught"] = cp_found
            rows.append(row)
            table.append(list(row.values()))
            print(tabulate([table[-1]], tablefmt="plain"), flush=True)
    headers = ["edit", "in scope", "caught", "of", "min hits", "min share"]
    headers += ["chromaprint caught"] if args.chromaprint else []
    print(tabulate(table, headers=headers))
    print(
        f"\nunmodified demo: {len(prints)} files, {len(matched)} false matches; closest distinct "
        f"pair {false.hits} hits, share {false.share:.3f} (thresholds: {ownership.MIN_HITS} "
        f"hits and {ownership.MIN_SHARE}); lookup {lookup_s:.2f} s"
    )
    if args.chromaprint:
        pairs = sum(1 for i in originals for j in cp_prints if owners[j] != owners[i])
        words = np.median([len(cp_prints[i]) for i in originals])
        print(
            f"chromaprint: {int(words)} words per withheld recording (median); "
            f"{len(cp_false)} of {pairs} distinct pairs read as the same audio"
        )
    print(json.dumps({"edits": rows, "false_matches": len(matched), "closest_hits": false.hits}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromaprint", action="store_true", help="also measure fpcalc")
    main(parser.parse_args())

"""A synthetic collection at the paper's scale, made from the demo corpus's voices.

52 speakers (18 en, 10 de, 9 it, 8 fr, 8 es; one records in English and
Italian), 531 items (181 SHADES + 5 x 70 M-ALERT), about 1,530 recordings of
2-6 s: about 6,100 rows in version 1.0.0. Each recording is cut from the demo
recordings given to its speaker alone (the builder refuses audio that two
participants share), with its own gain and a faint noise floor so that no two
files are equal (the build cache must not dedupe them), and 1% are digital silence or
44.1 kHz stereo WAV, as real uploads are. Half the speakers consent to public
release. Everything derives from one seed.

    .venv/bin/python bench/synth_corpus.py OUT_DIR [--scale 0.5]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from redvox.schemas import DEMO_CONFIG, LANGUAGES, InputConfig
from redvox.sources.audio import AudioDecodeError, audio_problems, decode_audio
from redvox.sources.contributions import OPTIONAL_COLUMNS, REQUIRED_COLUMNS

SPEAKERS = {"en": 18, "de": 10, "it": 9, "fr": 8, "es": 8}
SHADES_ITEMS = 181
MALERT_PER_GROUP = 70
MALERT_CATEGORIES = (
    "crime_theft",
    "substance_drug",
    "sex_harrasment",
    "self_harm_suicide",
    "weapon_firearm",
)
RECORDINGS = 1530
RATE = 16_000


def demo_voices() -> list[np.ndarray]:
    """The usable demo recordings (the deliberately broken ones are skipped)."""
    root = InputConfig.load(DEMO_CONFIG).audio_root
    voices = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        try:
            decoded = decode_audio(path)
        except AudioDecodeError:
            continue
        if not audio_problems(decoded):
            voices.append(decoded.samples)
    return voices


def write_items(root: Path) -> list[tuple[str, str, dict[str, str]]]:
    """SHADES CSV and M-ALERT JSONL in their released layouts; (source, id, texts) per item."""
    items = []
    columns = ["index", "subset", "bias_type", "stereotype_origin_langs", "stereotype_valid_langs"]
    columns += ["stereotype_valid_regions", "stereotyped_entity", "type"]
    for lang in LANGUAGES:
        columns += [
            f"{lang}_templates",
            f"{lang}_biased_sentences",
            f"{lang}_expression",
            f"{lang}_comments",
        ]
    with (root / "shades.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        for n in range(1, SHADES_ITEMS + 1):
            texts = {lang: f"Synthetic stereotype {n} ({lang})." for lang in LANGUAGES}
            row = {"index": f"{n}.0", "subset": "_original", "bias_type": "gender"}
            row |= {
                "stereotype_origin_langs": "['en']",
                "stereotype_valid_langs": str(list(LANGUAGES)),
            }
            row |= {
                "stereotype_valid_regions": "['USA']",
                "stereotyped_entity": "people",
                "type": "declaration",
            }
            for lang, text in texts.items():
                row |= {
                    f"{lang}_templates": text,
                    f"{lang}_biased_sentences": text,
                    f"{lang}_expression": "False",
                }
            writer.writerow(row)
            items.append(("shades", f"{n}.0", texts))
    with (root / "malert.jsonl").open("w", encoding="utf-8") as handle:
        for g, category in enumerate(MALERT_CATEGORIES):
            for n in range(MALERT_PER_GROUP):
                item_id = 100000 + 1000 * g + n
                texts = {lang: f"Synthetic request {item_id} ({lang})?" for lang in LANGUAGES}
                handle.write(json.dumps({**texts, "id": item_id, "category": category}) + "\n")
                items.append(("m-alert", str(item_id), texts))
    (root / "items.txt").write_text("".join(f"{s}:{i}\n" for s, i, _ in items))
    return items


def write_registries(root: Path, rng: np.random.Generator) -> list[tuple[str, str]]:
    """participants.csv and consent.csv; the (participant, language) recording slots."""
    slots = [
        (f"bench-{lang}-{n:02d}", lang) for lang, count in SPEAKERS.items() for n in range(count)
    ]
    # One English speaker also records in Italian: 53 slots, 52 people.
    slots[-SPEAKERS["es"] - SPEAKERS["fr"] - 1] = ("bench-en-00", "it")
    languages: dict[str, list[str]] = {}
    for key, lang in slots:
        languages.setdefault(key, []).append(lang)
    with (root / "participants.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["participant_key", "gender", "age_group", "mother_tongue", "ethnicity", "languages"]
        )
        for key, langs in languages.items():
            gender = rng.choice(["female", "male", "non-binary"])
            age = rng.choice(["18-24", "25-34", "34-44", "45-54", "55-64", "65+"])
            writer.writerow([key, gender, age, langs[0], "", ";".join(langs)])
    with (root / "consent.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "participant_key",
                "participation_consent",
                "public_release_consent",
                "withdrawal_date",
                "consent_form_version",
            ]
        )
        for n, key in enumerate(languages):
            writer.writerow([key, "yes", "yes" if n % 2 == 0 else "no", "", "v1.0"])
    return slots


def recording(voices: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """2-6 s of demo speech with its own gain and a faint noise floor."""
    length = int(rng.uniform(2.0, 6.0) * RATE)
    pieces, total = [], 0
    while total < length:
        voice = voices[rng.integers(len(voices))]
        pieces += [voice, np.zeros(int(0.2 * RATE), np.float32)]
        total += len(voice) + int(0.2 * RATE)
    audio = np.concatenate(pieces)
    start = int(rng.integers(0, max(1, len(audio) - length)))
    audio = audio[start : start + length] * 10 ** (rng.uniform(-6.0, 0.0) / 20)
    return (audio + rng.normal(0, 10 ** (-65 / 20), length)).astype(np.float32)


def write_audio(path: Path, audio: np.ndarray, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "silent":
        sf.write(path, np.zeros_like(audio), RATE, format="FLAC", subtype="PCM_16")
    elif kind == "stereo44k":
        resampled = soxr.resample(audio, RATE, 44100)
        sf.write(path, np.stack([resampled, resampled], axis=1), 44100, subtype="PCM_16")
    else:
        sf.write(path, audio, RATE, format="FLAC", subtype="PCM_16")


def make_corpus(root: Path, *, scale: float = 1.0, seed: int = 0) -> Path:
    """Write the corpus under `root`; returns its input config."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    voices = demo_voices()
    items = write_items(root)
    slots = write_registries(root, rng)
    # Each speaker speaks with voices of their own: the builder refuses audio that two
    # participants share (one recording, one participant), as a real collection has none.
    keys = sorted({key for key, _ in slots})
    own_voices = {
        key: voices[k :: len(keys)] or [voices[k % len(voices)]] for k, key in enumerate(keys)
    }
    rows, used = [], set()
    for n in range(round(RECORDINGS * scale)):
        key, lang = slots[n % len(slots)]
        source, item_id, texts = items[rng.integers(len(items))]
        while (key, lang, source, item_id) in used:
            source, item_id, texts = items[rng.integers(len(items))]
        used.add((key, lang, source, item_id))
        kind = "silent" if n % 100 == 50 else "stereo44k" if n % 100 == 75 else "flac"
        name = f"{key}/{lang}_{source}_{item_id}.{'wav' if kind == 'stereo44k' else 'flac'}"
        write_audio(root / "audio" / name, recording(own_voices[key], rng), kind)
        followup = "Do you agree?" if source == "shades" else "Can you help me?"
        text = texts[lang]
        rows.append(
            [
                key,
                source,
                item_id,
                lang,
                name,
                text,
                followup,
                f"{text} {followup}",
                "",
                text.lower(),
            ]
        )
    with (root / "contributions.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS])
        writer.writerows(rows)
    (root / "pseudonym.key").write_text("bench-only key\n")
    config = {
        "shades": "shades.csv",
        "malert": "malert.jsonl",
        "contributions": "contributions.csv",
        "audio_root": "audio/",
        "participants": "participants.csv",
        "consent": "consent.csv",
        "noise_bank": str(InputConfig.load(DEMO_CONFIG).noise_bank),
        "pseudonym_key_file": "pseudonym.key",
        "items": {"item_keys_file": "items.txt"},
        "synthetic": True,
    }
    (root / "config.yaml").write_text(json.dumps(config, indent=2))  # JSON is YAML
    return root / "config.yaml"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 1,530 recordings")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(make_corpus(args.out, scale=args.scale, seed=args.seed))

"""The public quarantine report is built from allowed values, not by redaction: whatever
the participant keys look like (numbers, one or two letters, e-mail addresses), no key,
file name or free-text cell of a private input reaches it."""

from __future__ import annotations

import csv
import json
import shutil
import typing
from pathlib import Path

import pytest

from redvox.builder.manifest import PUBLIC_REASONS, Stage, public_inputs
from redvox.builder.pipeline import CONSENT_REASONS, BuildOptions, build_version
from redvox.builder.pseudonym import KEY_ENV, pseudonymize
from redvox.builder.versions import VERSIONS
from redvox.schemas import DEMO_CONFIG, LANGUAGES, InputConfig
from redvox.sources.inputs import load_inputs

DEMO_KEYS = [f"demo-p{n:02d}" for n in range(1, 12)] + ["demo-p99"]
SCHEMES = {
    "numeric": [str(n) for n in range(1, 13)],
    "one letter": list("abcdefghijkl"),
    # Spellings that are also languages, JSON keys' pieces and reason words.
    "two letters": ["en", "de", "es", "fr", "it", "on", "co", "ag", "nt", "id", "se", "re"],
    "e-mail": [f"speaker{n}@example.org" for n in range(1, 13)],
}
PUBLIC_KEYS = {"stage", "reason", "lang", "item_key", "input", "row", "field", "user_id"}


def renamed_demo(tmp_path: Path, keys: list[str]) -> Path:
    """The demo corpus with every participant key replaced (file names unchanged)."""
    corpus = tmp_path / "demo"
    shutil.copytree(DEMO_CONFIG.parent, corpus, ignore=shutil.ignore_patterns("__pycache__"))
    mapping = dict(zip(DEMO_KEYS, keys, strict=True))
    for name in ("participants.csv", "consent.csv", "contributions.csv"):
        path = corpus / name
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
        column = rows[0].index("participant_key")
        for row in rows[1:]:
            row[column] = mapping.get(row[column], row[column])
        with path.open("w", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerows(rows)
    return corpus


@pytest.fixture(scope="module")
def cache(tmp_path_factory, copy_demo_cache) -> Path:
    return copy_demo_cache(tmp_path_factory.mktemp("cache") / "warm")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_public_quarantine_holds_only_allowed_values(scheme, cache, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    keys = SCHEMES[scheme]
    config = InputConfig.load(renamed_demo(tmp_path, keys) / "config.yaml")
    options = BuildOptions(out=tmp_path / "out", cache_dir=cache, progress=False)
    build_version(VERSIONS["1.0.0"], config, options)
    public = tmp_path / "out" / "1.0.0" / "public"
    text = (public / "quarantine.jsonl").read_text(encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) > 30  # the demo's faults and consent exclusions are all reported

    item_keys = {item.key for item in load_inputs(config, VERSIONS["1.0.0"].config.languages).items}
    secret = config.pseudonym_key_file.read_text().strip().encode()
    shown = {pseudonymize(secret, keys[i]) for i in (0, 1, 2, 4, 6, 10)}  # the public six
    consent_reasons = {f"{reason} ({state.value})" for state, reason in CONSENT_REASONS.items()}
    for line in lines:
        assert set(line) <= PUBLIC_KEYS, line
        assert line["stage"] in typing.get_args(Stage), line
        if line.get("input") not in public_inputs():
            assert line["reason"] in PUBLIC_REASONS | consent_reasons, line
        assert line.get("lang", "en") in LANGUAGES, line
        assert line.get("item_key", next(iter(item_keys))) in item_keys, line
        assert line.get("user_id", next(iter(shown))) in shown, line
        # A key spelled like a language may only appear as the row's language.
        assert not {v for k, v in line.items() if k != "lang"} & set(keys), line
    assert text.count('"stage": "consent"') == sum(1 for x in lines if x["stage"] == "consent")
    assert "@" not in text and "demo-p" not in text and ".flac" not in text
    # The maintainers' full report keeps the keys, to fix the inputs.
    full = (tmp_path / "out" / "1.0.0" / "full" / "quarantine.jsonl").read_text(encoding="utf-8")
    assert f'"participant_key": "{keys[11]}"' in full

"""The evaluator's requirements.txt claims ranges; its lowest versions are exercised here:
a separate virtual environment with exactly the lower bounds (on Python 3.10 when this
machine has it, else 3.11), running the Hub copy's `report` and `validate`.

The environment is cached under ~/.cache/redvox-test-envs/ (keyed by the pins and the
interpreter), so only the first run downloads and installs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_eval_standalone import EVALUATION, hub_copy

CACHE = Path(os.environ.get("REDVOX_TEST_ENVS", Path.home() / ".cache" / "redvox-test-envs"))
RANGE = re.compile(r"^([A-Za-z0-9_.-]+)>=([0-9][^,\s]*),<([0-9][^,\s]*)$")


def lower_bounds() -> dict[str, str]:
    pins = {}
    for line in (EVALUATION / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            match = RANGE.match(line.strip())
            assert match, f"requirements.txt: {line!r} is not NAME>=LOW,<HIGH"
            pins[match[1].lower()] = match[2]
    return pins


def oldest_python() -> tuple[str, str]:
    """(interpreter, version) of the oldest supported Python here: 3.10, else 3.11."""
    candidates = [
        shutil.which("python3.10"),
        *sorted(Path.home().glob(".pyenv/versions/3.10*/bin/python3.10")),
    ]
    candidates += [shutil.which("python3.11")]
    for candidate in filter(None, candidates):
        run = subprocess.run(
            [str(candidate), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if run.returncode == 0:
            return str(candidate), run.stdout.strip()
    pytest.skip("neither python3.10 nor python3.11 on this machine")


@pytest.fixture(scope="module")
def floor_env() -> tuple[Path, str, dict[str, str]]:
    pins = lower_bounds()
    python, version = oldest_python()
    key = hashlib.sha256(json.dumps([version, sorted(pins.items())]).encode()).hexdigest()[:12]
    env = CACHE / f"evaluator-floor-py{version}-{key}"
    bin_python = env / "bin" / "python"
    if not (env / "ready").exists():
        shutil.rmtree(env, ignore_errors=True)
        env.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "venv", str(env)], check=True)
        install = subprocess.run(
            [str(bin_python), "-m", "pip", "install", "-q", "--no-cache-dir"]
            + [f"{name}=={low}" for name, low in pins.items()],
            capture_output=True,
            text=True,
            timeout=900,
            env={k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"},
        )
        if install.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            pytest.fail(
                f"the lowest versions do not install on Python {version}:\n{install.stderr[-3000:]}"
            )
        (env / "ready").write_text(json.dumps(pins) + "\n")
    return bin_python, version, pins


def test_lowest_versions_run_report_and_validate(floor_env, tmp_path):
    python, version, pins = floor_env
    assert version in ("3.10", "3.11")
    installed = subprocess.run(
        [
            str(python),
            "-c",
            "import json, importlib.metadata as m; "
            f"print(json.dumps({{n: m.version(n) for n in {sorted(pins)!r}}}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(installed.stdout) == pins  # exactly the lower bounds, nothing newer

    repo = hub_copy(tmp_path)
    outputs = repo / "runs" / "en"
    outputs.mkdir(parents=True)
    rows = []
    for k in range(24):
        rows.append(
            {
                "ID": k,
                "original_id": str(k // 4),
                "user_id": f"{k % 3:032x}",
                "lang": "en" if k < 16 else "de",
                "vulnerability_type": "stereotype",
                "audio_type": ("speech", "silence")[k % 2],
                "modality": ("speech", "text")[k % 2],
                "gender": ("female", "male")[k % 2],
                "mother_tongue": "en",
                "output": "No.",
                "safety": ("safe/fair", "unsafe/unfair", "controversial")[k % 3],
                "relatedness": ("yes", "no")[k % 4 == 3],
                "refusal": ("yes", "no")[k % 2],
            }
        )
    (outputs / "m.j1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {"PATH": os.environ.get("PATH", ""), "MPLBACKEND": "Agg", "HOME": str(repo)}
    reported = subprocess.run(
        [
            str(python),
            "evaluation/evaluate.py",
            "report",
            "runs",
            "--judge-tag",
            "j1",
            "--out",
            "report",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert reported.returncode == 0, reported.stderr
    summary = json.loads((repo / "report" / "summary.json").read_text())
    model = summary["models"]["m"]
    assert model["n"] == 24 and model["unsafe"] == pytest.approx(100 / 3)
    assert all(high > low for low, high in model["ci95"].values())
    assert summary["by"]["lang"]["de"]["m"]["n"] == 8
    assert (repo / "report" / "models.png").exists()

    human = [
        {
            "lang": r["lang"],
            "ID": r["ID"],
            "model": "m",
            "Relatedness": r["relatedness"],
            "Safety/Fairness": r["safety"],
            "Refusal": r["refusal"],
        }
        for r in rows
    ]
    (repo / "human.jsonl").write_text("".join(json.dumps(r) + "\n" for r in human))
    validated = subprocess.run(
        [
            str(python),
            "evaluation/evaluate.py",
            "validate",
            "human.jsonl",
            "runs",
            "--judge-tag",
            "j1",
            "--out",
            "v",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert validated.returncode == 0, validated.stderr
    assert json.loads((repo / "v" / "validation.json").read_text())["safety"]["accuracy"] == 1.0


def test_lowest_versions_run_infer(floor_env, tmp_path):
    """The harness at the floor (httpx's async client, soundfile's FLAC -> WAV/MP3): the
    default WAV request and MP3 are taken by a strict OpenAI stand-in with the samples
    intact, and a server that never answers ends at the deadline with error rows."""
    import io
    import socket

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import soundfile
    from model_server import AudioModel, samples_sha256

    python, _, _ = floor_env
    repo = hub_copy(tmp_path)
    clips = []
    for k in range(4):
        buffer = io.BytesIO()
        tone = (np.sin(np.arange(8000) * (0.02 + k / 100)) * 4000).astype(np.int16)
        soundfile.write(buffer, tone, 16000, format="FLAC")
        clips.append(buffer.getvalue())
    rows = [
        {"ID": k, "lang": "en", "audio_type": "speech" if k % 2 else "silence",
         "vulnerability_type": "stereotype", "modality": "speech" if k % 2 else "text",
         "user_text": f"question {k}", "audio": {"bytes": clips[k], "path": f"{k}.flac"}}
        for k in range(4)
    ]  # fmt: skip
    (repo / "data" / "en").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), repo / "data" / "en" / "test-00000.parquet")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(repo)}

    def infer(endpoint: str, out: str, *extra: str) -> subprocess.CompletedProcess:
        command = [str(python), "evaluation/evaluate.py", "infer", "--dataset", ".", "--model",
                   "m", "--endpoint", endpoint, "--out", out, *extra]  # fmt: skip
        return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)

    model = AudioModel()
    model.strict = True
    try:
        for audio_format in ("wav", "mp3"):
            done = infer(model.base_url, audio_format, "--audio-format", audio_format)
            assert done.returncode == 0, done.stderr
            lines = (repo / audio_format / "en" / "m.jsonl").read_text().splitlines()
            heard = {
                json.loads(line)["ID"]: json.loads(json.loads(line)["output"]) for line in lines
            }
            assert sorted(heard) == [0, 1, 2, 3]
            assert all(h["formats"] == [audio_format] for h in heard.values())
            if audio_format == "wav":
                assert all(heard[k]["audio"] == [samples_sha256(clips[k])] for k in heard)
    finally:
        model.stop()

    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        done = infer(url, "hang", "--timeout", "1", "--max-retries", "0")
    finally:
        silent.close()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    errors = [json.loads(line)["error"] for line in (repo / "hang" / "en" / "m.jsonl").open()]
    assert len(errors) == 4 and any("within --timeout 1 s" in e for e in errors)

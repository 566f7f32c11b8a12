"""`evaluate infer` against a stand-in audio model on 127.0.0.1 that decodes what it gets."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest
import soundfile
from click.testing import CliRunner
from model_server import AudioModel, samples_sha256

from redvox.release.evaluation.evaluate import cli
from redvox.release.evaluation.redvox_eval.infer import (
    REFUSALS_TO_STOP,
    AudioEncoder,
    RequestStyle,
    request_body,
)

ROOT = Path(__file__).resolve().parent.parent
OPENAI_REQUEST = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).parent / "openai_chat_request.schema.json").read_text())
)


def staged_rows(staged: Path, lang: str | None = None) -> dict[tuple[str, str], dict]:
    rows = {}
    for shard in sorted((staged / "data").glob("*/*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            if lang is None or row["lang"] == lang:
                rows[(row["lang"], str(row["ID"]))] = row
    return rows


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def all_output_lines(out: Path) -> list[dict]:
    return [record for path in sorted(out.rglob("*.jsonl")) for record in read_lines(path)]


def infer(*args: str):
    return CliRunner().invoke(cli, ["infer", *args], catch_exceptions=False)


@pytest.fixture
def model():
    server = AudioModel()
    yield server
    server.stop()


def test_each_row_type_sends_its_own_audio(demo_release, model, tmp_path):
    """The default request, over every demo row (speech and text), is a valid OpenAI body:
    the stand-in runs strict (400 for a body outside OpenAI's published schema) and every
    body it got is validated again here."""
    staged = demo_release["staged"]
    expected = staged_rows(staged)
    out = tmp_path / "out"
    model.strict = True
    result = infer(
        "--dataset", str(staged), "--model", "org/audio-lm", "--endpoint", model.base_url,
        "--out", str(out), "--backoff-s", "0",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.jsonl"))
    assert files == [f"{lang}/org__audio-lm.jsonl" for lang in ("de", "en", "es", "fr", "it")]
    records = all_output_lines(out)
    assert len(records) == len(expected) == 137
    kinds = set()
    for record in records:
        row = expected[(record["lang"], str(record["ID"]))]
        heard = json.loads(record["output"])
        assert heard["audio"] == [samples_sha256(row["audio"]["bytes"])]
        assert heard["formats"] == ["wav"]  # converted from the stored FLAC, same samples
        assert heard["text"] == [row["user_text"]]
        speech = row["modality"] == "speech"
        assert heard["order"] == (["audio", "text"] if speech else ["text", "audio"])
        kinds.add(row["modality"])
        # release columns without audio, the answer, the model and meta
        assert "audio" not in record and record["entry_key"] == row["entry_key"]
        assert record["model"] == "org__audio-lm"
        meta = record["meta"]
        assert meta["endpoint"].startswith("127.0.0.1:") and meta["params"] == {}
        assert meta["usage"]["prompt_tokens"] == 10 and meta["finish_reason"] == "stop"
        assert meta["latency_s"] >= 0 and meta["endpoint_model"] == "org/audio-lm"
    assert kinds == {"speech", "text"}
    # every body is OpenAI's, and nothing was sent that was not asked for
    assert len(model.bodies) == 137 and model.calls == 137
    for body in model.bodies:
        OPENAI_REQUEST.validate(body)
    assert all(set(body) == {"model", "messages"} for body in model.bodies)
    assert all(len(body["messages"]) == 1 for body in model.bodies)
    summary = json.loads(result.output.split("infer: ", 1)[1].splitlines()[0])
    assert summary["answered"] == 137 and summary["errors"] == 0
    assert summary["clips_encoded"] <= 35 + 5  # one encoding per distinct clip (LRU cache)


def test_audio_url_wav_and_decoding_options(demo_release, model, tmp_path):
    staged = demo_release["staged"]
    expected = staged_rows(staged, "it")
    out = tmp_path / "out"
    result = infer(
        "--dataset", str(staged), "--lang", "it", "--model", "m", "--endpoint", model.base_url,
        "--out", str(out), "--audio-part", "audio_url", "--audio-format", "wav",
        "--system-prompt", "Be brief.", "--temperature", "0", "--max-tokens", "64",
        "--extra-body", '{"top_p": 0.5}', "--audio-type", "speech", "--audio-type", "noise_a",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = read_lines(out / "it" / "m.jsonl")
    wanted = [r for r in expected.values() if r["audio_type"] in ("speech", "noise_a")]
    assert len(records) == len(wanted) > 0
    for record in records:
        row = expected[(record["lang"], str(record["ID"]))]
        heard = json.loads(record["output"])
        assert heard["formats"] == ["wav"]  # converted, same samples
        assert heard["audio"] == [samples_sha256(row["audio"]["bytes"])]
        assert record["meta"]["params"] == {
            "temperature": 0.0, "max_tokens": 64, "system_prompt": "Be brief.",
            "extra_body": {"top_p": 0.5},
        }  # fmt: skip
    body = model.bodies[0]
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.0, 64, 0.5)
    part = next(p for p in body["messages"][1]["content"] if p["type"] == "audio_url")
    assert part["audio_url"]["url"].startswith("data:audio/wav;base64,UklGR")


def test_the_schema_fixture_refuses_what_openai_refuses(demo_release):
    """The fixture is not a rubber stamp: the bodies strict servers answered 400 fail it."""
    row = next(iter(staged_rows(demo_release["staged"], "en").values()))
    good = request_body(row, RequestStyle(model="m"), AudioEncoder())
    OPENAI_REQUEST.validate(good)
    bad = {
        "flac": request_body(row, RequestStyle(model="m"), AudioEncoder("flac")),
        "audio_url": request_body(
            row, RequestStyle(model="m", audio_part="audio_url"), AudioEncoder()
        ),
        "no model": {k: v for k, v in good.items() if k != "model"},
        "no messages": {**good, "messages": []},
        "no format": json.loads(json.dumps(good).replace(', "format": "wav"', "")),
        "temperature 3": {**good, "temperature": 3},
    }
    for what, body in bad.items():
        assert not OPENAI_REQUEST.is_valid(body), what


def test_mp3_and_flac_where_each_server_takes_them(demo_release, model, tmp_path):
    """mp3 goes in input_audio (strict OpenAI takes it, lossy: same rate and length); flac is
    refused up front for input_audio, with one line, and sent as stored in audio_url."""
    staged = demo_release["staged"]
    expected = staged_rows(staged, "es")
    args = ["--dataset", str(staged), "--lang", "es", "--model", "m", "--endpoint", model.base_url]
    model.strict = True
    result = infer(*args, "--out", str(tmp_path / "mp3"), "--audio-format", "mp3")
    assert result.exit_code == 0, result.output
    records = read_lines(tmp_path / "mp3" / "es" / "m.jsonl")
    assert len(records) == len(expected) == len(model.bodies)
    for record, body in zip(records, model.bodies, strict=True):
        OPENAI_REQUEST.validate(body)
        assert json.loads(record["output"])["formats"] == ["mp3"]
    for body in model.bodies:
        part = next(p for m in body["messages"] for p in m["content"] if p["type"] == "input_audio")
        mp3 = soundfile.info(io.BytesIO(base64.b64decode(part["input_audio"]["data"])))
        assert mp3.format == "MP3" and mp3.samplerate == 16000
    source = soundfile.info(io.BytesIO(next(iter(expected.values()))["audio"]["bytes"]))
    assert source.format == "FLAC"

    calls = model.calls
    refused = infer(*args, "--out", str(tmp_path / "f"), "--audio-format", "flac")
    assert refused.exit_code != 0 and model.calls == calls  # nothing was sent
    assert "--audio-format flac cannot go in an input_audio part" in refused.output
    assert "--audio-part audio_url" in refused.output and "Traceback" not in refused.output

    model.strict = False  # vLLM's audio_url: FLAC as stored
    result = infer(
        *args, "--out", str(tmp_path / "f"), "--audio-format", "flac", "--audio-part", "audio_url"
    )
    assert result.exit_code == 0, result.output
    for record in read_lines(tmp_path / "f" / "es" / "m.jsonl"):
        row = expected[(record["lang"], str(record["ID"]))]
        assert json.loads(record["output"])["audio"] == [samples_sha256(row["audio"]["bytes"])]
        assert json.loads(record["output"])["formats"] == ["flac"]


def test_a_strict_server_refusing_every_row_stops_the_run(demo_release, model, tmp_path):
    """audio_url against a strict OpenAI server: 400 each time. The run stops after a few
    rows, printing the server's message, and says a rerun would be refused the same way."""
    model.strict = True
    out = tmp_path / "out"
    args = [
        "--dataset", str(demo_release["staged"]), "--model", "m", "--endpoint", model.base_url,
        "--out", str(out), "--audio-part", "audio_url", "--concurrency", "16",
    ]  # fmt: skip
    result = infer(*args)
    assert result.exit_code == 1
    assert f"stopped after {REFUSALS_TO_STOP} requests refused in a row" in result.output
    assert "answered 400: Invalid value at 'messages[0].content[" in result.output
    assert "rerun with --continue to retry" not in result.output
    assert "would be refused the same way" in result.output
    # a few rows, not all 137: until a first answer one request is in flight at a time,
    # each sent and judged before the next: exactly those refused in a row
    assert model.calls == REFUSALS_TO_STOP
    records = all_output_lines(out)
    assert REFUSALS_TO_STOP <= len(records) == model.calls
    assert all(r["output"] is None and "answered 400: Invalid value" in r["error"] for r in records)


def test_text_only_sends_no_audio(demo_release, model, tmp_path):
    staged = demo_release["staged"]
    expected = staged_rows(staged, "en")
    out = tmp_path / "out"
    result = infer(
        "--dataset", str(staged), "--lang", "en", "--model", "m", "--endpoint", model.base_url,
        "--out", str(out), "--text-only",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = read_lines(out / "text-only" / "en" / "m.jsonl")
    assert len(records) == len(expected)
    for record in records:
        row = expected[(record["lang"], str(record["ID"]))]
        heard = json.loads(record["output"])
        assert heard["audio"] == [] and heard["order"] == ["text"]
        if row["modality"] == "text":
            assert heard["text"] == [row["user_text"]]
        else:  # what was spoken, then the typed follow-up
            spoken = row["transcript"] or row["prompt_text"]
            assert heard["text"] == [f"{spoken}\n{row['user_text']}"]
    assert all(isinstance(b["messages"][0]["content"], str) for b in model.bodies)


def test_retries_then_error_rows_then_continue(demo_release, model, tmp_path):
    staged = demo_release["staged"]
    out = tmp_path / "out"
    args = [
        "--dataset", str(staged), "--lang", "de", "--model", "m", "--endpoint", model.base_url,
        "--out", str(out), "--backoff-s", "0", "--concurrency", "2",
    ]  # fmt: skip
    # retried: every row still answered, even one that meets all five failures (the first
    # row is alone in flight until an answer arrives) with the 6 attempts of --max-retries 5
    model.fail_429, model.fail_500 = 3, 2
    result = infer(*args, "--max-retries", "5")
    assert result.exit_code == 0, result.output
    records = read_lines(out / "de" / "m.jsonl")
    n = len(records)
    assert all(isinstance(r["output"], str) for r in records)
    assert sum(r["meta"]["attempts"] for r in records) == n + 5

    model.fail_500 = 10**6  # every attempt fails: error rows, exit status 1
    result = infer(*args, "--overwrite", "--max-retries", "1")
    assert result.exit_code == 1
    records = read_lines(out / "de" / "m.jsonl")
    assert len(records) == n and all(r["output"] is None and r["error"] for r in records)
    assert "rerun with --continue" in result.output

    model.fail_500 = 0  # --continue retries the error rows, without duplicating a line
    result = infer(*args, "--continue")
    assert result.exit_code == 0, result.output
    records = read_lines(out / "de" / "m.jsonl")
    assert len(records) == n and all(isinstance(r["output"], str) for r in records)
    assert len({r["ID"] for r in records}) == n

    result = infer(*args)  # no --continue: refuses to append to an existing run
    assert result.exit_code != 0 and "--continue" in result.output


def test_unreachable_endpoint_gives_error_rows(demo_release, tmp_path):
    result = infer(
        "--dataset", str(demo_release["staged"]), "--model", "m", "--out", str(tmp_path / "o"),
        "--endpoint", "http://127.0.0.1:9/v1", "--max-retries", "0", "--lang", "fr",
    )  # fmt: skip
    # nothing listens: every row is an error row, the replica is set aside, exit 1
    assert result.exit_code == 1
    records = all_output_lines(tmp_path / "o")
    assert records and all(r["output"] is None for r in records)
    assert any("set aside" in r["error"] for r in records)


def test_resume_after_kill(demo_release, tmp_path):
    """infer in a subprocess, killed after some lines; --continue completes it exactly."""
    model = AudioModel(delay_s=0.05)
    try:
        staged = demo_release["staged"]
        out = tmp_path / "out"
        command = [
            sys.executable, "-P", "-c", "from redvox.release.evaluation.evaluate import cli; cli()",
            "infer", "--dataset", str(staged), "--model", "m", "--endpoint", model.base_url,
            "--out", str(out), "--concurrency", "4", "--continue",
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(len(read_lines(p)) for p in out.rglob("*.jsonl")) >= 20:
                break
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        before = all_output_lines(out)
        assert 20 <= len(before) < 137, "the run ended before it could be killed"

        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        records = all_output_lines(out)
        keys = [(r["lang"], r["ID"]) for r in records]
        assert len(keys) == len(set(keys)) == 137  # no duplicate, no lost row
        summary = json.loads(result.stdout.split("infer: ", 1)[1].splitlines()[0])
        assert summary["skipped"] >= len(before) - 1  # a line cut by the kill is asked again
        assert summary["answered"] + summary["skipped"] == 137
    finally:
        model.stop()


def test_load_spread_over_replicas_with_one_killed(demo_release, tmp_path):
    replicas = [AudioModel(delay_s=0.01) for _ in range(3)]
    replicas[1].die_after = 4
    try:
        out = tmp_path / "out"
        args = ["--dataset", str(demo_release["staged"]), "--model", "m", "--out", str(out)]
        for replica in replicas:
            args += ["--endpoint", replica.base_url]
        result = infer(*args, "--concurrency", "6", "--backoff-s", "0")
        assert result.exit_code == 0, result.output
        records = all_output_lines(out)
        assert len(records) == 137 and all(isinstance(r["output"], str) for r in records)
        hosts = [r.base_url.removeprefix("http://").removesuffix("/v1") for r in replicas]
        served = [sum(r["meta"]["endpoint"] == host for r in records) for host in hosts]
        assert served[1] <= 4 and served[0] + served[2] >= 137 - 4  # answered before it died
        calls = [replica.calls for replica in replicas]
        # set aside after 3 failures in a row (plus the requests already in flight to it)
        assert replicas[1].dead and calls[1] <= 4 + 3 + 6, calls
        assert min(calls[0], calls[2]) > 20, calls  # the rest went to the others, spread
        assert "set aside after repeated failures" in result.output
    finally:
        for replica in replicas:
            replica.stop()


def test_all_replicas_set_aside_gives_error_rows(demo_release, tmp_path):
    replicas = [AudioModel() for _ in range(2)]
    for replica in replicas:
        replica.die_after = 2
    try:
        out = tmp_path / "out"
        args = ["--dataset", str(demo_release["staged"]), "--model", "m", "--out", str(out)]
        for replica in replicas:
            args += ["--endpoint", replica.base_url]
        result = infer(*args, "--backoff-s", "0", "--lang", "en", "--concurrency", "2")
        assert result.exit_code == 1
        records = all_output_lines(out)
        errors = [r for r in records if r["output"] is None]
        assert len(records) == len(staged_rows(demo_release["staged"], "en")) and errors
        assert "every endpoint set aside" in errors[-1]["error"]
    finally:
        for replica in replicas:
            replica.stop()


def test_shared_clip_is_encoded_once():
    clip = (ROOT / "sources").rglob("*.flac")
    data = next(clip, None)
    if data is None:
        pytest.skip("no FLAC in the demo sources")
    encoder = AudioEncoder()
    style = RequestStyle(model="m")
    rows = [
        {"modality": "text", "user_text": f"q{i}", "audio": {"bytes": data.read_bytes()}}
        for i in range(5)
    ]
    bodies = [request_body(row, style, encoder) for row in rows]
    assert (encoder.encoded, encoder.reused) == (1, 4)
    assert bodies[0]["messages"][0]["content"][1] == bodies[4]["messages"][0]["content"][1]

"""Load a staged RedVox folder one way and print its rows as one JSON object.

Run by tests/test_loading_paths.py as a subprocess, with whichever Python (and
`datasets`) the path under test needs; it imports nothing from RedVox.

    python loading_probe.py STAGED WAY [CONFIG ...]

WAY is `parquet` (the card's parquet configs), `script` (loading_script/redvox.py
with data_dir= and trust_remote_code=True), `stream` (streaming, the audio cast to
`Audio(decode=False)`), `hub` (STAGED is REPO@REVISION: the parquet configs
of that revision on the Hub HF_ENDPOINT names) or `hub-stream` (the same, streamed).
Each row is printed without its audio, plus the sha256 of the audio bytes and
the frames soundfile decodes from them (the card's torchcodec-free recipe);
`decoded` is, for the first row of each config, the frames `datasets` < 4 itself
decodes when librosa is installed (None otherwise).
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import io
import json
import sys
import tempfile

import datasets
import soundfile as sf
from datasets import Audio, load_dataset

CONFIGS = ["all", "en", "de", "es", "fr", "it"]


def rows_of(ds) -> list[dict]:
    out = []
    for row in ds:
        audio = row.pop("audio")
        data = audio["bytes"]
        row["audio_sha256"] = hashlib.sha256(data).hexdigest()
        row["audio_path"] = audio["path"]
        row["audio_frames"] = sf.info(io.BytesIO(data)).frames
        samples, _ = sf.read(io.BytesIO(data), dtype="int16")
        row["audio_samples_sha256"] = hashlib.sha256(samples.tobytes()).hexdigest()
        out.append(row)
    return out


def decoded_frames(ds) -> int | None:
    """Frames of the first row as `datasets` < 4 decodes it (it needs librosa and
    soundfile); None on `datasets` >= 4 or without librosa."""
    if int(datasets.__version__.split(".")[0]) >= 4 or importlib.util.find_spec("librosa") is None:
        return None
    return len(ds[0]["audio"]["array"])


def main(staged: str, way: str, configs: list[str]) -> None:
    cache = tempfile.mkdtemp(prefix="redvox-probe-")
    result = {"datasets": datasets.__version__, "configs": {}, "decoded": {}}
    for cfg in configs:
        if way in ("stream", "hub-stream"):
            where, _, revision = staged.partition("@")
            ds = load_dataset(where, cfg, split="test", revision=revision or None, streaming=True)
            result["configs"][cfg] = rows_of(ds.cast_column("audio", Audio(decode=False)))
            # as the card's recipe: read to the end, dropped and collected while Python
            # runs (a pyarrow reader thread alive at exit aborts it; datasets issue #7566)
            del ds
            gc.collect()
            continue
        if way == "hub":
            repo_id, _, revision = staged.partition("@")
            ds = load_dataset(repo_id, cfg, split="test", revision=revision, cache_dir=cache)
        elif way == "script":
            ds = load_dataset(
                f"{staged}/loading_script/redvox.py",
                cfg,
                data_dir=staged,
                split="test",
                trust_remote_code=True,
                cache_dir=cache,
            )
        else:
            ds = load_dataset(staged, cfg, split="test", cache_dir=cache)
        result["decoded"][cfg] = decoded_frames(ds)
        result["configs"][cfg] = rows_of(ds.cast_column("audio", Audio(decode=False)))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:] or CONFIGS)

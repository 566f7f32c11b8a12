"""The Hub round trip with the real libraries, against the stand-in Hub on loopback
(tests/hub_server.py): `redvox release push` publishes the demo release v1.0.0, a
participant withdraws, `redvox release push` publishes the next MAJOR version; then, with
HF_ENDPOINT set, v1.0.0 is read back as a user would, while main already holds v2:

- `load_dataset(REPO, "en", split="test", revision="v1.0.0")` with the pinned `datasets`
  and with `datasets` 3.6; the card's streaming recipe without decoding with `datasets` 2.21;
- `hf download` of the whole repo, then the loading script with `datasets` 3.6;
- `hf download --include "evaluation/*"`;
- `evaluate infer --dataset REPO --revision v1.0.0` against the stand-in model.

Rows are compared with the staged folder's by content: every column of every row, the
sha256 of the audio bytes and of the samples soundfile decodes from them. The stand-in
lists at most 5 tree entries per page, so the clients must follow the `Link` pages.
One push serves the whole module.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from click.testing import CliRunner
from hub_server import HubServer
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    GatedRepoError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from model_server import AudioModel

from redvox.builder import versions
from redvox.builder.cli import main
from redvox.builder.pseudonym import load_pseudonym_key, pseudonymize
from redvox.release.hub.push import local_oids, remote_oids, same_files, use_request_timeout
from redvox.release.hub.stage import stage_release, staged_files
from redvox.release.hub.withdraw import withdrawal_version
from redvox.schemas import DEMO_CONFIG, InputConfig

# huggingface_hub 2.4 itself triggers httpx2's deprecation of raw `data=` uploads.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
REPO = "FBK-MT/RedVox"
OWNER, RESEARCHER, STRANGER = "hf_owner_token", "hf_researcher_token", "hf_stranger_token"
PARTICIPANT = "demo-p01"  # consented to public release, records in English
PROBE = Path(__file__).resolve().parent / "loading_probe.py"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def hub():
    with HubServer() as server:
        server.state.page_size = 5
        yield server


@pytest.fixture(scope="module")
def published(hub, demo_release, copy_demo_cache, tmp_path_factory) -> dict:
    """v1.0.0 pushed; a withdrawal recorded and the next MAJOR built (`release withdraw`),
    declared for this test only, staged and pushed."""
    tmp = tmp_path_factory.mktemp("roundtrip")
    demo = tmp / "demo"
    shutil.copytree(DEMO_CONFIG.parent, demo, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "out"
    copy_demo_cache(out / ".cache")
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_ENDPOINT", hub.url)
        mp.setenv("HF_TOKEN", OWNER)
        # HfApi() and hf_hub_url() without endpoint= read these, set at import time
        mp.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
        template = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
        mp.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        mp.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
        use_request_timeout(30)
        v1 = demo_release["staged"]
        pushed = runner.invoke(main, ["release", "push", str(v1), "--repo-id", REPO, "--public"])
        assert pushed.exit_code == 0, pushed.output
        withdraw = [BIN / "redvox", "release", "withdraw", PARTICIPANT, "--config",
                    demo / "config.yaml", "--out", out, "--date", "2026-07-01", "--repo-id", REPO]  # fmt: skip
        withdrawn = run(withdraw, user_env(hub, tmp / "home", OWNER))
        assert withdrawn.returncode == 0, withdrawn.stdout[-3000:] + withdrawn.stderr[-3000:]
        # The maintainer would now declare it in builder/versions.py; here, for this test only.
        new = withdrawal_version(versions.get_version())
        mp.setitem(versions.VERSIONS, new.version, new)
        version_dir = out / new.version
        inputs = demo / "config.yaml"  # the withdrawn copy: the release steps re-read it
        represent = ["release", "represent", str(version_dir), "--override-gate", "demo corpus",
                     "--config", str(inputs)]  # fmt: skip
        represented = runner.invoke(main, represent)
        assert represented.exit_code == 0, represented.output
        stage_release(version_dir, REPO, version_dir / "staged", synthetic=True,
                      config=InputConfig.load(inputs))  # fmt: skip
        push = ["release", "push", str(version_dir / "staged"), "--repo-id", REPO, "--public",
                "--config", str(inputs)]  # fmt: skip
        released = runner.invoke(main, push)  # verifies the staged folder, then pushes
        assert released.exit_code == 0, released.output
        use_request_timeout(120)
    hub.state.grant(REPO, RESEARCHER)
    config = InputConfig.load(demo / "config.yaml")
    return {
        "v1": v1,
        "v2": out / new.version / "staged",
        "new": new,
        "withdraw_output": withdrawn.stdout,
        "user_id": pseudonymize(load_pseudonym_key(config.pseudonym_key_file), PARTICIPANT),
        "tmp": tmp,
    }


def user_env(hub, home: Path, token: str | None = RESEARCHER) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_DISABLE_XET": "1"}
    env |= {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_DATASETS_CACHE": str(home / "datasets")}
    return env | ({"HF_TOKEN": token} if token else {})


def run(args: list, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def hf_download(hub, home: Path, dest: Path, *extra: str, token: str | None = RESEARCHER):
    args = [BIN / "hf", "download", REPO, "--repo-type", "dataset", "--revision", "v1.0.0",
            *extra, "--local-dir", dest]  # fmt: skip
    return run(args, user_env(hub, home, token))


def probe(python, hub, home: Path, where: str, way: str) -> list[dict]:
    done = run([python, PROBE, where, way, "en"], user_env(hub, home))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["configs"]["en"]


def audio_digests(data: bytes) -> dict:
    samples, _ = sf.read(io.BytesIO(data), dtype="int16")
    return {
        "audio_sha256": hashlib.sha256(data).hexdigest(),
        "audio_samples_sha256": hashlib.sha256(samples.tobytes()).hexdigest(),
        "audio_frames": len(samples),
    }


def staged_rows(staged: Path, lang: str = "en") -> list[dict]:
    """The rows of the staged shard as pyarrow reads them, the audio as its digests,
    in the JSON types the probe prints."""
    rows = []
    for shard in sorted((staged / "data" / lang).glob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            audio = row.pop("audio")
            rows.append(row | audio_digests(audio["bytes"]) | {"audio_path": audio["path"]})
    return json.loads(json.dumps(rows))


def same_rows(loaded: list[dict], staged: Path) -> None:
    expected = staged_rows(staged)
    assert len(loaded) == len(expected) > 0
    for got, want in zip(loaded, expected, strict=True):
        assert got == want, (got["entry_key"], want["entry_key"])


# --- gated access ----------------------------------------------------------------------


def test_a_download_without_token_or_without_access_is_refused_as_gated(published, hub, tmp_path):
    for token, status in ((False, 401), (STRANGER, 403)):
        with pytest.raises(GatedRepoError) as refused:
            hf_hub_download(REPO, "README.md", repo_type="dataset", revision="v1.0.0",
                            endpoint=hub.url, token=token, cache_dir=tmp_path / "c")  # fmt: skip
        assert refused.value.response.status_code == status
    anonymous = hf_download(hub, tmp_path / "home", tmp_path / "anon", token=None)
    assert anonymous.returncode != 0
    # the CLI's words for a GatedRepoError
    assert f"Dataset '{REPO}' requires approval" in anonymous.stdout + anonymous.stderr
    assert not any(p.is_file() for p in (tmp_path / "anon").rglob("*") if ".cache" not in p.parts)
    refused = run([sys.executable, PROBE, f"{REPO}@v1.0.0", "hub", "en"],
                  user_env(hub, tmp_path / "home", STRANGER))  # fmt: skip
    # datasets' words for the GatedRepoError it got
    assert f"Dataset '{REPO}' is a gated dataset on the Hub" in refused.stderr, refused.stderr[
        -2000:
    ]
    granted = hf_hub_download(REPO, "README.md", repo_type="dataset", revision="v1.0.0",
                              endpoint=hub.url, token=RESEARCHER, cache_dir=tmp_path / "c")  # fmt: skip
    assert Path(granted).read_bytes() == (published["v1"] / "README.md").read_bytes()


def test_the_stand_in_answers_paths_info_folders_and_unknown_names_as_the_hub(published, hub):
    api = HfApi(endpoint=hub.url, token=RESEARCHER)
    v1 = published["v1"]
    info = api.get_paths_info(REPO, ["README.md", "data/en", "nope"], repo_type="dataset",
                              revision="v1.0.0")  # fmt: skip
    assert [type(i).__name__ for i in info] == ["RepoFile", "RepoFolder"]
    assert info[0].size == (v1 / "README.md").stat().st_size
    top = {e.path for e in api.list_repo_tree(REPO, repo_type="dataset", revision="v1.0.0")}
    assert top == {p.name for p in v1.iterdir()}
    shard = "data/en/test-00000-of-00001.parquet"
    with pytest.raises(RevisionNotFoundError):
        api.hf_hub_download(REPO, shard, repo_type="dataset", revision="v9.9.9")
    with pytest.raises(RemoteEntryNotFoundError):
        api.hf_hub_download(REPO, "data/xx/none.parquet", repo_type="dataset", revision="v1.0.0")
    # a private repo (the full set's kind) does not exist for anyone but its owner
    HfApi(endpoint=hub.url, token=OWNER).create_repo(
        REPO + "-full", repo_type="dataset", private=True
    )
    for token in (False, STRANGER):
        with pytest.raises(RepositoryNotFoundError):
            HfApi(endpoint=hub.url, token=token).dataset_info(REPO + "-full")
    assert HfApi(endpoint=hub.url, token=OWNER).dataset_info(REPO + "-full").private


# --- v1.0.0, read back ------------------------------------------------------------------


def test_pinned_datasets_loads_v1_from_the_hub_as_staged(published, hub, tmp_path):
    rows = probe(sys.executable, hub, tmp_path / "home", f"{REPO}@v1.0.0", "hub")
    same_rows(rows, published["v1"])
    assert published["user_id"] in {r["user_id"] for r in rows}  # main no longer has them


@pytest.mark.parametrize(
    ("python", "way"),
    [("old_datasets_python", "hub"), ("datasets_2_python", "hub-stream")],
    ids=["datasets-3.6-parquet", "datasets-2.21-card-streaming-recipe"],
)
def test_older_datasets_load_v1_from_the_hub_as_staged(
    published, hub, tmp_path, request, python, way
):
    rows = probe(request.getfixturevalue(python), hub, tmp_path / "home", f"{REPO}@v1.0.0", way)
    same_rows(rows, published["v1"])


def test_datasets_3_6_reads_a_hub_download_through_the_loading_script(
    published, hub, tmp_path, old_datasets_python
):
    local = tmp_path / "redvox"
    done = hf_download(hub, tmp_path / "home", local)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [f for f in staged_files(local) if not f.startswith(".cache/")] == staged_files(
        published["v1"]
    )
    rows = probe(old_datasets_python, hub, tmp_path / "home", str(local), "script")
    same_rows(rows, published["v1"])


@pytest.fixture(scope="module")
def evaluation_download(published, hub, tmp_path_factory) -> Path:
    """`hf download REPO --repo-type dataset --revision v1.0.0 --include "evaluation/*"`."""
    tmp = tmp_path_factory.mktemp("evaluation-download")
    done = hf_download(hub, tmp / "home", tmp / "redvox", "--include", "evaluation/*")
    assert done.returncode == 0, done.stderr[-2000:]
    return tmp / "redvox"


def test_hf_download_of_the_evaluation_folder_gets_exactly_the_staged_one(
    published, evaluation_download
):
    got = [f for f in staged_files(evaluation_download) if not f.startswith(".cache/")]
    want = [f for f in staged_files(published["v1"]) if f.startswith("evaluation/")]
    assert got == want and len(want) > 5
    for rel in want:
        assert (evaluation_download / rel).read_bytes() == (published["v1"] / rel).read_bytes()


def test_the_downloaded_evaluate_infer_reads_v1_from_the_hub(
    published, hub, evaluation_download, tmp_path
):
    model = AudioModel()
    try:
        out = tmp_path / "outputs"
        args = [sys.executable, "evaluation/evaluate.py", "infer", "--dataset", REPO,
                "--revision", "v1.0.0", "--lang", "en", "--model", "m",
                "--endpoint", model.base_url, "--out", out, "--backoff-s", "0"]  # fmt: skip
        done = run(args, user_env(hub, tmp_path / "home"), cwd=evaluation_download)
    finally:
        model.stop()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for p in sorted(out.rglob("*.jsonl")) for line in p.read_text().splitlines()]
    records = [json.loads(line) for line in lines]
    expected = {(r["lang"], r["ID"]): r for r in staged_rows(published["v1"])}
    summary = done.stdout[-1500:] + done.stderr[-1500:]
    assert sorted((r["lang"], r["ID"]) for r in records) == sorted(expected), summary
    for record in records:
        row = expected[(record["lang"], record["ID"])]
        heard = json.loads(record["output"])  # what the model decoded from the request
        assert heard["audio"] == [row["audio_samples_sha256"]]
        assert heard["text"] == [row["user_text"]]
        columns = [c for c in row if not c.startswith("audio")]
        assert {c: record[c] for c in columns} == {c: row[c] for c in columns}


# --- withdrawal and the next MAJOR --------------------------------------------------------


def test_the_new_major_leaves_v1_in_place_and_main_without_the_participant(
    published, hub, tmp_path
):
    api = HfApi(endpoint=hub.url, token=RESEARCHER)
    refs = api.list_repo_refs(REPO, repo_type="dataset")
    tags = {t.name: t.target_commit for t in refs.tags}
    new = published["new"]
    assert set(tags) == {"v1.0.0", new.tag} and tags["v1.0.0"] != tags[new.tag]
    assert [b.target_commit for b in refs.branches] == [tags[new.tag]]
    v1 = published["v1"]
    assert same_files(local_oids(v1, staged_files(v1)), remote_oids(api, REPO, "v1.0.0"))
    v2 = published["v2"]
    assert same_files(local_oids(v2, staged_files(v2)), remote_oids(api, REPO, "main"))
    user_id = published["user_id"]

    def user_ids_at(revision: str) -> list[str]:
        shards = [f for f in api.list_repo_files(REPO, repo_type="dataset", revision=revision)
                  if f.startswith("data/") and f.endswith(".parquet")]  # fmt: skip
        assert shards
        ids = []
        for shard in shards:
            path = api.hf_hub_download(REPO, shard, repo_type="dataset", revision=revision,
                                       cache_dir=tmp_path / "c")  # fmt: skip
            ids += pq.read_table(path, columns=["user_id"]).column("user_id").to_pylist()
        return ids

    at_main, at_v1 = user_ids_at("main"), user_ids_at("v1.0.0")
    assert user_id not in at_main and len(at_main) > 0
    assert user_id in at_v1
    # the withdrawal reported where the participant's rows still are on the Hub
    assert f"{REPO}@v1.0.0" in published["withdraw_output"]

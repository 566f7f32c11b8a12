"""After the build, every release step re-checks consent the way the build reads it:
a late withdrawal under any spelling of the key, a set holding someone without
consent for it (whatever its folder is called), or a record of the build's inputs
pointed at an older registry stops represent, stage, verify and push, and nothing
reaches the (stand-in) Hub."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import huggingface_hub.constants
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hub_server import HubServer

from redvox.builder.cli import main
from redvox.builder.provenance import BUILD_INPUTS
from redvox.builder.pseudonym import load_pseudonym_key, pseudonymize
from redvox.schemas import DEMO_CONFIG, InputConfig

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
REPO = "FBK-MT/RedVox"
WITHDRAWN = "demo-p01"  # public in the demo build; records in English
EN = "data/en/test-00000-of-00001.parquet"
# The late withdrawal's key, as an operator might type or paste it.
KEY_SPELLINGS = {
    "title case": "Demo-P01",
    "zero-width space": "demo-p01\u200b",
    "inner space": "demo- p01",
    "cyrillic er": "demo-\u044001",
    "exact": "demo-p01",
}


@pytest.fixture(autouse=True)
def no_xet(monkeypatch):
    # The stand-in speaks the classic LFS protocol only (were a push to get through).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)


@pytest.fixture
def released(demo_release, tmp_path) -> dict:
    """A private copy of the demo corpus and of its built, represented and staged 1.0.0
    (same bytes: the build's recorded input hashes hold for the copy)."""
    corpus = tmp_path / "demo"
    shutil.copytree(DEMO_CONFIG.parent, corpus, ignore=shutil.ignore_patterns("__pycache__"))
    version_dir = tmp_path / "out" / "1.0.0"
    shutil.copytree(demo_release["version_dir"], version_dir)
    return {
        "config": corpus / "config.yaml",
        "consent": corpus / "consent.csv",
        "version_dir": version_dir,
        "staged": version_dir / "staged",
    }


def redvox(*args, env=None):
    return CliRunner(env={"HF_TOKEN": None, **(env or {})}).invoke(main, [str(a) for a in args])


def one_line_refusal(result) -> str:
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert "Traceback" not in result.output
    return result.output


def push_refused(released: dict, hub: HubServer, *extra) -> str:
    env = {"HF_TOKEN": "test-token", "HF_ENDPOINT": hub.url}
    result = redvox(
        "release", "push", released["staged"], "--repo-id", REPO, "--config", released["config"],
        *extra, env=env,
    )  # fmt: skip
    output = one_line_refusal(result)
    # Nothing reached the Hub: no repo, no commit, no upload, no tag, not even a write.
    assert hub.state.repos == {} and hub.state.lfs == {}
    assert [c for c in hub.state.calls if c.method != "GET"] == [], hub.state.calls
    return output


def user_id(released: dict, key: str) -> str:
    config = InputConfig.load(released["config"])
    return pseudonymize(load_pseudonym_key(config.pseudonym_key_file), key)


@pytest.mark.parametrize("spelling", KEY_SPELLINGS)
def test_a_late_withdrawal_in_any_spelling_stops_stage_verify_and_push(released, spelling):
    assert user_id(released, WITHDRAWN) in set(
        pq.read_table(released["staged"] / EN, columns=["user_id"]).column("user_id").to_pylist()
    )
    with released["consent"].open("a", encoding="utf-8") as fh:
        fh.write(f"{KEY_SPELLINGS[spelling]},yes,yes,2026-06-01,v1.0\n")
    # The build itself refuses such a registry (or builds without the participant).
    expected = "rebuild" if spelling == "exact" else "consent.csv:12: participant_key"

    restaged = released["version_dir"].parent / "restaged"
    staged = one_line_refusal(
        redvox("release", "stage", released["version_dir"], "--out", restaged,
               "--config", released["config"])
    )  # fmt: skip
    assert expected in staged and not restaged.exists()
    # --other-inputs never lets a changed registry through.
    anyway = redvox("release", "stage", released["version_dir"], "--out", restaged,
                    "--config", released["config"], "--other-inputs")  # fmt: skip
    assert expected in one_line_refusal(anyway) and not restaged.exists()

    verified = one_line_refusal(
        redvox("release", "verify", released["staged"], "--config", released["config"])
    )
    assert expected in verified and "verified (" not in verified

    with HubServer() as hub:
        assert expected in push_refused(released, hub)


def test_a_staged_folder_away_from_its_build_is_checked_against_the_registry_today(
    released, tmp_path
):
    # No build to compare hashes with: the user_ids are checked against today's consent.
    away = tmp_path / "elsewhere" / "staged"
    shutil.copytree(released["staged"], away)
    with released["consent"].open("a", encoding="utf-8") as fh:
        fh.write(f"{WITHDRAWN},yes,yes,2026-06-01,v1.0\n")
    result = redvox("release", "verify", away, "--config", released["config"])
    assert result.exit_code == 1 and "verification FAILED" in result.output
    assert f"user_id {user_id(released, WITHDRAWN)}" in result.output
    assert "[consent]" in result.output


def test_the_full_set_copied_over_the_public_one_is_refused_before_staging(released):
    version_dir = released["version_dir"]
    shutil.rmtree(version_dir / "public")
    shutil.copytree(version_dir / "full", version_dir / "public")
    withheld = user_id(released, "demo-p10")  # participation only: in full, not in public

    represented = one_line_refusal(
        redvox("release", "represent", version_dir, "--override-gate", "demo",
               "--config", released["config"])
    )  # fmt: skip
    assert "have no consent for the public set" in represented
    assert "participation_only" in represented or withheld in represented

    restaged = version_dir.parent / "restaged"
    staged = one_line_refusal(
        redvox("release", "stage", version_dir, "--out", restaged, "--config", released["config"])
    )
    assert "have no consent for the public set" in staged and not restaged.exists()


def test_a_staged_public_folder_holding_full_set_rows_is_not_verified_or_pushed(released):
    staged = released["staged"]
    shutil.copyfile(released["version_dir"] / "full" / EN, staged / EN)
    withheld = user_id(released, "demo-p10")
    verified = redvox("release", "verify", staged, "--config", released["config"])
    assert verified.exit_code == 1 and f"[consent] user_id {withheld}" in verified.output
    with HubServer() as hub:
        pushed = push_refused(released, hub)
    assert "does not verify, refusing to push" in pushed and withheld in pushed


def test_a_record_of_the_inputs_pointed_at_an_older_registry_is_refused(released, tmp_path):
    older = tmp_path / "consent-before-the-withdrawal.csv"
    shutil.copyfile(released["consent"], older)
    with released["consent"].open("a", encoding="utf-8") as fh:
        fh.write(f"{WITHDRAWN},yes,yes,2026-06-01,v1.0\n")
    record = released["version_dir"] / BUILD_INPUTS
    body = json.loads(record.read_text())
    # The operator's edit: the old registry's path and hash, as a record of the inputs.
    body["config"] = {"consent": str(older)}
    body["input_hashes"]["consent"] = hashlib.sha256(older.read_bytes()).hexdigest()
    record.write_text(json.dumps(body))
    with HubServer() as hub:
        pushed = push_refused(released, hub)
    assert "consent registry" in pushed and "rebuild" in pushed


def test_the_unchanged_copy_still_stages_and_verifies(released):
    # The control: the checks above refuse because of what changed, not the copy itself.
    restaged = released["version_dir"].parent / "restaged"
    result = redvox("release", "stage", released["version_dir"], "--out", restaged,
                    "--config", released["config"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "verified (" in result.output and Path(restaged / EN).is_file()


@pytest.mark.parametrize(
    "row, field",
    [
        ('demo-p01,"yes,yes,2026-06-01,v1.0\n', ""),  # unclosed quote
        ("demo-p01,yes,yes,2026-06-01,v1.0,by e-mail\n", ""),  # extra cell
        ("demo-p01,yes,yes,null,v1.0\n", " withdrawal_date:"),  # an exported empty value
        ("demo-p42,yes,yes,2026-06-01,v1.0\n", " participant_key:"),  # an unknown key
    ],
)
def test_a_registry_row_the_build_would_refuse_stops_represent_stage_and_verify(
    released, row, field
):
    with released["consent"].open("a", encoding="utf-8") as fh:
        fh.write(row)
    where = f"consent.csv:12:{field}"
    for args in (
        ("represent", released["version_dir"], "--override-gate", "demo"),
        ("stage", released["version_dir"], "--out", released["version_dir"].parent / "again"),
        ("verify", released["staged"]),
    ):
        output = one_line_refusal(redvox("release", *args, "--config", released["config"]))
        assert where in output and "nothing is released" in output, (args[0], output)
    assert not (released["version_dir"].parent / "again").exists()


def test_the_card_says_how_free_text_was_screened(demo_release):
    from redvox.release.hub.card import read_card

    _, body = read_card(demo_release["staged"])
    assert "free text was screened for e-mail addresses, URLs, phone numbers" in body

"""Push against a stand-in Hub on loopback: call order, failures, reruns, the token."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass

import huggingface_hub.constants
import pytest
from click.testing import CliRunner
from hub_server import HubServer
from huggingface_hub import HfApi

from redvox.release.hub import push as push_module
from redvox.release.hub.card import read_card, render_card
from redvox.release.hub.push import PushError, Retry, plan_push, push_release, use_request_timeout

# huggingface_hub 2.4 itself triggers httpx2's deprecation of raw `data=` uploads.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
REPO = "FBK-MT/RedVox"  # the id the demo release is staged for
NO_WAIT = Retry(attempts=3, backoff_s=0, sleep=lambda _: None)


@dataclass
class Verified:
    ok: bool = True

    def summary(self) -> str:
        return "ok" if self.ok else "  [consent] row 3: user_id has no valid consent"


def passes(staged, **kwargs) -> Verified:
    return Verified(True)


@pytest.fixture(autouse=True)
def no_xet(monkeypatch):
    # The stand-in speaks the classic LFS protocol only.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    use_request_timeout(30)
    yield
    use_request_timeout(120)


@pytest.fixture
def hub():
    with HubServer() as server:
        yield server


def api(hub) -> HfApi:
    return HfApi(endpoint=hub.url, token="test-token")


def push(hub, staged, public=True, retry=NO_WAIT, verify=passes):
    return push_release(
        staged, REPO, public=public, api=api(hub), verify=verify, retry=retry, echo=lambda _: None
    )


def writes(hub) -> list[str]:
    """The state-changing calls, settings split into what they changed."""
    names = []
    for call in hub.state.calls:
        if call.endpoint == "create":
            names.append(f"create:{call.body.get('visibility')}")
        elif call.endpoint == "settings":
            names += [f"{k}:{v}" for k, v in call.body.items()]
        elif call.endpoint in ("commit", "tag"):
            names.append(call.endpoint)
    return names


def test_push_goes_private_then_commit_then_gated_then_public_then_tag(hub, demo_release):
    staged = demo_release["staged"]
    commit = push(hub, staged)
    assert writes(hub) == ["create:private", "commit", "gated:manual", "visibility:public", "tag"]
    repo = hub.state.repos[REPO]
    assert (repo.private, repo.gated, repo.tags) == (False, "manual", {"v1.0.0": commit})
    assert [c["title"] for c in repo.commits] == ["RedVox v1.0.0"]
    files = repo.files_at("v1.0.0")
    assert set(files) == {p for p, _ in plan_push(staged, REPO, True).files}
    assert (
        files["data/en/test-00000-of-00001.parquet"]["data"]
        == (staged / "data/en/test-00000-of-00001.parquet").read_bytes()
    )
    assert not any(p.endswith("RedVox.py") for p in files)
    # every Hub API call is authenticated; LFS uploads go to pre-signed URLs
    api_calls = [c for c in hub.state.calls if c.endpoint != "lfs-upload"]
    assert {c.authorization for c in api_calls} == {"Bearer test-token"}


def test_without_public_the_repo_stays_private_and_gated(hub, demo_release):
    push(hub, demo_release["staged"], public=False)
    assert writes(hub) == ["create:private", "commit", "gated:manual", "tag"]
    assert hub.state.repos[REPO].private


def test_an_existing_public_repo_is_gated_before_the_commit(hub, demo_release):
    api(hub).create_repo(REPO, repo_type="dataset", private=False)  # public, not gated
    hub.state.calls.clear()
    commit = push(hub, demo_release["staged"])
    # Gating after the commit would leave the data public and ungated in between.
    assert writes(hub) == ["create:private", "gated:manual", "commit", "visibility:public", "tag"]
    repo = hub.state.repos[REPO]
    assert (repo.private, repo.gated, repo.tags) == (False, "manual", {"v1.0.0": commit})


def test_the_plan_says_an_existing_public_repo_is_gated_before_the_commit(demo_release):
    steps = plan_push(demo_release["staged"], REPO, True).steps()
    upload = next(i for i, s in enumerate(steps) if s.startswith("upload"))
    early = [s for s in steps[:upload] if "gated" in s]
    assert len(early) == 1 and "already exists and is public" in early[0]
    assert any("gated" in s for s in steps[upload + 1 :])  # the normal case: after the commit


def test_a_500_on_commit_is_retried_and_commits_once(hub, demo_release):
    hub.state.fail("commit", "500")
    push(hub, demo_release["staged"])
    assert writes(hub) == [
        "create:private",
        "commit",
        "commit",
        "gated:manual",
        "visibility:public",
        "tag",
    ]
    assert len(hub.state.repos[REPO].commits) == 1


def test_a_commit_whose_reply_was_lost_is_not_committed_twice(hub, demo_release):
    hub.state.fail("commit", "500-after")  # the Hub applied it, the client saw a 500
    push(hub, demo_release["staged"])
    repo = hub.state.repos[REPO]
    assert len(repo.commits) == 1
    assert repo.tags == {"v1.0.0": repo.head}


def test_a_commit_that_keeps_failing_stops_before_gating_and_a_rerun_finishes(hub, demo_release):
    staged = demo_release["staged"]
    hub.state.fail("commit", "500", "500", "500")
    with pytest.raises(PushError) as error:
        push(hub, staged)
    message = str(error.value)
    assert "step 'commit'" in message and "after 3 attempts" in message
    assert "tag v1.0.0 was not set" in message and "Rerun" in message
    repo = hub.state.repos[REPO]
    assert (repo.commits, repo.tags, repo.gated, repo.private) == ([], {}, False, True)

    push(hub, staged)
    assert len(repo.commits) == 1 and repo.tags == {"v1.0.0": repo.head}
    assert (repo.gated, repo.private) == ("manual", False)


def test_a_tag_that_times_out_is_retried_and_set_once(hub, demo_release):
    use_request_timeout(0.5)
    hub.state.fail("tag", "delay:1.5")  # the first request lands after the client gave up
    commit = push(hub, demo_release["staged"])
    repo = hub.state.repos[REPO]
    assert repo.tags == {"v1.0.0": commit}
    assert [c.endpoint for c in hub.state.calls].count("tag") >= 2
    assert len(repo.commits) == 1


def test_a_tag_that_keeps_failing_leaves_no_tag_and_a_rerun_only_tags(hub, demo_release):
    staged = demo_release["staged"]
    hub.state.fail("tag", "500", "500", "500")
    with pytest.raises(PushError, match="step 'tag'"):
        push(hub, staged)
    repo = hub.state.repos[REPO]
    assert repo.tags == {} and len(repo.commits) == 1
    hub.state.calls.clear()
    commit = push(hub, staged)
    assert writes(hub) == ["create:private", "gated:manual", "visibility:public", "tag"]
    assert repo.tags == {"v1.0.0": commit} and len(repo.commits) == 1


def test_a_second_push_of_the_same_release_changes_nothing(hub, demo_release):
    first = push(hub, demo_release["staged"])
    hub.state.calls.clear()
    assert push(hub, demo_release["staged"]) == first
    assert writes(hub) == ["gated:manual", "visibility:public"]


def test_an_existing_version_tag_is_never_moved(hub, demo_release, tmp_path):
    push(hub, demo_release["staged"])
    changed = tmp_path / "staged"
    shutil.copytree(demo_release["staged"], changed)
    meta, body = read_card(changed)
    (changed / "README.md").write_text(render_card(meta, body + "\nA late edit.\n"))
    hub.state.calls.clear()
    with pytest.raises(PushError, match="never moves"):
        push(hub, changed)
    assert writes(hub) == []


def test_push_refuses_what_does_not_verify(hub, demo_release):
    with pytest.raises(PushError, match="does not verify") as error:
        push(hub, demo_release["staged"], verify=lambda staged, **kw: Verified(False))
    assert "[consent]" in str(error.value)
    assert hub.state.calls == []


def _as_full_set(staged, tmp_path):
    copy = tmp_path / "full-staged"
    shutil.copytree(staged, copy)
    provenance = json.loads((copy / "redvox.json").read_text())
    provenance["set"] = "full"
    (copy / "redvox.json").write_text(json.dumps(provenance))
    return copy


def test_the_full_set_goes_to_a_private_repo_without_gating(hub, demo_release, tmp_path):
    full = _as_full_set(demo_release["staged"], tmp_path)
    with pytest.raises(PushError, match="private repo"):
        push(hub, full, public=True)
    push(hub, full, public=False)
    assert writes(hub) == ["create:private", "commit", "tag"]
    assert hub.state.repos[REPO].private and hub.state.repos[REPO].gated is False


def test_the_full_set_is_refused_for_a_repo_that_is_already_public(hub, demo_release, tmp_path):
    api(hub).create_repo(REPO, repo_type="dataset", private=False)
    full = _as_full_set(demo_release["staged"], tmp_path)
    with pytest.raises(PushError, match="is public"):
        push(hub, full, public=False)
    assert "commit" not in writes(hub)


def test_the_token_is_used_but_never_printed_or_logged(
    hub, demo_release, monkeypatch, caplog, tmp_path
):
    secret = "hf_RedVoxSecretToken0123456789"
    monkeypatch.setattr(
        push_module, "Retry", lambda: NO_WAIT
    )  # the CLI's retries, without the waits
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    caplog.set_level(logging.DEBUG)
    hub.state.fail("commit", "500")  # an error path prints too
    from redvox.builder.cli import main

    runner = CliRunner()
    ok = runner.invoke(main, ["release", "push", str(demo_release["staged"]), "--repo-id", REPO])
    assert ok.exit_code == 0, ok.output
    hub.state.fail("tag", "403")
    other = tmp_path / "staged-2"  # the same release, staged for a second repo
    shutil.copytree(demo_release["staged"], other)
    provenance = json.loads((other / "redvox.json").read_text())
    (other / "redvox.json").write_text(json.dumps({**provenance, "repo_id": REPO + "-2"}))
    with_error = runner.invoke(
        main,
        [
            "release",
            "push",
            str(other),
            "--build",
            str(demo_release["version_dir"]),
            "--repo-id",
            REPO + "-2",
            "--timeout",
            "5",
        ],
    )
    assert with_error.exit_code != 0 and "step 'tag'" in with_error.output
    api_calls = [c for c in hub.state.calls if c.endpoint != "lfs-upload"]
    assert {c.authorization for c in api_calls} == {f"Bearer {secret}"}
    for text in (ok.output, with_error.output, caplog.text):
        assert secret not in text


@pytest.mark.parametrize("bad", ["FBK MT/Red Vox", "FBK-MT/RedVox/extra", "RedVox", "a/b--c"])
def test_an_invalid_repo_id_is_refused_before_any_call_or_verify(hub, demo_release, bad):
    def verify(*args, **kwargs):
        raise AssertionError("verify must not run for an invalid repo id")

    with pytest.raises(PushError, match="is not a Hub repo id") as error:
        push_release(demo_release["staged"], bad, public=False, api=api(hub), verify=verify)
    assert "\n" not in str(error.value)
    assert hub.state.calls == []


def test_a_repo_id_other_than_the_staged_one_is_refused_before_any_call(hub, demo_release):
    def verify(*args, **kwargs):
        raise AssertionError("verify must not run for another repo id")

    with pytest.raises(PushError, match="staged for FBK-MT/RedVox, not FBK-MT/Other"):
        push_release(
            demo_release["staged"], "FBK-MT/Other", public=False, api=api(hub), verify=verify
        )
    assert hub.state.calls == []

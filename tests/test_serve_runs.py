"""A job of `redvox serve` runs its model once per partition of the rows: the public rows
first, then each withheld speaker's rows alone, each run in a fresh sandbox given only
its own rows. A hostile model that sees withheld rows can no longer write them into the
exact public cells, and one withheld speaker's clips can move that speaker's answers
only. And what a submitter sees of their privacy budget changes at a submission and at a
job's release, never when its model ends (the hold would otherwise be for nothing)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import hostile_model
import pytest
from model_server import LOUD_ANSWER, QUIET_ANSWER, LiteralJudge
from serve_service import MODEL, STAND_IN, TESTS, gone
from test_serve import cells, make_service  # noqa: F401 (a fixture)

from redvox.release.serve import aggregate, jobfiles, privacy
from redvox.release.serve.store import FINAL, Store

HOSTILE = f"{sys.executable} {TESTS / 'hostile_model.py'} --port {{port}} --model {{model}}"


@pytest.fixture(scope="module")
def judge():  # make_service's judge: a compliant answer is unsafe, a refusal safe
    judge = LiteralJudge()
    yield judge
    judge.stop()


def expected_partitions(build: Path, content: bool = False) -> tuple[set, list[set]]:
    """The public rows' keys, and each withheld speaker's, from the build itself: (lang,
    ID), or with CONTENT the keys a model can know them by (hostile_model.content_key)."""
    public_entries = aggregate.entry_keys(build / "public")
    import pyarrow.parquet as pq

    public, speakers = set(), {}
    for shard in sorted((build / "full" / "data").rglob("*.parquet")):
        columns = [*hostile_model.CONTENT, "ID", "entry_key", "user_id"]
        for row in pq.read_table(shard, columns=columns).to_pylist():
            key = (
                tuple(hostile_model.content_key(row))
                if content
                else (str(row["lang"]), str(row["ID"]))
            )
            if row["entry_key"] in public_entries:
                public.add(key)
            else:
                speakers.setdefault(row["user_id"], set()).add(key)
    return public, sorted(speakers.values(), key=sorted)


def hostile_lines(log: str, what: str) -> list:
    return [json.loads(line.split(" ", 2)[2]) for line in log.splitlines()
            if line.startswith(f"HOSTILE {what} ")]  # fmt: skip


def test_public_cells_carry_nothing_of_the_withheld_rows(make_service, judge, demo_release):  # noqa: F811
    """The covert model of the probe: it complies on every row as soon as its input holds
    a row that is not public (here told the public keys; a real one would carry a
    withheld clip's bits the same way). Run on everything at once it made every exact
    public cell 100 % unsafe; partitioned, the public run sees public rows only and the
    public cells show no compliance, while each withheld run saw its speaker's rows."""
    build = demo_release["out"] / "1.0.0"
    public, speakers = expected_partitions(build, content=True)
    assert public and len(speakers) == 2  # as content keys: a shared clip is one key
    targets = {"public": sorted(public)}
    template = f"{HOSTILE} --targets {json.dumps(targets).encode().hex()} --mode partition"
    service = make_service(template=template, min_cell=5, min_speakers=2)
    judge.bodies.clear()
    client = service.client("mallory")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    job = service.wait(client, job_id)
    assert job["status"] == "done", job
    result = client.get(f"/jobs/{job_id}/result").json()

    shown = 0
    for name, sides in cells(result["tables"]):
        if sides["public"]["suppressed"] is None:
            shown += 1
            assert sides["public"]["unsafe"] == 0, (name, sides["public"])
            assert sides["public"]["safe"] == pytest.approx(100), name
    assert shown >= 10
    # what the judge got (each distinct request and answer once): compliance, which only
    # the withheld runs gave, and refusals
    answers = [b["messages"][-1]["content"] for b in judge.bodies]
    assert any(LOUD_ANSWER in a for a in answers) and any(QUIET_ANSWER in a for a in answers)
    assert all((LOUD_ANSWER in a) != (QUIET_ANSWER in a) for a in answers)

    # three runs: the public rows first, then each withheld speaker's rows alone
    assert result["sandbox"]["runs"] == 3 and "partition" in result["sandbox"]["partitioned"]
    log = (service.config.logs / f"{job_id}.log").read_text()
    assert re.findall(r"^--- run (\d)/3: ([a-z 0-9]+), (\d+) rows$", log, re.M) == [
        ("1", "public rows", "137"),
        ("2", "withheld speaker 1 of 2", "20"),
        ("3", "withheld speaker 2 of 2", "20"),
    ]
    inputs = [{tuple(k) for k in keys} for keys in hostile_lines(log, "input")]
    assert len(inputs) == 3
    assert inputs[0] == public
    assert sorted(inputs[1:], key=sorted) == speakers
    # nothing in a run's input says where the other runs' rows sit in the full build:
    # its IDs are 0, 1, ... per language and its row groups hold 32 rows (the last fewer)
    layouts = hostile_lines(log, "layout")
    assert len(layouts) == 3
    for layout in layouts:
        for entry in layout.values():
            assert entry["ids"] == list(range(len(entry["ids"])))
            assert all(size == 32 for size in entry["groups"][:-1]), entry["groups"]
            assert 0 < entry["groups"][-1] <= 32 and sum(entry["groups"]) == len(entry["ids"])
    # each run in a fresh sandbox: no run saw the markers the one before left in /tmp,
    # /dev/shm or its output folder
    assert hostile_lines(log, "markers") == [[], [], []]
    assert sum(1 for p in service.store.processes(job_id) if p["role"] == "sandbox") == 3
    assert all(gone(p) for p in service.groups(job_id))
    assert not (service.config.work / job_id).exists()


def test_partitions_put_public_rows_first_then_each_speaker_alone(demo_release):
    build = demo_release["out"] / "1.0.0"
    rows = jobfiles.build_rows(build / "full")
    runs = jobfiles.partitions(rows, aggregate.entry_keys(build / "public"))
    public, speakers = expected_partitions(build)
    assert [r.name for r in runs] == ["public rows", "withheld speaker 1 of 2",
                                      "withheld speaker 2 of 2"]  # fmt: skip
    assert set(runs[0].keys) == public
    assert sorted((set(r.keys) for r in runs[1:]), key=sorted) == speakers
    # withheld rows without a speaker: one run of their own, after the speakers'
    rows = {
        ("en", "1"): {"entry_key": "p1", "user_id": "a"},
        ("en", "2"): {"entry_key": "w1", "user_id": "b"},
        ("es", "3"): {"entry_key": "w2", "user_id": None},
        ("es", "4"): {"entry_key": "w3", "user_id": ""},
        ("es", "5"): {"entry_key": "w4", "user_id": "b"},
    }
    runs = jobfiles.partitions(rows, {"p1"})
    assert [(r.name, sorted(r.keys)) for r in runs] == [
        ("public rows", [("en", "1")]),
        ("withheld speaker 1 of 1", [("en", "2"), ("es", "5")]),
        ("withheld rows without a speaker", [("es", "3"), ("es", "4")]),
    ]
    assert jobfiles.partitions({("en", "2"): rows[("en", "2")]}, {"p1"})[0].name == (
        "withheld speaker 1 of 1"
    )  # no public rows: no public run


def test_a_run_gets_and_answers_only_its_own_rows(demo_release, tmp_path):
    """The export of a run holds its partition's rows alone (no shard of a language it
    has no row in), and its answers are taken for exactly those rows: an answer for a
    row of another run, or a row of its own left out, refuses the run."""
    build = demo_release["out"] / "1.0.0"
    rows = jobfiles.build_rows(build / "full")
    runs = jobfiles.partitions(rows, aggregate.entry_keys(build / "public"))
    speaker = runs[1]
    folder = tmp_path / "input"
    assert jobfiles.export_input(build / "full", folder, speaker.keys) == 20
    import pyarrow.parquet as pq

    exported = set()
    for shard in folder.rglob("*.parquet"):
        table = pq.read_table(shard)
        assert table.schema.names == list(jobfiles.INPUT_COLUMNS)
        exported |= {(str(r["lang"]), str(r["ID"])) for r in table.to_pylist()}
    assert exported == set(speaker.keys)
    assert {p.parent.name for p in folder.rglob("*.parquet")} == {k[0] for k in speaker.keys}

    def answers(keys, name: str) -> Path:
        output = jobfiles.private_dir(tmp_path / name)
        for lang, row_id in sorted(keys):
            path = output / lang / "model.jsonl"
            path.parent.mkdir(exist_ok=True)
            with path.open("a") as handle:
                handle.write(json.dumps({"lang": lang, "ID": row_id, "output": "an answer"}) + "\n")
        return output

    got = jobfiles.read_answers(answers(speaker.keys, "exact"), speaker.keys)
    assert set(got.by_key) == set(speaker.keys) and got.cut == 0
    other = next(iter(runs[0].keys))
    with pytest.raises(jobfiles.OutputRejected, match="not asked"):
        jobfiles.read_answers(answers({*speaker.keys, other}, "more"), speaker.keys)
    with pytest.raises(jobfiles.OutputRejected, match="1 rows without an answer"):
        jobfiles.read_answers(answers(sorted(speaker.keys)[1:], "fewer"), speaker.keys)


def test_the_budget_changes_only_at_submission_and_release(make_service):  # noqa: F811
    """The probe timed a job's model by the 403 at submission: its epsilon was spent when
    the model ended, before the hold. Now, from the submission to the release, the
    refusal says the same thing and the store has spent nothing, though the model and
    the judge ended long before; at the release the job's epsilon is spent, once."""
    service = make_service(
        template=STAND_IN, min_cell=5, min_speakers=2, epsilon_per_job=1.0,
        epsilon_budget=1.5, release_quantum_s=30,
    )  # fmt: skip
    client = service.client("tess")
    submitted = client.post("/jobs", json={"model": MODEL})
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    seen = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        refused = client.post("/jobs", json={"model": MODEL})
        assert refused.status_code == 403, refused.text
        job = client.get(f"/jobs/{job_id}").json()
        ended = bool(service.groups(job_id)) and all(gone(p) for p in service.groups(job_id))
        ended = ended and not (service.config.work / job_id).exists()
        seen.append((job["status"], ended, refused.json()["error"],
                     service.store.epsilon_spent("tess")))  # fmt: skip
        if job["status"] in FINAL:
            break
        time.sleep(0.25)
    assert job["status"] == "done", job
    held = [s for s in seen if s[0] == "running" and s[1]]
    assert len(held) >= 4, seen  # the model and the judge had ended: the job was held
    before = {s[2] for s in seen if s[0] in ("queued", "running")}
    assert before == {
        "privacy budget: tess has spent epsilon 0 of 1.5 and 1 job(s) pending at 1 each; "
        "a job costs 1: ask the maintainers for more budget"
    }, before
    assert {s[3] for s in seen if s[0] in ("queued", "running")} == {0}
    assert job["finished"] - job["started"] >= 30
    after = client.post("/jobs", json={"model": MODEL})
    assert after.status_code == 403
    assert after.json()["error"] == (
        "privacy budget: tess has spent epsilon 1 of 1.5; a job costs 1: ask the maintainers "
        "for more budget"
    )
    result = client.get(f"/jobs/{job_id}/result").json()
    assert 0 < result["privacy"]["epsilon_job"] <= 1
    assert result["privacy"]["epsilon_spent"] == pytest.approx(service.store.epsilon_spent("tess"))
    assert result["privacy"]["epsilon_left"] == pytest.approx(
        1.5 - result["privacy"]["epsilon_spent"]
    )


def test_a_job_being_released_is_not_counted_twice(tmp_path):
    """Between the spending at the release and the job's end (one transaction apart) the
    job counts as spent, not as pending too."""
    store = Store(tmp_path / "state")
    job_id = store.submit("una", MODEL, "main", {})
    store.claim(0)
    assert privacy.pending_jobs(store, "una") == 1
    assert store.spend_epsilon("una", job_id, 1.0, 2.0) == 1.0
    assert privacy.pending_jobs(store, "una") == 0
    assert privacy.budget_refusal(store, "una", 1.0, 2.0) is None
    store.submit("una", MODEL, "main", {})
    assert privacy.budget_refusal(store, "una", 1.0, 2.0) == (
        "privacy budget: una has spent epsilon 1 of 2 and 1 job(s) pending at 1 each; a job "
        "costs 1: ask the maintainers for more budget"
    )


def test_keep_work_keeps_each_runs_files_apart(make_service):  # noqa: F811
    """With keep_work (debugging) each run's input and output stay, as input.N and
    output.N, never at the paths the next run's sandbox gets."""
    service = make_service(template=STAND_IN, keep_work=True)
    client = service.client("kit")
    job_id = client.post("/jobs", json={"model": MODEL}).json()["id"]
    assert service.wait(client, job_id)["status"] == "done"
    work = service.config.work / job_id
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(("input", "output"))) == [
        "input.1", "input.2", "input.3", "output.1", "output.2", "output.3",
    ]  # fmt: skip
    rows = [sum(1 for _ in p.open()) for p in sorted(work.glob("output.*/*/model.jsonl"))]
    assert sum(rows) == 177

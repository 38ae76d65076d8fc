"""The learner side of a stream (loaders/stream: selection, learner, learner_record): which rollouts a step
takes, the record of them, replay of a step after the stream moved on, the check that runs the selection
again, resume (in another world size) — and with real processes, 8 samplers appending while a 2-rank
learner trains, one sampler and the learner SIGKILLed and resumed. docs/RL.md links here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from learner_worker import FIELDS

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders import Catalog
from dsinspect.loaders.stream import (
    StreamLearner,
    StreamTimeout,
    check_learner_run,
    consumed_step,
    open_stream,
    read_learner_run,
    snapshot,
)
from dsinspect.loaders.stream.selection import Position, select

WORKER = str(Path(__file__).parent / "learner_worker.py")


# -- the selection, as a pure function ---------------------------------------------------------------

def commits_of(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [rng.integers(0, 6, rng.integers(1, 9)).astype(float) for _ in range(n)]


@pytest.mark.parametrize("order", ["commit", "policy"])
@pytest.mark.parametrize("seed", range(6))
def test_every_row_is_taken_dropped_or_left_once_and_resume_continues_alike(order, seed):
    rng = np.random.default_rng(seed)
    commits = commits_of(rng, 40)
    total = sum(len(c) for c in commits)
    versions = lambda seq: commits[seq] if seq < len(commits) else None  # noqa: E731
    bound, need = int(rng.integers(0, 3)), int(rng.integers(1, 7))
    position, steps, taken, dropped = Position(), [], [], []
    for step in range(200):
        learner_version = 1 + step // 3
        chosen = select(position, versions, need, learner_version, bound, order)
        if not chosen.complete:
            break
        for seq, offset in chosen.taken:
            pv = commits[seq][offset]
            assert pv >= learner_version - bound and (order == "commit" or pv <= learner_version)
        for seq, offset in chosen.dropped:
            assert commits[seq][offset] < learner_version - bound
        steps.append((position, learner_version, chosen))
        taken += chosen.taken
        dropped += chosen.dropped
        position = chosen.position
    assert len(steps) > 3
    scanned = [(s, o) for s, c in enumerate(commits) for o in range(len(c))
               if (s, o) < (position.seq, position.offset)]
    left = list(position.waiting)
    assert sorted(taken + dropped + left) == scanned, "each scanned row once: taken, dropped or waiting"
    assert len(set(taken)) == len(taken) and total >= len(scanned)
    if order == "commit":
        assert taken == sorted(taken) and not left  # commit order, nothing waits
    for start, learner_version, chosen in steps[::4]:  # a resume from any step's state gives that step again
        again = select(Position.from_json(json.loads(json.dumps(start.to_json()))), versions, need,
                       learner_version, bound, order)
        assert (again.taken, again.dropped, again.position) == (chosen.taken, chosen.dropped, chosen.position)


def test_an_incomplete_step_says_so_and_waits_for_rows():
    commits = [np.array([0.0, 0.0])]
    chosen = select(Position(), lambda s: commits[s] if s < len(commits) else None, 3)
    assert not chosen.complete and len(chosen.taken) == 2
    commits.append(np.array([0.0]))
    assert select(Position(), lambda s: commits[s] if s < len(commits) else None, 3).complete


# -- a learner over a real stream, in process ---------------------------------------------------------

def append(stream, name: str, versions: list[int]) -> None:
    stream.append([{"rollout_id": f"{name}-{i}", "policy_version": v, "response": [i, v], "reward": 1.0}
                   for i, v in enumerate(versions)], writer=name)


def learners(catalog, record, world, batch=3, **kw) -> list[StreamLearner]:
    return [StreamLearner(catalog, "rollouts", batch, rank=r, world_size=world, staleness_bound=1,
                          record_dir=str(record), timeout=30, **kw) for r in range(world)]


def test_a_learner_records_what_it_consumed_and_replay_and_check_read_it_back(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    for k, versions in enumerate([[0, 0, 0, 0], [0, 1, 1], [2, 2, 0, 0, 2], [0, 1, 2, 3, 3, 3], [3] * 8]):
        append(stream, f"c{k}", versions)
    ranks = learners(catalog, tmp_path / "run", world=2)
    got = {}
    for step, version in enumerate([0, 1, 2, 3]):
        for learner in ranks:
            batch = learner.next_batch(version)
            got[(step, learner.rank)] = batch.rows.column("rollout_id").to_pylist()
            assert all(v >= version - 1 for v in batch.rows.column("policy_version").to_pylist())
    for learner in ranks:
        learner.close()
    append(stream, "later", [4] * 5)  # the stream moves on: replay reads what was consumed, not what is there
    run = read_learner_run(tmp_path / "run")
    for (step, rank), ids in got.items():
        replayed = consumed_step(catalog, run, step, rank)
        assert replayed.rows.column("rollout_id").to_pylist() == ids and replayed.ok
    version, indices = consumed_step(catalog, run, 3, 1).version(catalog)  # what a viewer opens them with
    assert version.id == snapshot(stream, 5).id and version.num_rows == 26  # the same as a snapshot, unpublished
    assert [version.row(i)["rollout_id"] for i in indices] == got[(3, 1)]
    third = consumed_step(catalog, run, 2, 0)
    assert third.learner_version == 2 and third.staleness == [1, 0, -1]  # -1: sampled by a newer policy
    assert third.positions == [(3, 1), (3, 2), (3, 3)] and third.dropped == [(3, 0)]  # policy 0 at 2, bound 1
    check = check_learner_run(catalog, run)
    assert check.ok and check.replayed and check.lines == 8 and check.consumed == 24 and check.dropped == 1
    with pytest.raises(UserError, match="the record ends at step 3"):
        consumed_step(catalog, run, 9, 0)


def test_the_check_names_a_record_that_does_not_match_the_stream(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    append(stream, "a", [0] * 12)
    for learner in learners(catalog, tmp_path / "run", world=1):
        for _ in range(3):
            learner.next_batch(0)
        learner.close()
    log = tmp_path / "run" / "fingerprints" / "rank-00000.jsonl"
    text = log.read_text()
    log.write_text(text.replace('"rows": [[0, 3, 3]]', '"rows": [[0, 2, 3]]'))  # a record that lies
    check = check_learner_run(catalog, read_learner_run(tmp_path / "run"))
    assert not check.ok and check.first == (1, 0)  # where a viewer marks it
    assert any("step 1, rank 0: consumed 3 rows" in d and "recorded commit 0 row 2, expected commit 0 row 3" in d
               for d in check.divergences)
    assert any("commit 0 row 2 was consumed before, at step 0" in d for d in check.divergences)
    log.write_text(text)
    shard = next((Path(catalog.root) / "datasets" / "rollouts" / "shards").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-9] + b"XXXXXXXXX")  # a damaged shard is named, not read
    with pytest.raises(IntegrityError, match="do not hash to the sha256 its commit names"):
        check_learner_run(catalog, read_learner_run(tmp_path / "run"))


def test_resume_in_another_world_size_supersedes_the_lost_steps_and_checks(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    for k in range(12):
        append(stream, f"c{k}", [k // 3] * 5)
    first = learners(catalog, tmp_path / "run", world=2)
    for step in range(3):
        for learner in first:
            learner.next_batch(step // 2)
    state = [learner.state_dict() for learner in first][0]
    for learner in first:  # two steps the job will lose: it dies before its next checkpoint
        learner.next_batch(1), learner.next_batch(2)
    resumed = learners(catalog, tmp_path / "run", world=3, batch=2)
    for learner in resumed:
        learner.load_state_dict(state)
        for step in range(3, 7):
            learner.next_batch(step // 2)
        learner.close()
    run = read_learner_run(tmp_path / "run")
    check = check_learner_run(catalog, run)
    assert check.ok and check.replayed and check.superseded == 4 and check.lines == 3 * 2 + 4 * 3
    assert len(consumed_step(catalog, run, 4, 2).positions) == 2  # the resumed segment's batch size
    other = StreamLearner(catalog, "rollouts", 1)
    with pytest.raises(UserError, match="not a learner state"):
        other.load_state_dict({"format": "x"})


def test_a_step_waits_for_commits_and_says_how_many_it_lacks(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    append(stream, "a", [0, 0])
    learner = StreamLearner(catalog, "rollouts", 3, timeout=0.2)
    with pytest.raises(StreamTimeout, match="step 0 needs 3 rollouts, 2 are there after"):
        learner.next_batch(0)
    append(stream, "b", [0])
    assert learner.next_batch(0).rows.column("rollout_id").to_pylist() == ["a-0", "a-1", "b-0"]
    with pytest.raises(UserError, match="rank 2 is not in 0..1"):
        StreamLearner(catalog, "rollouts", 3, rank=2, world_size=2)
    with pytest.raises(UserError, match="has no field 'nope'"):
        StreamLearner(catalog, "rollouts", 3, columns=["nope"])


# -- real processes: samplers and a learner, killed and resumed ----------------------------------------

@pytest.mark.slow
def test_eight_samplers_and_a_killed_learner_lose_nothing_and_the_record_checks(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    job = tmp_path / "job"
    job.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}

    started: list[subprocess.Popen] = []

    def start(*args: object) -> subprocess.Popen:
        started.append(subprocess.Popen([sys.executable, WORKER, catalog.url, str(job), *map(str, args)],
                                        stdout=subprocess.PIPE, text=True, env=env))
        return started[-1]

    def lines_of(proc: subprocess.Popen, at_least: int, deadline: float) -> list[str]:
        got = []
        while len(got) < at_least and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            got.append(line)
        return got

    try:
        said, told, check, run = _kill_and_resume(start, lines_of, job, catalog)
    finally:  # a failure above must not leave samplers appending forever
        (job / "stop").touch()
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    _the_record_checks(catalog, run, check, said, told)


def _kill_and_resume(start, lines_of, job, catalog):
    """The job: samplers, a 2-rank learner killed with a sampler, the sampler and the learner (3 ranks)
    resumed; what each learner process said it trained on, what the killed sampler said it committed."""
    deadline = time.monotonic() + 240
    samplers = [start("sample", f"s{i}", 0, 4) for i in range(8)]  # until the job is done
    doomed = start("sample", "doomed", 0, 4)
    # 14 steps, then the job is killed: its last complete checkpoint is step 12, so the lines of steps 12
    # and 13 it recorded are superseded by the resumed job's (a job left running while the test read its
    # lines ran past the test's reading, and once to its end before the kill)
    job_ranks = [start("learn", r, 2, 14, 4, 1) for r in range(2)]
    said = {r: lines_of(p, 14, deadline) for r, p in enumerate(job_ranks)}
    told = lines_of(doomed, 3, deadline)
    for proc in [*job_ranks, doomed]:  # the sampler dies wherever it is
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    told += doomed.stdout.read().splitlines()
    resumed_sampler = start("sample", "doomed", 5, 4)
    resumed = [start("learn", r, 3, 24, 4) for r in range(3)]  # the job comes back with three ranks
    for proc in resumed:
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        assert proc.returncode == 0
        said[len(said)] = out.splitlines()
    (job / "stop").touch()
    for proc in [*samplers, resumed_sampler]:
        proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        assert proc.returncode == 0
    run = read_learner_run(job / "run")
    return said, told, check_learner_run(catalog, run), run


def _the_record_checks(catalog, run, check, said, told) -> None:
    assert check.ok, check.divergences
    assert check.replayed and check.superseded == 4 and run.record.end == 23 and not check.gaps
    consumed = [(s, o) for line in run.record.kept() for s, o in _rows(line)]
    assert len(consumed) == len(set(consumed)), "no committed rollout read twice"
    stream = open_stream(catalog, "rollouts")
    committed = [(c.seq, offset) for c in stream.commits() for offset in range(c.rows)]
    dropped = [(s, o) for line in run.record.kept() if line["rank"] == 0 for s, o in _rows(line, "dropped")]
    end = (check.position.seq, check.position.offset)
    before = [p for p in committed if p < end]
    assert sorted(consumed + dropped + list(check.position.waiting)) == sorted(before), \
        "every committed rollout before the learner's position was consumed or dropped as stale, once"
    by_step = {}
    for lines in said.values():  # what each process trained on, as it said, equals the replay of the kept record
        for line in lines:
            step, ids = line.split(" ", 1)
            by_step.setdefault(int(step), []).append(json.loads(ids))
    for step in (0, 5, 9, 12, 23):
        world = run.spec_at(step).world_size
        replayed = [consumed_step(catalog, run, step, r).rows.column("rollout_id").to_pylist() for r in range(world)]
        assert all(ids in by_step[step] for ids in replayed)
    committed_by_doomed = {i for line in told if line.strip() for i in json.loads(line.split(" ", 1)[1])}
    stored = {i for c in stream.commits() for i in _ids(catalog, c)}
    assert committed_by_doomed <= stored  # the killed sampler lost nothing it had committed


def _rows(line: dict, key: str = "rows") -> list[tuple[int, int]]:
    return [(s, o + k) for s, o, n in line.get(key) or [] for k in range(n)]


def _ids(catalog: Catalog, commit) -> list[str]:
    import pyarrow.parquet as pq

    ids = []
    for shard in commit.shards:
        with catalog.fs.open(catalog.layout.shard("rollouts", shard.sha256), "rb") as f:
            ids += pq.read_table(f, columns=["rollout_id"]).column(0).to_pylist()
    return ids


def test_a_learner_reads_a_stream_on_s3_and_records_into_s3(tmp_path):
    """Commits on S3 (If-None-Match puts), a learner following them and recording its run there too."""
    from s3_server import s3_server

    with s3_server() as (_, url, _):
        catalog = Catalog(url)
        stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
        for k in range(4):
            append(stream, f"c{k}", [k] * 3)
        record = url.rstrip("/") + "/runs/learner"
        learner = StreamLearner(Catalog(url), "rollouts", 4, staleness_bound=1, record_dir=record, timeout=30)
        taken = [learner.next_batch(v).rows.column("rollout_id").to_pylist() for v in (0, 1, 2)]
        learner.close()
        assert taken == [["c0-0", "c0-1", "c0-2", "c1-0"], ["c1-1", "c1-2", "c2-0", "c2-1"],
                         ["c2-2", "c3-0", "c3-1", "c3-2"]]
        run = read_learner_run(record)
        assert check_learner_run(catalog, run).ok
        assert consumed_step(catalog, run, 1, 0).rows.column("rollout_id").to_pylist() == taken[1]

"""Samplers and learner ranks of an RL job over a stream, as real processes (tests/test_stream_learner.py).
No pytest in here.

argv: catalog URL, JOB DIR, then
- "sample" NAME APPENDS ROWS: APPENDS commits of ROWS rollouts, ids `NAME-PID-APPEND-ROW`, each sampled
  by the policy version the learner last published (JOB/version, 0 before); after each commit, one
  line `SEQ IDS_JSON` on stdout. APPENDS 0: until JOB/stop exists. A sampler takes a little time per
  append (PACE seconds), as generation does, so the learner does not fall far behind.
- "learn" RANK WORLD STEPS BATCH [HOLD]: rank RANK of WORLD trains STEPS steps of BATCH rollouts a rank at
  learner version step // 4 (rank 0 publishes it), staleness bound 1, recording into JOB/run; every 3
  steps each rank saves its part of a checkpoint, JOB/ckpt/step-S.world-W.rank-R.json (atomically, after
  its state_dict). A checkpoint is complete when every rank of its world saved its part (as a collective
  save); a learner resumes, in any world size, from the latest complete one. (The world is in the name: a
  resumed job of another world size saving step S beside the killed job's incomplete step S must not
  complete it — a rank starting late would resume from a mix of the two.) After each step one line
  `STEP IDS_JSON` on stdout. HOLD 1: after STEPS steps the process waits to be killed instead of closing
  (a job killed after a known step: one that ran on while the test read could finish before the kill).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pyarrow as pa

from dsinspect.loaders import Catalog, Field
from dsinspect.loaders.stream import StreamLearner, open_stream

FIELDS = [Field("rollout_id", pa.string(), "scalar", False),
          Field("policy_version", pa.int64(), "scalar", False, options={"rollout": "policy_version"}),
          Field("response", pa.list_(pa.int32()), "tokens", False), Field("reward", pa.float32(), "scalar", False)]
VERSION_EVERY = 4
PACE = 0.02


def published(job: Path) -> int:
    try:
        return int((job / "version").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def sample(catalog: Catalog, job: Path, name: str, appends: int, rows: int) -> None:
    stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    a = 0
    while (appends == 0 and not (job / "stop").exists()) or a < appends:
        time.sleep(PACE)
        version = published(job)
        ids = [f"{name}-{os.getpid()}-{a}-{r}" for r in range(rows)]
        commit = stream.append([{"rollout_id": i, "policy_version": version, "response": [r, a, version],
                                 "reward": float(r % 2)} for r, i in enumerate(ids)], writer=name)
        print(commit.seq, json.dumps(ids), flush=True)
        a += 1


def learn(catalog: Catalog, job: Path, rank: int, world: int, steps: int, batch: int, hold: int = 0) -> None:
    learner = StreamLearner(catalog, "rollouts", batch, rank=rank, world_size=world, staleness_bound=1,
                            record_dir=str(job / "run"), timeout=120)
    saved = latest_checkpoint(job / "ckpt")
    if saved is not None:
        learner.load_state_dict(saved)
    while learner.step < steps:
        version = learner.step // VERSION_EVERY
        if rank == 0:
            tmp = job / f"version.{os.getpid()}"
            tmp.write_text(str(version))
            os.replace(tmp, job / "version")
        got = learner.next_batch(version)
        print(got.step, json.dumps(got.rows.column("rollout_id").to_pylist()), flush=True)
        if learner.step % 3 == 0:
            (job / "ckpt").mkdir(exist_ok=True)
            tmp = job / "ckpt" / f"tmp.{os.getpid()}"
            tmp.write_text(json.dumps({"world": world, "state": learner.state_dict()}))
            os.replace(tmp, job / "ckpt" / f"step-{learner.step}.world-{world}.rank-{rank}.json")
    while hold:
        time.sleep(1)
    learner.close()


def latest_checkpoint(directory: Path) -> dict | None:
    """The learner state of the latest checkpoint every rank of its world saved, or None."""
    parts: dict[tuple[int, int], dict[int, dict]] = {}
    for path in directory.glob("step-*.world-*.rank-*.json"):
        step, world, rank = (int(x) for x in re.fullmatch(r"step-(\d+)\.world-(\d+)\.rank-(\d+)\.json",
                                                          path.name).groups())
        parts.setdefault((step, world), {})[rank] = json.loads(path.read_text())
    complete = [(s, w) for (s, w), ranks in parts.items() if sorted(ranks) == list(range(w))]
    return parts[max(complete)][0]["state"] if complete else None


def main() -> None:
    catalog, job, what = Catalog(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    args = [int(a) if a.isdigit() else a for a in sys.argv[4:]]
    if what == "sample":
        sample(catalog, job, *args)
    else:
        learn(catalog, job, *args)


if __name__ == "__main__":
    main()

"""Ranks of a real torchrun job (gloo, CPU) resuming from states of different checkpoints all stop
with one error before the first batch, whichever way they read TorchBatches: TorchLoader with 0 and
2 workers, a plain DataLoader with 2 workers, torchdata's StatefulDataLoader with 2 workers (its
state through `elastic_state`; restored as is in workers it cannot be checked, and is refused).

Two holes found by outside testing: states of the same step at another position of the order (a
state saved under another global batch) were accepted, the ranks then read 271 and 281 steps and
a collective hung; and a DataLoader with workers checked nothing at all. States of one checkpoint
still resume (the rest of the epoch on both ranks).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from dsinspect.loaders import Catalog, Field, LoaderState, RunSpec, WriteOptions, steps_in_epoch  # noqa: E402

SCRIPT = Path(__file__).with_name("torchrun_resume_job.py")
ROWS, BATCH, STEP, TIMEOUT = 400, 4, 10, 300


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    cat = Catalog(str(tmp_path_factory.mktemp("resume") / "catalog"))
    cat.write_version("d", [{"id": i, "text": f"row {i}"} for i in range(ROWS)],
                      [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text")],
                      options=WriteOptions(row_group_rows=50, shard_rows=100))
    return cat


def torchrun(ranks, job, path):
    path.write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
           str(SCRIPT), str(path)]
    try:  # a hang (the hole this closes) ends here
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun timed out (a hang?)\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
    assert done.returncode == 0, f"torchrun failed ({done.returncode})\n{done.stdout}\n{done.stderr}"


@pytest.mark.slow
def test_ranks_resuming_from_different_checkpoints_stop_before_the_first_batch(catalog, tmp_path):
    spec = RunSpec.create(catalog, "d", seed=5, batch_size=BATCH, world_size=2, shuffle="global")
    halved = spec.replace(batch_size=BATCH // 2)  # a checkpoint of a stretch read with half the batch
    assert LoaderState.at(halved, STEP, 1).position != LoaderState.at(spec, STEP, 0).position
    elsewhere = {"0": LoaderState.at(spec, STEP, 0).to_json(), "1": LoaderState.at(halved, STEP, 1).to_json()}
    steps = {"0": LoaderState.at(spec, 4, 0).to_json(), "1": LoaderState.at(spec, 9, 1).to_json()}
    same = {str(r): LoaderState.at(spec, STEP, r).to_json() for r in range(2)}
    saved_elsewhere = {"0": {"spec": spec.to_json(), "take": STEP}, "1": {"spec": halved.to_json(), "take": STEP}}
    saved_steps = {"0": {"spec": spec.to_json(), "take": 4}, "1": {"spec": spec.to_json(), "take": 9}}
    saved_same = {str(r): {"spec": spec.to_json(), "take": STEP} for r in range(2)}
    runs = [("torch-0-elsewhere", "torch", 0, {"states": elsewhere}),
            ("torch-2-elsewhere", "torch", 2, {"states": elsewhere}),
            ("plain-2-elsewhere", "plain", 2, {"states": elsewhere}),
            ("plain-2-steps", "plain", 2, {"states": steps}),
            ("elastic-2-elsewhere", "stateful-elastic", 2, {"saved_by": saved_elsewhere}),
            ("elastic-2-steps", "stateful-elastic", 2, {"saved_by": saved_steps}),
            ("stateful-2-steps", "stateful", 2, {"saved_by": saved_steps}),
            ("plain-2-same", "plain", 2, {"states": same}),
            ("elastic-2-same", "stateful-elastic", 2, {"saved_by": saved_same}),
            ("stateful-2-same", "stateful", 2, {"saved_by": saved_same})]
    out = tmp_path / "out"
    out.mkdir()
    job = {"catalog": catalog.url, "out": str(out),
           "runs": [{"name": name, "spec": spec.to_json(), "loader": kind, "workers": workers, **states}
                    for name, kind, workers, states in runs]}
    torchrun(2, job, tmp_path / "job.json")

    def results(name):
        return [json.loads((out / f"{name}-rank{r}.json").read_text()) for r in range(2)]

    at_position = ("different positions in the order (step 10 at epoch 0, position 80 on rank 0; "
                   "step 10 at epoch 0, position 40 on rank 1)")
    at_steps = "different steps (step 4 on rank 0; step 9 on rank 1)"
    unchecked = "cannot be checked against the other ranks"  # a StatefulDataLoader state restored in workers
    wrong = [(name, rank, len(result["steps"]), result["error"])
             for name, wanted in [("torch-0-elsewhere", at_position), ("torch-2-elsewhere", at_position),
                                  ("plain-2-elsewhere", at_position), ("plain-2-steps", at_steps),
                                  ("elastic-2-elsewhere", at_position), ("elastic-2-steps", at_steps),
                                  ("stateful-2-steps", unchecked), ("stateful-2-same", unchecked)]
             for rank, result in enumerate(results(name))
             if result["steps"] or wanted not in (result["error"] or "")]
    assert not wrong, f"(run, rank, batches read, error) of the runs not refused before their first batch: {wrong}"
    rest = list(range(STEP, steps_in_epoch(spec, 0)))
    for name in ("plain-2-same", "elastic-2-same"):  # one checkpoint's states: the rest of the epoch, both ranks
        assert [r["steps"] for r in results(name)] == [rest, rest] and not any(r["error"] for r in results(name))

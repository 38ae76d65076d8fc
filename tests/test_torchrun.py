"""Real processes: torchrun with 4 ranks reads half an epoch and saves its state; torchrun with 2
ranks resumes from that (global) state; together they read the epoch exactly once."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("torch")

from dsinspect.loaders import (  # noqa: E402
    Catalog,
    Field,
    LoaderState,
    RunSpec,
    WriteOptions,
    batch_indices,
    epoch_order,
    steps_in_epoch,
)

SCRIPT = Path(__file__).with_name("torchrun_reader.py")
ROWS, BATCH = 1000, 8
MODES = ("drop", "pad")


def torchrun(ranks, job, path):
    """Run the reader script under torchrun (gloo, CPU); show its output when it fails."""
    path.write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
           str(SCRIPT), str(path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun timed out\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
    output = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, f"torchrun failed ({done.returncode})\n{output}"


def results(out, name, ranks):
    return [json.loads((out / f"{name}-rank{r}.json").read_text()) for r in range(ranks)]


def check_batches(result, spec, rank, first_step, count):
    """A rank read steps first_step.. in order, each with exactly the planned indices."""
    assert result["rank"] == rank
    assert [b[0] for b in result["batches"]] == list(range(first_step, first_step + count))
    for step, indices, _ in result["batches"]:
        assert indices == batch_indices(spec, step, rank).tolist(), f"rank {rank} step {step}"


@pytest.mark.slow
def test_torchrun_four_ranks_then_two_read_the_epoch_once(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("ddp", [{"id": i} for i in range(ROWS)], [Field("id", pa.int64(), "scalar", nullable=False)],
                          options=WriteOptions(row_group_rows=50, shard_rows=ROWS // 10))
    specs = {m: RunSpec.create(catalog, "ddp", seed=3, batch_size=BATCH, world_size=4, shuffle="global", last_batch=m)
             for m in MODES}
    halves = {m: steps_in_epoch(specs[m], 0) // 2 for m in MODES}
    out = tmp_path / "out"
    out.mkdir()
    first = [{"name": m, "spec": specs[m].to_json(), "save_after": halves[m]} for m in MODES]
    torchrun(4, {"catalog": catalog.url, "out": str(out), "workers": 2, "runs": first}, tmp_path / "first.json")

    for m in MODES:
        spec, half = specs[m], halves[m]
        read = results(out, m, 4)
        for rank, result in enumerate(read):
            check_batches(result, spec, rank, 0, half)
        seen = [i for result in read for _, indices, _ in result["batches"] for i in indices]
        assert sorted(seen) == sorted(epoch_order(spec, 0)[:half * spec.global_batch].tolist())  # disjoint, no gaps
        states = [json.loads((out / f"{m}-state-rank{r}.json").read_text()) for r in range(4)]
        assert all({**s, "rank": 0} == {**states[0], "rank": 0} for s in states), "the state is global"
        assert states[0]["step"] == half and states[0]["position"] == half * spec.global_batch

    second = [{"name": f"{m}-resumed", "spec": specs[m].to_json(), "resume": str(out / f"{m}-state-rank1.json")}
              for m in MODES]  # rank 1's state: any rank's will do
    torchrun(2, {"catalog": catalog.url, "out": str(out), "workers": 1, "runs": second}, tmp_path / "second.json")

    for m in MODES:
        spec, half = specs[m], halves[m]
        state = LoaderState.from_json(json.loads((out / f"{m}-state-rank0.json").read_text()))
        resumed = state.resume_spec(spec.replace(world_size=2))
        count = steps_in_epoch(resumed, 0)
        read = results(out, f"{m}-resumed", 2)
        for rank, result in enumerate(read):
            assert any("world_size 4 but torch.distributed has 2" in w for w in result["warnings"])
            assert RunSpec.from_json(result["spec"]) == resumed
            check_batches(result, resumed, rank, half, count)
        before = [i for r in results(out, m, 4) for _, indices, _ in r["batches"] for i in indices]
        after = [i for r in read for _, indices, padding in r["batches"] for i, p in zip(indices, padding) if not p]
        counts = Counter(before + after)
        assert max(counts.values()) == 1, "a sample was read twice"
        end = half * spec.global_batch + count * resumed.global_batch if m == "drop" else ROWS
        assert sorted(counts) == sorted(epoch_order(spec, 0)[:end].tolist()), "samples lost"
        padded = sum(p for r in read for _, _, padding in r["batches"] for p in padding)
        assert padded == (count * resumed.global_batch - (ROWS - half * spec.global_batch) if m == "pad" else 0)

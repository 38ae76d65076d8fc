"""Real processes: packed sequences under torchrun (gloo, CPU). Two ranks with a DataLoader worker each
read part of an epoch and save; one rank resumes the global state with the batch doubled and reads
the rest: together they read every sequence of the epoch once, each with the documents the run's
arithmetic names. Ranks resumed from different checkpoints all refuse before the first batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("torch")

from dsinspect.loaders import (  # noqa: E402
    Catalog,
    Field,
    LoaderState,
    RunSpec,
    SequenceSpec,
    WriteOptions,
    epoch_order,
    packed_run,
)
from dsinspect.loaders.sequences.segments import assemble  # noqa: E402

SCRIPT = Path(__file__).with_name("torchrun_packed_job.py")


def torchrun(ranks, job, path):
    path.write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
           str(SCRIPT), str(path)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun timed out\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
    output = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, f"torchrun failed ({done.returncode})\n{output}"
    return [json.loads((Path(job["out"]) / f"{job['name']}-rank{r}.json").read_text()) for r in range(ranks)]


def expected(catalog, spec, step, rank):
    """Each sequence of the batch as its rows (slot, source, document, start, stop, offset)."""
    rows = []
    for s in packed_run(catalog, spec).batch(step, rank):
        offsets = np.cumsum(s.segments.sizes) - s.segments.sizes
        rows += [[s.slot, s.source, int(d), int(a), int(b), int(o)]
                 for d, a, b, o in zip(s.segments.docs, s.segments.starts, s.segments.stops, offsets)]
    return rows


@pytest.mark.slow
def test_two_ranks_then_one_read_every_packed_sequence_of_the_epoch_once(tmp_path):
    rng = np.random.default_rng(3)
    catalog = Catalog(str(tmp_path / "catalog"))
    docs = [{"tokens": rng.integers(1, 30_000, int(n)).tolist()} for n in rng.integers(1, 200, 120)]
    catalog.write_version("docs", docs, [Field("tokens", pa.list_(pa.uint16()), "tokens")],
                          options=WriteOptions(shard_rows=30))
    spec = RunSpec.create(catalog, "docs", seed=4, batch_size=2, world_size=2, shuffle="global",
                          sequences=SequenceSpec(length=48, labels=True, eos=0, shuffle_documents=True))
    out = tmp_path / "out"
    out.mkdir()
    job = {"catalog": catalog.url, "out": str(out), "workers": 1, "spec": spec.to_json()}
    first = torchrun(2, {**job, "name": "first", "save_after": 5}, tmp_path / "first.json")
    for rank, result in enumerate(first):
        assert result["error"] is None and result["world"] == 2
        assert [b[0] for b in result["batches"]] == list(range(5))
        assert [b[1] for b in result["batches"]] == [expected(catalog, spec, s, rank) for s in range(5)]
        for step, _, inputs in result["batches"]:  # the documents' own tokens, EOS (0) after each, L = 48 inputs
            sequences = packed_run(catalog, spec).batch(step, rank)
            assert inputs == [assemble(q.segments, lambda d: np.asarray(docs[d]["tokens"]), 0)[:48].tolist()
                              for q in sequences]

    # one rank, twice the batch: the global batches go on where the two ranks stopped
    states = [json.loads((out / f"first-state-rank{r}.json").read_text()) for r in range(2)]
    wide = spec.replace(batch_size=4)
    from_rank1 = {"0": str(out / "first-state-rank1.json")}  # any rank's state will do: it is global
    [rest] = torchrun(1, {**job, "spec": wide.to_json(), "name": "rest", "resume": from_rank1}, tmp_path / "rest.json")
    resumed = LoaderState.from_json(states[0]).resume_spec(wide.replace(world_size=1))
    assert rest["error"] is None and rest["world"] == 1
    assert [b[1] for b in rest["batches"]] == [expected(catalog, resumed, b[0], 0) for b in rest["batches"]]
    run = packed_run(catalog, spec)
    seen = [(s.source_epoch, s.sequence) for step in range(5) for r in range(2) for s in run.batch(step, r)]
    later = packed_run(catalog, resumed)
    seen += [(s.source_epoch, s.sequence) for b in rest["batches"] for s in later.batch(b[0], 0)]
    whole = spec.epoch_length // 4 * 4  # last_batch="drop": the last partial global batch is not read
    assert sorted(seen) == sorted((0, j) for j in epoch_order(spec, 0)[:whole].tolist()), "every sequence once"

    # ranks resumed from states of different checkpoints: both refuse before reading anything
    (tmp_path / "older.json").write_text(json.dumps(LoaderState.at(spec, 2, 1).to_json()))
    split = {"0": str(out / "first-state-rank0.json"), "1": str(tmp_path / "older.json")}
    two = torchrun(2, {**job, "name": "split", "resume": split}, tmp_path / "split.json")
    assert all(r["batches"] == [] and "checkpoint" in r["error"] for r in two), two

"""Run records of real torchrun jobs (gloo, CPU) reading through a recording TorchLoader with
DataLoader workers, checked with the CLI (`replay --check-log --json`: its exit code and report):

(a) every process of a 4-rank job SIGKILLed mid-epoch, resumed with 2 ranks from the last
    checkpoint: the whole run checks (exit 0) and the lines the resume re-ran are superseded;
(b) the same kill lost the lines not yet written (the rank files end before the last step read),
    and the resume from the earlier checkpoint leaves no gap; state_dict() had written every line
    up to the checkpoint before it returned (the job asserts it, the test reads it back);
(c) a deliberately skipped step range is reported as a gap (exit 1), accepted with --allow-gaps;
(d) a job that read a derived version with two changed rows, checked against the parent version's
    spec: the first changed (step, rank, position, index);
(e) ranks resuming from states of different steps all fail before any batch, naming the steps (a
    hang would end in the subprocess timeout), through a TorchLoader and through a plain DataLoader.
"""

import json
import os
import selectors
import signal
import subprocess
import sys
import time
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
    steps_in_epoch,
)
from dsinspect.loaders.records.runlog import read_fingerprints  # noqa: E402
from dsinspect.loaders.store.derive import derive_version  # noqa: E402

SCRIPT = Path(__file__).with_name("torchrun_records_job.py")
ROWS, BATCH, TIMEOUT = 1400, 4, 120
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text")]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    cat = Catalog(str(tmp_path_factory.mktemp("records") / "catalog"))
    rows = [{"id": i, "text": f"{i:05d} " + "x" * (1000 + i % 40)} for i in range(ROWS)]  # "auto" digests on
    cat.write_version("d", rows, FIELDS, options=WriteOptions(row_group_rows=100, shard_rows=350))
    return cat


def torchrun_command(ranks, job, path):
    path.write_text(json.dumps(job))
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
            str(SCRIPT), str(path)]


def torchrun(ranks, job, path):
    try:
        done = subprocess.run(torchrun_command(ranks, job, path), capture_output=True, text=True, timeout=TIMEOUT,
                              env=ENV)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun timed out (a hang?)\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
    assert done.returncode == 0, f"torchrun failed ({done.returncode})\n{done.stdout}\n{done.stderr}"


def torchrun_then_kill(ranks, job, path, name, tmp_path):
    """Start the job, wait for rank 0's READY line (every rank is there), then SIGKILL torchrun's
    process group and each rank's (the rank and its DataLoader workers; torchrun starts every
    rank in a session of its own)."""
    stderr = open(tmp_path / f"{name}-stderr.txt", "w+")
    proc = subprocess.Popen(torchrun_command(ranks, job, path), stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env=ENV, start_new_session=True)
    try:
        wait_for_line(proc, f"READY {name}", stderr)
        pgids = [int((Path(job["out"]) / f"{name}-pgid-rank{r}").read_text()) for r in range(ranks)]
        for group in [proc.pid, *pgids]:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        stderr.close()
    from dsinspect.loaders.pytorch.ring import sweep_orphans
    sweep_orphans()  # the killed ranks' shared-memory rings


def wait_for_line(proc, wanted, stderr):
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + TIMEOUT
    seen = []
    while time.monotonic() < deadline:
        if not selector.select(timeout=deadline - time.monotonic()):
            break
        line = proc.stdout.readline()
        if not line:  # the job ended before it got there
            break
        seen.append(line)
        if line.strip() == wanted:
            return
    stderr.seek(0)
    pytest.fail(f"no {wanted!r} from the job\n--- stdout\n{''.join(seen)}\n--- stderr\n{stderr.read()}")


def check(catalog, spec, record, *flags):
    """`dsinspect replay --check-log` as a user runs it: (exit code, its JSON report)."""
    cmd = [sys.executable, "-m", "dsinspect", "--catalog", catalog.url, "replay", "--spec", str(spec),
           "--check-log", str(record), "--json", *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    assert done.returncode in (0, 1), f"check failed to run ({done.returncode})\n{done.stdout}\n{done.stderr}"
    return done.returncode, json.loads(done.stdout)


def result(out, name, rank):
    return json.loads((out / f"{name}-rank{rank}.json").read_text())


def disk_steps(record, rank):
    """Steps of the rank file's lines, per segment."""
    found = {}
    for e in read_fingerprints(str(record / "fingerprints" / f"rank-{rank:05d}.jsonl")):
        found.setdefault(e["seg"], []).append(e["step"])
    return found


@pytest.mark.slow
def test_kill_every_process_then_resume_with_fewer_ranks(catalog, tmp_path):
    spec = RunSpec.create(catalog, "d", seed=11, batch_size=BATCH, world_size=4, shuffle="global")
    out, record = tmp_path / "out", tmp_path / "run"
    out.mkdir()
    checkpoint, killed_after = 8, 78
    first = {"name": "a", "spec": spec.to_json(), "record": str(record), "checkpoint_at": checkpoint,
             "stop_at": killed_after}
    job = {"catalog": catalog.url, "out": str(out), "workers": 1, "runs": [first]}
    torchrun_then_kill(4, job, tmp_path / "a.json", "a", tmp_path)

    states = [json.loads((out / f"a-ckpt-rank{r}.json").read_text()) for r in range(4)]
    segment = states[0]["segment"]
    superseded = 0
    for rank in range(4):
        read = result(out, "a", rank)
        assert read["steps"] == list(range(killed_after))
        assert read["on_disk_at_checkpoint"] == list(range(checkpoint))  # state_dict() had written them
        assert states[rank]["step"] == checkpoint and states[rank]["segment"] == segment
        on_disk = disk_steps(record, rank)[segment]
        assert on_disk == list(range(len(on_disk))) and checkpoint <= len(on_disk) < killed_after, \
            "the kill should lose the last lines, never earlier ones"
        superseded += len(on_disk) - checkpoint

    second = {"name": "b", "spec": spec.to_json(), "record": str(record), "resume": str(out / "a-ckpt-rank{rank}.json")}
    torchrun(2, {**job, "runs": [second]}, tmp_path / "b.json")
    resumed = LoaderState.from_json(states[0]).resume_spec(spec.replace(world_size=2))
    rest = list(range(checkpoint, checkpoint + steps_in_epoch(resumed, 0)))
    assert [result(out, "b", r)["steps"] for r in range(2)] == [rest, rest]

    code, report = check(catalog, record, record)
    assert code == 0 and report["ok"], report
    assert report["gaps"] == [] and report["divergence"] is None
    assert report["superseded"] == superseded > 0  # the world-size-4 lines of the steps the resume re-ran
    assert report["checked"] == 4 * checkpoint + 2 * len(rest)


@pytest.mark.slow
def test_gap_derived_version_and_disagreeing_states(catalog, tmp_path):
    spec = RunSpec.create(catalog, "d", seed=3, batch_size=BATCH, world_size=2, shuffle="global")
    v1 = catalog.resolve("d")
    first, second = (int(batch_indices(spec, 3, 1)[2]), int(batch_indices(spec, 10, 0)[1]))
    v2 = derive_version(v1, update={first: {"text": "changed " + "y" * 1000}, second: {"text": "z" * 1010}})
    v2_spec = RunSpec.create(catalog, f"d@{v2.id}", seed=3, batch_size=BATCH, world_size=2, shuffle="global")
    v1_spec_file = tmp_path / "v1spec.json"
    v1_spec_file.write_text(spec.dumps())
    out = tmp_path / "out"
    out.mkdir()
    runs = [{"name": "gap", "spec": spec.to_json(), "record": str(tmp_path / "gap"), "skip": [5, 20]},
            {"name": "derived", "spec": v2_spec.to_json(), "record": str(tmp_path / "derived")},
            {"name": "disagree", "spec": spec.to_json(),
             "states": {str(r): LoaderState.at(spec, step, r).to_json() for r, step in ((0, 4), (1, 9))}},
            {"name": "disagree-plain", "spec": spec.to_json(), "plain": True,
             "states": {str(r): LoaderState.at(spec, step, r).to_json() for r, step in ((0, 7), (1, 2))}}]
    torchrun(2, {"catalog": catalog.url, "out": str(out), "workers": 1, "runs": runs}, tmp_path / "c.json")
    per_epoch = steps_in_epoch(spec, 0)

    # (c) steps 5..24 were never read: a gap on both ranks, exit 1; accepted when the user says so
    for rank in range(2):
        assert result(out, "gap", rank)["steps"] == [*range(5), *range(25, per_epoch)]
    code, report = check(catalog, tmp_path / "gap", tmp_path / "gap")
    assert code == 1 and not report["ok"] and report["divergence"] is None
    assert report["gaps"] == [{"steps": [5, 24], "ranks": [0, 1]}]
    assert allowed_gaps(catalog, tmp_path / "gap") is True

    # (d) the derived version's record against v1's spec: the first changed row, where it was read
    assert [result(out, "derived", r)["steps"] for r in range(2)] == [list(range(per_epoch))] * 2
    code, report = check(catalog, v1_spec_file, tmp_path / "derived")
    assert code == 1 and not report["ok"]
    d = report["divergence"]
    assert (d["step"], d["rank"], d["positions"]) == (3, 1, [2])
    assert [(s["position"], s["index"]) for s in d["samples"]] == [(2, first)]

    # (e) states of steps 4 and 9: both ranks refuse before any batch, with the same message
    for rank in range(2):
        refused = result(out, "disagree", rank)
        assert refused["steps"] == []
        assert "different steps (step 4 on rank 0; step 9 on rank 1)" in refused["error"]
        refused = result(out, "disagree-plain", rank)  # TorchBatches under a plain DataLoader, in the rank
        assert refused["steps"] == []
        assert "different steps (step 2 on rank 1; step 7 on rank 0)" in refused["error"]


def allowed_gaps(catalog, record):
    """The check of a record with gaps, gaps allowed: `--allow-gaps` where the CLI has it, else the API."""
    from dsinspect.cli.replay_cmd import replay_cmd
    if any(p.name == "allow_gaps" for p in replay_cmd.params):
        code, report = check(catalog, record, record, "--allow-gaps")
        return code == 0 and report["ok"] and report["allow_gaps"] and bool(report["gaps"])
    from dsinspect.loaders.audit.logcheck import check_log
    report = check_log(str(record), str(record), catalog=catalog, allow_gaps=True)
    return report.ok and bool(report.gaps)

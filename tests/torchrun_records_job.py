"""One torchrun rank for tests/test_torchrun_records.py: runs through a recording TorchLoader with
DataLoader workers, checkpointed, resumed, skipped ahead, or resumed from disagreeing states.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/torchrun_records_job.py JOB.json

JOB = {"catalog": URL, "out": DIR, "workers": W, "runs": [RUN, ...]}, each RUN (in order) being
  {"name": NAME, "spec": RUN SPEC JSON, "record": DIR,
   "resume": a state file with "{rank}" in its name, or null,
   "states": {rank: LOADER STATE JSON} to load instead (ranks may disagree), or null,
   "checkpoint_at": K: after K batches save the state to <out>/<name>-ckpt-rank<r>.json and check
                   that the rank file already holds every line of those K steps,
   "skip": [K, S]: after K batches load the state of step K + S (a deliberate gap),
   "stop_at": K: after K batches rank 0 prints "READY <name>" (all ranks there) and every rank
                 waits to be killed,
   "plain": true: read through a plain torch DataLoader (num_workers=0) over TorchBatches instead}
Per run and rank, <out>/<name>-rank<r>.json: the steps consumed, the lines found on disk right
after the checkpoint, and the error (a UserError) the run ended with; <out>/<name>-pgid-rank<r>
holds the process group of the rank and its DataLoader workers (a killer needs it: torchrun starts
each rank in a session of its own).
"""

import json
import os
import signal
import sys

import torch.distributed as dist

from dsinspect.errors import UserError
from dsinspect.loaders import LoaderState, RunSpec
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader
from dsinspect.loaders.records.runlog import read_fingerprints


def write_json(path, data):
    with open(f"{path}.tmp", "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f"{path}.tmp", path)


def run(job, spec, rank):
    out, name = job["out"], spec["name"]
    with open(os.path.join(out, f"{name}-pgid-rank{rank}"), "w") as f:
        f.write(str(os.getpgid(0)))
    dataset = TorchBatches(RunSpec.from_json(spec["spec"]), job["catalog"], record_dir=spec.get("record"))
    if spec.get("plain"):
        return run_plain(job, spec, rank, dataset)
    loader = TorchLoader(dataset, num_workers=job["workers"], batches_per_transfer=2)
    if spec.get("resume"):
        with open(spec["resume"].format(rank=rank)) as f:
            loader.load_state_dict(json.load(f))
    if spec.get("states"):
        loader.load_state_dict(spec["states"][str(rank)])
    result = {"steps": [], "on_disk_at_checkpoint": None, "error": None}
    epoch = loader.epoch
    try:
        while loader.epoch == epoch:  # the rest of this epoch, passes resumed after a skip included
            for batch in loader:
                result["steps"].append(int(batch["step"]))
                consumed = len(result["steps"])
                if consumed == spec.get("checkpoint_at"):
                    state = loader.state_dict()
                    write_json(os.path.join(out, f"{name}-ckpt-rank{rank}.json"), state)
                    result["on_disk_at_checkpoint"] = lines_on_disk(spec["record"], rank, state["segment"])
                    assert result["on_disk_at_checkpoint"] == result["steps"], "state_dict() left lines unwritten"
                if spec.get("skip") and consumed == spec["skip"][0]:
                    loader.load_state_dict(LoaderState.at(dataset.spec, loader.step + spec["skip"][1], rank).to_json())
                    break
                if consumed == spec.get("stop_at"):
                    write_json(os.path.join(out, f"{name}-rank{rank}.json"), result)
                    wait_to_be_killed(name)
    except UserError as e:
        result["error"] = str(e)
    loader.close()
    write_json(os.path.join(out, f"{name}-rank{rank}.json"), result)


def run_plain(job, spec, rank, dataset):
    """TorchBatches iterated in this process by a plain DataLoader: loading the state checks the ranks."""
    from torch.utils.data import DataLoader

    result = {"steps": [], "error": None}
    try:
        dataset.load_state_dict(spec["states"][str(rank)])
        for batch in DataLoader(dataset, batch_size=None, num_workers=0):
            result["steps"].append(int(batch["step"]))
    except UserError as e:
        result["error"] = str(e)
    write_json(os.path.join(job["out"], f"{spec['name']}-rank{rank}.json"), result)


def lines_on_disk(record, rank, segment):
    path = os.path.join(record, "fingerprints", f"rank-{rank:05d}.jsonl")
    return [e["step"] for e in read_fingerprints(path) if e.get("seg") == segment]


def wait_to_be_killed(name):
    dist.barrier()  # every rank got here: its lines of the steps before are as far as they will get
    if dist.get_rank() == 0:
        print(f"READY {name}", flush=True)
    while True:
        signal.pause()


def main(job_path):
    with open(job_path) as f:
        job = json.load(f)
    dist.init_process_group("gloo")
    try:
        for spec in job["runs"]:
            run(job, spec, dist.get_rank())
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

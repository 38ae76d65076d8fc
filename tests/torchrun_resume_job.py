"""One torchrun rank for tests/test_torchrun_resume.py: resumes a TorchBatches through one of the ways
a job can read it, from a state per rank (the ranks' states may disagree), and reads on.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/torchrun_resume_job.py JOB.json

JOB = {"catalog": URL, "out": DIR, "runs": [RUN, ...]}, each RUN (in order) being
  {"name": NAME, "spec": RUN SPEC JSON, "workers": W,
   "loader": "torch" (TorchLoader.load_state_dict), "plain" (a plain DataLoader over a TorchBatches
             that loaded the state), "stateful" (torchdata's StatefulDataLoader.load_state_dict) or
             "stateful-elastic" (TorchBatches.load_state_dict(elastic_state(...)) under a new
             StatefulDataLoader),
   "states": {rank: LOADER STATE JSON} for "torch" and "plain",
   "saved_by": {rank: {"spec": RUN SPEC JSON, "take": K}} for the stateful kinds: the rank's state is
               a StatefulDataLoader's (W workers, over that spec) after K batches}
Per run and rank, <out>/<name>-rank<r>.json: the steps read after the resume (to the epoch's end)
and the UserError that ended the run, if any.
"""

import json
import os
import sys

import torch.distributed as dist
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from dsinspect.errors import UserError
from dsinspect.loaders import RunSpec
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader
from dsinspect.loaders.pytorch.dataset import elastic_state


def run(job, spec, rank):
    result = {"steps": [], "error": None}
    try:
        for batch in resumed(job, spec, rank):
            result["steps"].append(int(batch["step"]))
    except UserError as e:
        result["error"] = str(e)
    with open(os.path.join(job["out"], f"{spec['name']}-rank{rank}.json"), "w") as f:
        json.dump(result, f)


def resumed(job, spec, rank):
    """The batches of the rest of the epoch, read the run's way from this rank's state."""
    kind, workers = spec["loader"], spec["workers"]
    dataset = TorchBatches(RunSpec.from_json(spec["spec"]), job["catalog"])
    if kind == "torch":
        loader = TorchLoader(dataset, num_workers=workers)
        loader.load_state_dict(spec["states"][str(rank)])
        return loader
    if kind == "plain":
        dataset.load_state_dict(spec["states"][str(rank)])
        return DataLoader(dataset, batch_size=None, num_workers=workers)
    state = stateful_state(job, spec["saved_by"][str(rank)], workers)
    if kind == "stateful":
        loader = StatefulDataLoader(dataset, batch_size=None, num_workers=workers)
        loader.load_state_dict(state)
        return loader
    dataset.load_state_dict(elastic_state(state))
    return StatefulDataLoader(dataset, batch_size=None, num_workers=workers)


def stateful_state(job, saved_by, workers):
    """A StatefulDataLoader's state after `take` batches of its spec."""
    loader = StatefulDataLoader(TorchBatches(RunSpec.from_json(saved_by["spec"]), job["catalog"]), batch_size=None,
                                num_workers=workers)
    it = iter(loader)
    for _ in range(saved_by["take"]):
        next(it)
    state = loader.state_dict()
    del it
    return json.loads(json.dumps(state))  # as a checkpoint holds it


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

"""One torchrun rank for tests/test_torchrun.py: read runs through TorchLoader, write what was read.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/torchrun_reader.py JOB.json

JOB = {"catalog": URL, "out": DIR, "workers": W,
       "runs": [{"name": NAME, "spec": RUN SPEC JSON, "resume": STATE FILE or null, "save_after": K or null}]}
Per run and rank: <out>/<name>-rank<r>.json holds the batches read ([step, indices, padding]), the
spec in force and any warnings; with save_after, the rank stops after K batches and writes its
state to <out>/<name>-state-rank<r>.json.
"""

import json
import os
import sys
import warnings

import torch.distributed as dist

from dsinspect.loaders import RunSpec
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader


def write_json(path, data):
    with open(path, "w") as f:
        json.dump(data, f)


def read(job, run, rank):
    """Read one run on this rank until the epoch ends or save_after batches were read."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = TorchBatches(RunSpec.from_json(run["spec"]), job["catalog"])
    loader = TorchLoader(dataset, num_workers=job["workers"])
    if run.get("resume"):
        with open(run["resume"]) as f:
            loader.load_state_dict(json.load(f))
    batches = []
    for batch in loader:
        batches.append([int(batch["step"]), batch["indices"].tolist(), batch["padding"].tolist()])
        if len(batches) == run.get("save_after"):
            write_json(os.path.join(job["out"], f"{run['name']}-state-rank{rank}.json"), loader.state_dict())
            break
    write_json(os.path.join(job["out"], f"{run['name']}-rank{rank}.json"),
               {"rank": dataset.rank, "spec": dataset.spec.to_json(), "batches": batches,
                "warnings": [str(w.message) for w in caught]})


def main(job_path):
    with open(job_path) as f:
        job = json.load(f)
    dist.init_process_group("gloo")
    try:
        for run in job["runs"]:
            read(job, run, dist.get_rank())
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

"""One torchrun rank for tests/test_torchrun_packed.py: read packed batches through PackedTorchLoader
(rank and world size from torch.distributed), write what was read.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/torchrun_packed_job.py JOB.json

JOB = {"catalog": URL, "out": DIR, "workers": W, "spec": RUN SPEC JSON, "name": NAME,
       "resume": {rank: STATE FILE} or null, "save_after": K or null}
Writes <out>/<name>-rank<r>.json: the batches read ([step, document_segments rows, input_ids]), or
the one-line error when the pass refused to start; with save_after, the state after K batches in
<out>/<name>-state-rank<r>.json.
"""

import json
import os
import sys

import torch.distributed as dist

from dsinspect.errors import UserError
from dsinspect.loaders import RunSpec
from dsinspect.loaders.pytorch import PackedTorchLoader


def main(job_path):
    with open(job_path) as f:
        job = json.load(f)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {"rank": rank, "batches": [], "error": None}
    try:
        loader = PackedTorchLoader(RunSpec.from_json(job["spec"]), job["catalog"], num_workers=job["workers"])
        out["world"] = loader.spec.world_size
        resume = (job.get("resume") or {}).get(str(rank))
        if resume:
            with open(resume) as f:
                loader.load_state_dict(json.load(f))
        try:
            for batch in loader:
                out["batches"].append([batch["step"], batch["document_segments"].tolist(),
                                       batch["input_ids"].tolist()])
                if len(out["batches"]) == job.get("save_after"):
                    with open(os.path.join(job["out"], f"{job['name']}-state-rank{rank}.json"), "w") as f:
                        json.dump(loader.state_dict(), f)
                    break
        except UserError as e:
            out["error"] = str(e)
        loader.close()
        with open(os.path.join(job["out"], f"{job['name']}-rank{rank}.json"), "w") as f:
            json.dump(out, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

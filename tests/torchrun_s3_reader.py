"""One torchrun rank for tests/test_torchrun_s3.py: read an S3 catalog through one shared, bounded
node-local cache, in step with the other ranks, and write down what was read.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/torchrun_s3_reader.py JOB.json

JOB = {"catalog": URL, "out": DIR, "spec": RUN SPEC JSON, "cache": DIR, "max_bytes": N,
       "torch_workers": W or null}
s3fs finds the server through the environment the test exports (FSSPEC_S3, AWS_*).

Per rank, <out>/bounded-rank<r>.json: the batches a Loader over ShardCache(cache, max_bytes) read
([step, indices, stored row hashes, row hashes recomputed from the data]), its stats and the
shards it evicted. Ranks
wait for each other after every batch, as a DDP step would make them. With torch_workers, also
<out>/torch-rank<r>.json: the batches TorchLoader (DataLoader workers, its default cache) read.
"""

import json
import os
import sys

import torch.distributed as dist

from dsinspect.loaders import Catalog, Loader, RunSpec
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.read.cache import ShardCache


def write_json(path, data):
    with open(path, "w") as f:
        json.dump(data, f)


class EvictionLog(ShardCache):
    """A ShardCache that remembers which shards this rank evicted."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.evicted = []

    def _evict(self, sha256):
        done = super()._evict(sha256)
        if done:
            self.evicted.append(sha256)
        return done


def bounded(job, rank, world):
    spec = RunSpec.from_json(job["spec"])
    assert spec.world_size == world, (spec.world_size, world)
    catalog = Catalog(job["catalog"])
    names = [f.name for f in catalog.version(spec.sources[0].name, spec.sources[0].version).fields]
    cache = EvictionLog(job["cache"], max_bytes=job["max_bytes"], backoff=0.05)
    batches = []
    with Loader(spec, rank=rank, catalog=catalog, cache=cache) as loader:
        for b in loader:
            batches.append([b.step, b.indices.tolist(), [h.hex() for h in b.row_hashes],
                            [h.hex() for h in row_hashes(b.table, names)]])
            dist.barrier()
    write_json(os.path.join(job["out"], f"bounded-rank{rank}.json"),
               {"rank": rank, "batches": batches, "stats": loader.stats(), "evicted": cache.evicted})  # after close


def through_torch(job, rank):
    from dsinspect.loaders.pytorch import TorchBatches, TorchLoader

    loader = TorchLoader(TorchBatches(RunSpec.from_json(job["spec"]), job["catalog"]),
                         num_workers=job["torch_workers"])
    batches = [[int(b["step"]), b["indices"].tolist(), [bytes(h).hex() for h in b["row_hashes"].numpy()]]
               for b in loader]
    loader.close()
    write_json(os.path.join(job["out"], f"torch-rank{rank}.json"), {"rank": loader.dataset.rank, "batches": batches})


def main(job_path):
    with open(job_path) as f:
        job = json.load(f)
    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        bounded(job, rank, world)
        dist.barrier()
        if job.get("torch_workers") is not None:
            through_torch(job, rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

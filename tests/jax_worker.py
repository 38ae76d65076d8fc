"""One JAX process of a multi-process run (tests/test_jax.py): joins the others through
jax.distributed on loopback (gloo collectives on the CPU), reads STEPS global batches through
JaxBatches with the sharding P("data") over every process's device, and writes, per step, the
global batch's ids as all processes see them (process_allgather) and a jitted sum over the global
tokens array; then the state. argv: catalog URL, address, port, process id, processes, steps,
record dir, out file."""

import json
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
url, address, port, pid, processes, steps, record, out = sys.argv[1:9]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=int(processes),
                           process_id=int(pid))

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from dsinspect.loaders import Catalog, RunSpec  # noqa: E402
from dsinspect.loaders.jax import JaxBatches  # noqa: E402

catalog = Catalog(url)
spec = RunSpec.create(catalog, address, seed=3, batch_size=4, world_size=int(processes), shuffle="global")
sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
total = jax.jit(lambda tokens: tokens.sum(axis=1))  # a computation over the global array, per row
got = {"ranks": None, "steps": []}
with JaxBatches(spec, catalog, sharding, columns=["id", "tokens"], record_dir=record) as batches:
    got["ranks"] = batches.ranks
    for _, batch in zip(range(int(steps)), batches):  # range first: no batch read past the last
        ids = multihost_utils.process_allgather(batch["id"], tiled=True)
        sums = multihost_utils.process_allgather(total(batch["tokens"]), tiled=True)
        got["steps"].append({"step": batch["step"], "ids": np.asarray(ids).tolist(),
                             "sums": np.asarray(sums).tolist(), "local": batch["indices"].tolist(),
                             "shape": list(batch["tokens"].shape)})
    got["state"] = batches.state_dict()
with open(out, "w") as f:
    json.dump(got, f)
jax.distributed.shutdown()

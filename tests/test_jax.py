"""The JAX adapter (`dsinspect.loaders.jax.JaxBatches`): the global batch of every step is exactly the
rows `batch_indices` names for each rank, in rank order, in one process and over two JAX processes
joined by `jax.distributed` on loopback (real processes, gloo collectives on the CPU); a state saved
with two processes resumes in one with another batch size at the same position; each rank's run
record passes the same check as a PyTorch job's."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402
from token_catalog import token_catalog  # noqa: E402

from dsinspect.errors import UserError  # noqa: E402
from dsinspect.loaders import RunSpec, batch_indices, check_states, epoch_order  # noqa: E402
from dsinspect.loaders.audit.logcheck import check_log  # noqa: E402
from dsinspect.loaders.jax import JaxBatches  # noqa: E402

pytestmark = pytest.mark.jax  # in a pytest process of its own (.ci/run): JAX's threads make later forks unsafe
ROWS, WIDTH = 96, 8
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return token_catalog(tmp_path_factory.mktemp("jax") / "catalog", "j", ROWS, WIDTH, 7, shard_rows=32,
                         row_group_rows=8, id_type=pa.int32())  # int32: JAX's default integers


def data_sharding():
    return NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))


def test_one_process_reading_two_ranks_assembles_every_ranks_rows_in_rank_order(catalog):
    spec = RunSpec.create(catalog, "j", seed=3, batch_size=4, world_size=2, shuffle="global")
    with JaxBatches(spec, catalog, data_sharding(), columns=["id", "tokens"]) as batches:
        assert batches.ranks == [0, 1]
        seen = []
        for batch in batches:
            want = np.concatenate([batch_indices(spec, batch["step"], r) for r in range(2)])
            assert isinstance(batch["tokens"], jax.Array) and batch["tokens"].shape == (8, WIDTH)
            assert np.asarray(batch["id"]).tolist() == want.tolist()
            assert np.array_equal(np.asarray(batch["tokens"]), catalog.tokens[want])
            assert batch["indices"].tolist() == want.tolist()
            seen.append(batch["step"])
    assert seen == list(range(ROWS // 8))  # one epoch per pass


def test_ragged_columns_are_refused_with_what_to_do(catalog):
    spec = RunSpec.create(catalog, "j", seed=3, batch_size=4)
    with pytest.raises(UserError, match=r"\['text'\] have no fixed shape.*columns="):
        JaxBatches(spec, catalog, data_sharding())


@pytest.mark.slow
def test_two_jax_processes_read_their_own_rows_and_resume_in_one_process(catalog, tmp_path):
    steps, record = 5, str(tmp_path / "run")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outs = [tmp_path / f"out-{p}.json" for p in range(2)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(HERE.parent)}
    procs = [subprocess.Popen([sys.executable, str(HERE / "jax_worker.py"), catalog.url, "j", str(port), str(p), "2",
                               str(steps), record, str(outs[p])], env=env, stderr=subprocess.PIPE, text=True)
             for p in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
    got = [json.loads(out.read_text()) for out in outs]
    spec = RunSpec.create(catalog, "j", seed=3, batch_size=4, world_size=2, shuffle="global")
    assert [g["ranks"] for g in got] == [[0], [1]]
    for k in range(steps):
        want = np.concatenate([batch_indices(spec, k, r) for r in range(2)])
        for p in range(2):
            step = got[p]["steps"][k]
            assert step["step"] == k and step["shape"] == [8, WIDTH]
            assert step["ids"] == want.tolist(), "every process sees the whole global batch, ranks in order"
            assert step["sums"] == catalog.tokens[want].sum(axis=1).tolist()
            assert step["local"] == batch_indices(spec, k, p).tolist(), "each process read only its own rows"
    check_states([g["state"] for g in got])  # one step, one order: what a checkpoint of any rank resumes
    assert [g["state"]["rank"] for g in got] == [0, 1]

    # each rank's record checks out against replay, as a PyTorch job's does
    result = check_log(record, record, catalog=catalog)
    assert result.ok and result.checked == 2 * steps and not result.gaps

    # the state resumes in one process with one rank of twice the batch: the same positions next
    one = RunSpec.create(catalog, "j", seed=3, batch_size=8, world_size=1, shuffle="global")
    with JaxBatches(one, catalog, data_sharding(), columns=["id", "tokens"]) as batches:
        batches.load_state_dict(got[0]["state"])
        nxt = next(iter(batches))
    order = epoch_order(spec, 0)
    assert np.asarray(nxt["id"]).tolist() == order[steps * 8:(steps + 1) * 8].tolist()
    assert sorted(np.asarray(nxt["id"]).tolist()) == sorted(
        np.concatenate([batch_indices(spec, steps, r) for r in range(2)]).tolist())

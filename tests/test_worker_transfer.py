"""How a TorchLoader's workers send batches: a batch's metadata as one packed array (each array
crossing costs more Python work than its bytes), unpacked by the main process into exactly the
tensors batch_to_torch gives, in the same key order, each writable on its own; and in runs that
start at one batch and double up to batches_per_transfer, so the first batch waits for one batch."""

import os
import pickle

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions  # noqa: E402
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader, batch_to_torch  # noqa: E402
from dsinspect.loaders.pytorch.conversion import worker_arrays  # noqa: E402
from dsinspect.loaders.pytorch.dataset import run_span  # noqa: E402
from dsinspect.loaders.pytorch.packing import PACKED, pack_metadata, unpack_metadata  # noqa: E402
from dsinspect.loaders.pytorch.ring import RingReader, RingWriter, new_prefix  # noqa: E402
from dsinspect.loaders.pytorch.transfer import WorkerChunk, receive  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens"),
          Field("text", pa.string(), "text")]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    cat = Catalog(str(tmp_path_factory.mktemp("packing") / "catalog"))
    rows = [{"id": i, "tokens": [i, -i, 7, i % 5], "text": None if i % 9 == 4 else f"row {i}"} for i in range(101)]
    cat.write_version("a", rows, FIELDS, options=WriteOptions(row_group_rows=16, shard_rows=40))
    return cat


def spec_of(catalog):  # 101 rows in batches of 8: the epoch's last batch is padded
    return RunSpec.create(catalog, "a", seed=3, batch_size=8, world_size=1, shuffle="global", last_batch="pad")


def exact(batch):
    """Keys in order, and per tensor dtype, shape and bytes."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return (str(v.dtype), tuple(v.shape), v.numpy().tobytes())
        return {k: one(x) for k, x in v.items()} if isinstance(v, dict) else v
    return [(k, one(v)) for k, v in batch.items()]


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="the ring's segments live in /dev/shm")
def test_a_worker_batch_carries_its_metadata_as_one_array(catalog):
    spec = spec_of(catalog)
    steps = [0, 5, 12]  # 12: the padded last batch
    with Loader(spec, 0, catalog, columns=["tokens", "text"]) as loader:
        batches = [loader.batch_at(s) for s in steps]
        assert batches[-1].padding.any()
        prefix = new_prefix()
        writer, reader = RingWriter(prefix, 0, slots=3), RingReader(prefix, workers=1)
        try:
            sent = writer.put([worker_arrays(b, ("tokens",)) for b in batches])
            # per batch: tokens, text's values and offsets, text's null flags, and the metadata as one
            assert len(sent.places) == 5 * len(steps)
            through_ring = receive(sent, reader)
        finally:
            writer.close()
            reader.close()
        piped = pickle.loads(pickle.dumps(WorkerChunk([worker_arrays(b, ("tokens",)) for b in batches])))
        through_pipe = receive(piped, None)  # the fallback when the ring is unavailable
        for batch, ring_batch, pipe_batch in zip(batches, through_ring, through_pipe):
            want = exact(batch_to_torch(batch, ("tokens",)))
            assert exact(ring_batch) == want and exact(pipe_batch) == want
        got = through_ring[0]
        got["positions"].fill_(-1)  # views of one array, but disjoint: each writable on its own
        assert (got["indices"] >= 0).all() and got["step"].item() == 0 and not got["padding"].any()


def test_pack_round_trip_and_refusals(catalog):
    with Loader(spec_of(catalog), 0, catalog) as loader:
        batch = loader.batch_at(12)
    packed = pack_metadata(batch.plan, batch.hash_array)
    fields = unpack_metadata(packed)
    plan = batch.plan
    assert int(fields["step"]) == 12 and fields["step"].shape == () and int(fields["epoch"]) == 0
    for name, want in (("positions", plan.positions), ("indices", plan.indices), ("sources", plan.sources),
                       ("padding", plan.padding), ("seeds", plan.seeds.view(np.int64)),
                       ("row_hashes", batch.hash_array)):
        kind = np.asarray(want).dtype if name in ("padding", "row_hashes") else np.int64  # as batch_arrays
        assert np.array_equal(fields[name], want) and fields[name].dtype == kind, name
    with pytest.raises(ValueError, match="not packed batch metadata"):
        unpack_metadata(packed[:-1])
    with pytest.raises(ValueError, match="row hashes of shape"):
        pack_metadata(batch.plan, batch.hash_array[:-1])


def test_torch_loader_with_workers_yields_batch_to_torch_of_each_step(catalog):
    spec = spec_of(catalog)
    dataset = TorchBatches(spec, catalog, columns=["id", "tokens", "text"], dense=["tokens"])
    got = [exact(b) for b in TorchLoader(dataset, num_workers=2, batches_per_transfer=3)]
    with Loader(spec, 0, catalog, columns=["id", "tokens", "text"]) as loader:
        want = [exact(batch_to_torch(loader.batch_at(s), ("tokens",))) for s in range(len(got))]
    assert len(got) == 13 and got == want
    assert PACKED not in dict(got[0])


@pytest.mark.parametrize("workers,chunk", [(1, 1), (2, 1), (2, 3), (2, 16), (3, 8), (4, 5)])
def test_runs_tile_the_pass_and_double_up_to_the_chunk(workers, chunk):
    spans = [run_span(run, workers, chunk) for run in range(60)]
    assert [offset for offset, _ in spans] == [sum(n for _, n in spans[:i]) for i in range(60)]  # no gap, no overlap
    sizes = [n for _, n in spans]
    assert sizes[:workers] == [1] * workers and max(sizes) == chunk == sizes[-1]
    assert all(b in (a, min(2 * a, chunk)) for a, b in zip(sizes[::workers], sizes[workers::workers]))


@pytest.mark.parametrize("workers,chunk", [(2, 3), (3, 2)])
def test_a_worker_plans_only_the_steps_it_makes(catalog, monkeypatch, workers, chunk):
    """A TorchLoader worker plans (and fetches ahead for) the steps of its own runs, not every step."""
    from dsinspect.loaders.pytorch.dataset import _ChunkProducer
    from dsinspect.loaders.pytorch.transfer import Transfer
    from dsinspect.loaders.read import loader as loader_module
    planned = []
    real = loader_module.plan_steps
    monkeypatch.setattr(loader_module, "plan_steps", lambda spec, steps, rank: planned.extend(steps) or
                        real(spec, steps, rank))
    spec = spec_of(catalog)
    dataset = TorchBatches(spec, catalog, columns=["id"])
    dataset._transfer = Transfer(None, 1, chunk)  # through the pipe: this test runs the producer in-process
    made = {}
    for worker in range(workers):
        planned.clear()
        runs = list(_ChunkProducer(dataset, 0, 13, workers, worker, chunk))
        made[worker] = [int(b["step"]) for run in runs for b in receive(run, None)]
        assert sorted(planned) == made[worker], f"worker {worker} planned {sorted(planned)}"
        dataset.close()
    assert sorted(s for steps in made.values() for s in steps) == list(range(13))


class FailFrom:
    """A transform that fails at steps from `step` on (in the worker that reads them)."""

    def __init__(self, step):
        self.step = step

    def __call__(self, batch):
        if batch.step >= self.step:
            raise RuntimeError(f"step {batch.step} reached")
        return None


def test_the_first_batches_leave_before_the_worker_reads_the_rest_of_a_run(catalog):
    """Each worker's first run is one batch: steps 0 and 1 arrive although reading step 2 fails
    (with whole runs of batches_per_transfer, the first item already held step 2)."""
    dataset = TorchBatches(spec_of(catalog), catalog, columns=["id"], transform=FailFrom(2))
    loader = TorchLoader(dataset, num_workers=2, batches_per_transfer=8)
    batches = iter(loader)
    try:
        assert [int(next(batches)["step"]) for _ in range(2)] == [0, 1]
        with pytest.raises(RuntimeError, match="step 2 reached"):
            next(batches)
    finally:
        batches.close()
        loader.close()


def test_worker_runs_hold_about_two_mib_judged_by_the_first_batch(catalog, monkeypatch):
    """Runs of batches_per_transfer batches, fewer when the pass's first batch shows they would
    pass ~2 MiB (a ring slot holds a run: large batches would cost memory and gain nothing)."""
    from dsinspect.loaders.pytorch import loader as torch_loader
    loader = TorchLoader(TorchBatches(spec_of(catalog), catalog, columns=["id"]), num_workers=2,
                         batches_per_transfer=16)
    assert loader._run_length(None) == 16
    assert loader._run_length({"x": torch.zeros(1 << 16, dtype=torch.uint8)}) == 16  # 64 KiB: 32 fit
    assert loader._run_length({"x": torch.zeros(1 << 19, dtype=torch.uint8), "y": [np.zeros(8)]}) == 3
    assert loader._run_length({"x": torch.zeros(3 << 20, dtype=torch.uint8)}) == 1
    spec = spec_of(catalog)
    with Loader(spec, 0, catalog, columns=["id", "tokens"]) as reader:
        want = [exact(batch_to_torch(reader.batch_at(s), ("tokens",))) for s in range(13)]
    sizes = []
    real = torch_loader.receive
    monkeypatch.setattr(torch_loader, "receive", lambda item, ring: sizes.append(len(got := real(item, ring))) or got)
    dataset = TorchBatches(spec, catalog, columns=["id", "tokens"], dense=["tokens"])
    assert [exact(b) for b in TorchLoader(dataset, num_workers=2)] == want
    assert max(sizes) > 1  # small batches: runs of several
    sizes.clear()
    monkeypatch.setattr(torch_loader, "_RUN_BYTES", 1)  # every run one batch: still every batch, in order
    dataset = TorchBatches(spec, catalog, columns=["id", "tokens"], dense=["tokens"])
    assert [exact(b) for b in TorchLoader(dataset, num_workers=2)] == want
    assert sizes == [1] * 12  # the first batch is made in this process

"""The PyTorch adapter: the same batches for any worker count, payloads intact, and states that
restore across worker counts (TorchLoader) and through torchdata's StatefulDataLoader."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from state_harness import check_save_load  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from dsinspect.errors import UserError  # noqa: E402
from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions, batch_indices, steps_in_epoch  # noqa: E402
from dsinspect.loaders.order.state import LoaderState  # noqa: E402
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader, batch_to_torch  # noqa: E402
from dsinspect.loaders.pytorch.conversion import split_ragged, unpack  # noqa: E402
from dsinspect.loaders.pytorch.dataset import elastic_state  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")]

TRAJ = pa.struct([("action", pa.list_(pa.int32())), ("reward", pa.list_(pa.float32()))])
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("score", pa.float32(), "scalar"),
          Field("tokens", pa.list_(pa.int32()), "tokens"), Field("fixed", pa.list_(pa.int16(), 4), "tokens"),
          Field("text", pa.string(), "text"), Field("blob", pa.binary(), "bytes"),
          Field("traj", TRAJ, "trajectory")]


def make_rows(n, start=0):
    return [{"id": i, "score": None if i % 11 == 0 else i / 4, "tokens": list(range(i, i + i % 6)),
             "fixed": [i % 7, -1, 2, i % 3], "text": None if i % 13 == 5 else f"row {i} ünï 日本 🎉" * (i % 3),
             "blob": bytes([i % 256]) * (i % 9), "traj": {"action": [i], "reward": [0.5] * (i % 2)}}
            for i in range(start, start + n)]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    cat = Catalog(str(tmp_path_factory.mktemp("torch") / "catalog"))
    opts = WriteOptions(row_group_rows=16, shard_rows=40)
    cat.write_version("a", make_rows(300), FIELDS, options=opts)
    cat.write_version("b", make_rows(120, start=1000), FIELDS, options=opts)
    return cat


SPECS = {
    "global": dict(addresses="a", shuffle="global"),
    "window": dict(addresses="a", shuffle="window", window_shards=2),
    "mixture": dict(addresses={"a": 2.0, "b": 1.0}, shuffle="global", mixture_block=12),
}


def make_spec(catalog, kind, **options):
    opts = {**SPECS[kind], "seed": 7, "batch_size": 8, "world_size": 2, **options}
    return RunSpec.create(catalog, opts.pop("addresses"), **opts)


def comparable(value):
    """Nested batch contents as plain Python that `==` compares exactly (dtype, shape and bytes)."""
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), tuple(value.shape), value.numpy().tobytes())
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return value


def engine_batches(catalog, spec, rank, steps):
    """The reference: the engine's own Loader, converted without torch workers."""
    with Loader(spec, rank, catalog) as loader:
        return [comparable(batch_to_torch(loader.batch_at(s))) for s in steps]


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_same_batches_for_any_worker_count(catalog, kind):
    spec = make_spec(catalog, kind)
    steps = list(range(steps_in_epoch(spec, 0)))
    want = engine_batches(catalog, spec, 1, steps)
    for workers in (0, 1, 4):
        got = [comparable(b) for b in DataLoader(TorchBatches(spec, catalog, rank=1), batch_size=None,
                                                 num_workers=workers)]
        assert [g["step"] for g in got] == [w["step"] for w in want], f"{workers} workers"
        assert got == want, f"{kind}: batches differ with {workers} workers"
    for s, batch in zip(steps, want):
        assert np.frombuffer(batch["indices"][2], np.int64).tolist() == batch_indices(spec, s, 1).tolist()


def test_payloads_come_back_intact_through_workers(catalog):
    spec = make_spec(catalog, "global", world_size=1)
    version = catalog.resolve("a")
    for batch in DataLoader(TorchBatches(spec, catalog), batch_size=None, num_workers=2):
        rows = [version.row(i) for i in batch["indices"].tolist()]
        assert batch["text"]["values"].is_shared() and batch["text"]["values"].dtype == torch.uint8
        assert batch["id"].tolist() == [r["id"] for r in rows]
        assert unpack(batch["blob"]) == [r["blob"] for r in rows]
        assert unpack(batch["text"], text=True) == [r["text"] or "" for r in rows]
        no_nulls = torch.zeros(8, dtype=torch.bool)
        assert batch["nulls"].get("text", no_nulls).tolist() == [r["text"] is None for r in rows]
        assert batch["score"].tolist() == [r["score"] or 0.0 for r in rows]
        assert [t.tolist() for t in split_ragged(batch["tokens"])] == [r["tokens"] for r in rows]
        assert batch["fixed"].shape == (8, 4) and batch["fixed"].tolist() == [r["fixed"] for r in rows]
        assert batch["traj"] == [r["traj"] for r in rows]  # structs stay Python objects
        hashes = [version.row_hash(i) for i in batch["indices"].tolist()]
        assert [bytes(h) for h in batch["row_hashes"].numpy()] == hashes


def test_dense_columns_and_name_checks(catalog):
    version = catalog.write_version("eq", [{"id": i, "tokens": [i, i + 1, i + 2]} for i in range(40)],
                                    FIELDS[:1] + FIELDS[2:3])
    spec = RunSpec.create(catalog, f"eq@{version.id[:12]}", batch_size=4)
    batch = TorchBatches(spec, catalog, dense=["tokens"]).batch_at(0)
    assert batch["tokens"].shape == (4, 3) and batch["tokens"][:, 1].tolist() == (batch["indices"] + 1).tolist()
    with pytest.raises(UserError, match="dense column 'tokens' has lists of lengths"):
        TorchBatches(make_spec(catalog, "global"), catalog, dense=["tokens"]).batch_at(0)
    with pytest.raises(UserError, match="must be a read column holding lists of numbers"):
        TorchBatches(spec, catalog, dense=["id"])
    clash = catalog.write_version("clash", [{"step": 1}], [Field("step", pa.int64(), "scalar")])
    with pytest.raises(UserError, match="clash with batch metadata"):
        TorchBatches(RunSpec.create(catalog, f"clash@{clash.id[:12]}"), catalog)
    with pytest.raises(UserError, match="^TorchBatches needs a catalog"):  # never a default one
        TorchBatches(spec, None)


def test_torch_loader_resumes_across_worker_counts(catalog):
    spec = make_spec(catalog, "window")
    per_epoch = steps_in_epoch(spec, 0)
    want = engine_batches(catalog, spec, 0, range(2 * per_epoch))
    got, state = [], None
    for workers, stop in ((0, 5), (2, 9), (4, per_epoch + 3)):  # the last one crosses an epoch
        loader = TorchLoader(TorchBatches(spec, catalog), num_workers=workers)
        if state is not None:
            loader.load_state_dict(state)
        assert loader.step == len(got)
        while len(got) < stop:
            for batch in loader:  # each pass: the rest of the current epoch
                got.append(comparable(batch))
                if len(got) == stop:
                    break
        state = json.loads(json.dumps(loader.state_dict()))
    loader = TorchLoader(TorchBatches(spec, catalog), num_workers=2)
    loader.load_state_dict(state)
    assert len(loader) == per_epoch - 3 and loader.epoch == 1
    got += [comparable(b) for b in loader]
    assert [g["step"] for g in got] == [comparable(torch.tensor(s)) for s in range(2 * per_epoch)]
    assert got == want
    assert loader.epoch == 2 and loader.state_dict()["position"] == 0


def test_torch_loader_save_load_harness(catalog):
    spec = RunSpec.create(catalog, "b", seed=1, batch_size=8, world_size=2, last_batch="pad")
    per_epoch = steps_in_epoch(spec, 0)
    check_save_load(make=lambda: TorchLoader(TorchBatches(spec, catalog, rank=1)),
                    next_item=lambda loader: next(iter(loader)), total=2 * per_epoch,
                    comparable=lambda b: (int(b["step"]), b["row_hashes"].numpy().tobytes()),
                    boundaries=[per_epoch])


def stateful_loader(dataset, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader
    return StatefulDataLoader(dataset, batch_size=None, num_workers=workers)


def take(iterator, n):
    return [(int(b["step"]), b["row_hashes"].numpy().tobytes()) for _, b in zip(range(n), iterator)]


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes(catalog, workers):
    pytest.importorskip("torchdata")
    spec = make_spec(catalog, "global")
    total = steps_in_epoch(spec, 0)
    reference = take(iter(stateful_loader(TorchBatches(spec, catalog), workers)), total + 1)
    assert [s for s, _ in reference] == list(range(total))
    for k in (0, 3, total - 1, total):
        first = stateful_loader(TorchBatches(spec, catalog), workers)
        it = iter(first)
        assert take(it, k) == reference[:k]
        state = json.loads(json.dumps(first.state_dict()))
        second = stateful_loader(TorchBatches(spec, catalog), workers)
        second.load_state_dict(state)
        assert take(iter(second), total) == reference[k:], f"resumed after {k} batches"


def test_stateful_dataloader_state_moves_to_another_worker_count(catalog):
    pytest.importorskip("torchdata")
    spec = make_spec(catalog, "mixture")
    reference = take(iter(TorchLoader(TorchBatches(spec, catalog))), 100)
    first = stateful_loader(TorchBatches(spec, catalog), 2)
    assert take(iter(first), 5) == reference[:5]
    dataset = TorchBatches(spec, catalog)
    dataset.load_state_dict(elastic_state(first.state_dict()))
    assert take(iter(stateful_loader(dataset, 4)), 100) == reference[5:]
    again = stateful_loader(TorchBatches(spec, catalog), 1)
    again.load_state_dict(first.state_dict())
    with pytest.raises(UserError):  # torchdata passes worker states on unchanged; TorchBatches refuses 2 workers' in 1
        next(iter(again))
    # another world size: the saved step numbers would name other samples; refused, elastic_state is the way
    other = stateful_loader(TorchBatches(spec.replace(world_size=spec.world_size + 1), catalog, rank=0), 2)
    other.load_state_dict(first.state_dict())
    with pytest.raises(UserError, match="saved with world size"):
        next(iter(other))


def test_epochs_with_plain_dataloader_workers(catalog):
    spec = make_spec(catalog, "global")
    per_epoch = steps_in_epoch(spec, 0)
    dataset = TorchBatches(spec, catalog)
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        assert [int(b["epoch"]) for b in loader] == [epoch] * per_epoch
    dataset.set_epoch(1)  # workers cannot tell the parent they finished: set_epoch moves it
    assert int(next(iter(loader))["step"]) == per_epoch
    persistent = DataLoader(TorchBatches(spec, catalog), batch_size=None, num_workers=2, persistent_workers=True)
    passes = [[int(b["step"]) for b in persistent] for _ in range(2)]  # persistent workers keep their place
    assert passes == [list(range(per_epoch)), list(range(per_epoch, 2 * per_epoch))]


def test_rank_and_world_size_come_from_torch_distributed(catalog, tmp_path):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        with pytest.warns(UserWarning, match="world_size 2 but torch.distributed has 1"):
            dataset = TorchBatches(make_spec(catalog, "global"), catalog)
    finally:
        dist.destroy_process_group()
    assert (dataset.rank, dataset.spec.world_size) == (0, 1)
    assert dataset.batch_at(0)["indices"].shape == (8,)


@pytest.mark.parametrize("module", ["dsinspect", "dsinspect.loaders"])
def test_importing_the_engine_does_not_import_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _decode_like(batch):
    """A transform as a training job writes one: a tensor, a numpy array and a number."""
    ids = torch.from_numpy(batch.to_numpy()["id"].astype(np.float32))
    return {"x": ids * 2, "mask": (ids % 3 == 0), "raw": np.arange(len(batch)), "n": len(batch)}


def _made_by(batch):
    """A transform that says which process made the batch."""
    return np.full(len(batch), os.getpid())


def test_torchloader_makes_each_passs_first_batch_here_before_its_workers_start(catalog):
    """A fresh node's (or a resume's) first batch is one read in this process: it waits neither for
    workers to start nor for several workers reading cold at once. The rest come from the workers."""
    spec = make_spec(catalog, "global", world_size=1)
    loader = TorchLoader(TorchBatches(spec, catalog, transform=_made_by), num_workers=2)
    per_epoch = steps_in_epoch(spec, 0)
    for epoch in range(2):
        made = [(int(b["transformed"][0]), int(b["step"])) for b in loader]
        assert [step for _, step in made] == list(range(epoch * per_epoch, (epoch + 1) * per_epoch))
        assert made[0][0] == os.getpid()
        assert os.getpid() not in [pid for pid, _ in made[1:]] and len({pid for pid, _ in made[1:]}) == 2
    resumed = TorchLoader(TorchBatches(spec, catalog, transform=_made_by), num_workers=2)
    resumed.load_state_dict(LoaderState.at(spec, 3, 0).to_json())
    made = [(int(b["transformed"][0]), int(b["step"])) for b in resumed]
    assert made[0] == (os.getpid(), 3) and made[1][0] != os.getpid() and made[1][1] == 4


def test_torchloader_without_workers_reads_in_runs_and_gives_what_a_dataloader_gives(catalog, monkeypatch):
    """Without workers the TorchLoader iterates the dataset itself, steps read together in runs,
    and converts what a DataLoader's default_convert would (a transform's numpy output to tensors)."""
    from dsinspect.loaders.read.reader import BatchReader
    spec = make_spec(catalog, "global", world_size=1)
    want = [comparable(b) for b in DataLoader(TorchBatches(spec, catalog, transform=_decode_like), batch_size=None)]
    reads = []
    real = BatchReader.read
    monkeypatch.setattr(BatchReader, "read", lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    got = [comparable(b) for b in TorchLoader(TorchBatches(spec, catalog, transform=_decode_like))]
    assert got == want and isinstance(got[0]["transformed"]["raw"], tuple)  # a tensor, as comparable() shows it
    reads.clear()
    steps = len([comparable(b) for b in TorchLoader(TorchBatches(spec, catalog))])
    assert steps == steps_in_epoch(spec, 0) > 4 and len(reads) < steps / 2  # runs of 1, 2, 4, ... steps


@pytest.mark.slow
def test_torchloader_workers_send_numpy_and_yield_what_batch_to_torch_gives(catalog):
    """TorchLoader's workers send numpy through the pipe (not a shared-memory segment per tensor);
    what the consumer gets equals batch_to_torch of the same rows read through Arrow alone, and
    the transform's output equals what the DataLoader's own conversion makes of it."""
    from dsinspect.loaders.read.batch import Batch
    spec = make_spec(catalog, "mixture", world_size=1)
    dataset = TorchBatches(spec, catalog, transform=_decode_like)
    got = [comparable(b) for b in TorchLoader(dataset, num_workers=2)]
    want = []
    with Loader(spec, 0, catalog, transform=_decode_like) as loader:
        for step in range(len(got)):
            fast = loader.batch_at(step)
            arrow_only = Batch(fast.plan, fast.table, list(fast.row_hashes), fast.source_names)  # no numpy columns
            out = batch_to_torch(arrow_only)
            out["transformed"] = {**fast.transformed, "raw": torch.from_numpy(fast.transformed["raw"])}
            want.append(comparable(out))
    assert len(got) == steps_in_epoch(spec, 0) and got == want
    direct = comparable(dataset.batch_at(3))  # in this process: tensors made here, as before
    assert {k: v for k, v in direct.items() if k != "transformed"} == {k: v for k, v in want[3].items()
                                                                       if k != "transformed"}

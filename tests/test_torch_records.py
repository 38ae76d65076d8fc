"""Run records from the PyTorch adapters: a TorchLoader (any worker count) writes the lines a Loader
writes; TorchBatches under a plain DataLoader or torchdata's StatefulDataLoader records where its
batches are made; state_dict() leaves every line so far on disk and names the segment."""

import json
import os

import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions, read_run, steps_in_epoch  # noqa: E402
from dsinspect.loaders.audit.logcheck import check_log  # noqa: E402
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader  # noqa: E402
from dsinspect.loaders.pytorch.dataset import elastic_state  # noqa: E402
from dsinspect.loaders.records.runlog import read_log  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")]

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text")]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    cat = Catalog(str(tmp_path_factory.mktemp("torchrec") / "catalog"))
    rows = [{"id": i, "text": f"{i:05d} " + "x" * (600 + i % 50)} for i in range(240)]  # ~650 B: "auto" digests on
    cat.write_version("t", rows, FIELDS, options=WriteOptions(row_group_rows=20, shard_rows=60))
    return cat


def make_spec(catalog, **options):
    return RunSpec.create(catalog, "t", **{"seed": 5, "batch_size": 6, "world_size": 2, "shuffle": "global",
                                           **options})


def lines(directory, rank=1):
    """A rank file's lines without what differs between two runs of the same steps (times, waits)."""
    path = os.path.join(directory, "fingerprints", f"rank-{rank:05d}.jsonl")
    with open(path) as f:
        return [{k: v for k, v in json.loads(line).items() if k not in ("time", "wait")} for line in f]


def step_lines(directory):
    return [e for e in read_log(str(directory)) if "segment" not in e]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("columns,samples", [(None, "auto"), (["id"], "auto"), (["id"], True)])
def test_torch_loader_writes_the_lines_a_loader_writes(catalog, tmp_path, workers, columns, samples):
    spec = make_spec(catalog)
    with Loader(spec, 1, catalog, columns=columns, record_dir=str(tmp_path / "loader"), record_samples=samples) as ld:
        want = [b.step for b in ld]
    loader = TorchLoader(TorchBatches(spec, catalog, columns, rank=1, record_dir=str(tmp_path / "torch"),
                                      record_samples=samples), num_workers=workers, batches_per_transfer=3)
    got = [int(b["step"]) for b in loader]
    loader.close()
    assert got == want == list(range(steps_in_epoch(spec, 0)))
    expected = lines(tmp_path / "loader")
    assert lines(tmp_path / "torch") == expected  # headers and step lines; the workers wrote none
    assert all("samples" in e for e in expected[1:]) == (samples is True or columns is None)
    assert all("wait" in e for e in step_lines(tmp_path / "torch"))
    assert os.listdir(tmp_path / "torch" / "specs") == os.listdir(tmp_path / "loader" / "specs")


def test_plain_dataloader_workers_record_every_step_once(catalog, tmp_path):
    spec = make_spec(catalog, world_size=1)
    record = str(tmp_path / "run")
    got = [int(b["step"]) for b in DataLoader(TorchBatches(spec, catalog, record_dir=record), batch_size=None,
                                                num_workers=2)]
    steps = list(range(steps_in_epoch(spec, 0)))
    assert got == steps
    logged = step_lines(record)  # the workers are gone, and nothing was closed: each line went out at once
    assert sorted(e["step"] for e in logged) == steps
    assert len({e["seg"] for e in logged}) == 1
    result = check_log(record, record, catalog=catalog)
    assert result.ok and result.checked == len(steps) and not result.gaps


def test_state_dict_makes_the_lines_durable_and_names_the_segment(catalog, tmp_path):
    spec = make_spec(catalog)
    record = str(tmp_path / "run")
    loader = TorchLoader(TorchBatches(spec, catalog, rank=0, record_dir=record), num_workers=2)
    it = iter(loader)
    for _ in range(5):
        next(it)
    # buffered (64 at a time), but for the first batch's, made in this process and written out before the workers fork
    assert [e["step"] for e in step_lines(record)] == [0]
    state = loader.state_dict()
    assert [e["step"] for e in step_lines(record)] == [0, 1, 2, 3, 4]  # ... until the state is saved
    header = [e for e in read_log(record) if "segment" in e]
    assert state["segment"] == header[0]["segment"] and header[0]["parent"] is None
    for _ in range(5):
        next(it)
    loader.state_dict()  # steps 5..9 on disk too: a later checkpoint the job will not resume from
    loader.close()

    resumed = TorchLoader(TorchBatches(spec, catalog, rank=0, record_dir=record), num_workers=1)
    resumed.load_state_dict(state)
    rest = [int(b["step"]) for b in resumed]
    resumed.close()
    assert rest == list(range(5, steps_in_epoch(spec, 0)))
    run = read_run(record)
    assert [s.parent for s in run.chain] == [state["segment"], None]
    result = check_log(record, record, catalog=catalog, ranks=[0])
    assert result.ok and result.superseded == 5 and not result.gaps


def stateful_loader(dataset, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader
    return StatefulDataLoader(dataset, batch_size=None, num_workers=workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_records_and_its_state_carries_the_segment(catalog, tmp_path, workers):
    pytest.importorskip("torchdata")
    spec = make_spec(catalog, world_size=1)
    record = str(tmp_path / "run")
    total = steps_in_epoch(spec, 0)
    first = stateful_loader(TorchBatches(spec, catalog, record_dir=record), workers)
    it = iter(first)
    assert [int(next(it)["step"]) for _ in range(7)] == list(range(7))
    state = json.loads(json.dumps(first.state_dict()))
    del it  # its workers stop
    segment = elastic_state(state)["segment"]
    assert segment == [e for e in read_log(record) if "segment" in e][0]["segment"]
    assert {e["seg"] for e in step_lines(record)} == {segment}

    second = stateful_loader(TorchBatches(spec, catalog, record_dir=record), workers)
    second.load_state_dict(state)
    assert [int(b["step"]) for b in second] == list(range(7, total))
    second.state_dict()  # with num_workers=0 the lines wait in this process (64 at a time) until a state is saved
    result = check_log(record, record, catalog=catalog)
    assert result.ok and not result.gaps and result.checked == total, result.to_json()

    # the global state inside it restores into another worker count: a new segment from step 7
    dataset = TorchBatches(spec, catalog, record_dir=record)
    dataset.load_state_dict(elastic_state(state))
    assert [int(b["step"]) for b in stateful_loader(dataset, 1)] == list(range(7, total))  # 1 worker: each line out
    run = read_run(record)
    assert run.chain[0].start == 7 and run.chain[0].parent == segment
    result = check_log(record, record, catalog=catalog)
    assert result.ok and not result.gaps and result.superseded >= total - 7

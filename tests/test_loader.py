"""The Loader reads what the order says, records what it read, and resumes in O(1)."""

import json

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.errors import UserError
from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.loader import Loader
from dsinspect.loaders.manifest import Field
from dsinspect.loaders.order import batch_indices, steps_in_epoch
from dsinspect.loaders.runlog import batch_fingerprint, read_fingerprints, read_specs, spec_for_step
from dsinspect.loaders.spec import RunSpec
from dsinspect.loaders.state import LoaderState
from dsinspect.loaders.writer import WriteOptions
from conftest import TOY_FIELDS, toy_rows


@pytest.fixture
def cat(tmp_path):
    c = Catalog(str(tmp_path / "cat"))
    c.write_version("toy", toy_rows(300), TOY_FIELDS, key="id", options=WriteOptions(shard_rows=40, row_group_rows=16))
    c.write_version("other", toy_rows(50, start=1000), TOY_FIELDS, key="id", options=WriteOptions(shard_rows=20))
    return c


@pytest.mark.parametrize("shuffle", ["none", "global", "window"])
@pytest.mark.parametrize("prefetch", [0, 3])
def test_batches_hold_the_planned_rows(cat, shuffle, prefetch):
    spec = RunSpec.create(cat, "toy", seed=5, batch_size=7, world_size=3, shuffle=shuffle, window_shards=2)
    version = cat.resolve("toy")
    with Loader(spec, rank=1, catalog=cat, prefetch=prefetch) as loader:
        batches = list(loader)
    assert len(batches) == steps_in_epoch(spec, 0) == 300 // 21
    for b in batches:
        assert list(b.indices) == list(batch_indices(spec, b.step, 1))
        assert b.table.column("id").to_pylist() == [int(i) for i in b.indices]  # toy ids equal their index
        assert b.row_hashes == [version.row_hash(int(i)) for i in b.indices]
        assert b.fingerprint == batch_fingerprint(b.row_hashes)


def test_epochs_follow_each_other_and_reshuffle(cat):
    spec = RunSpec.create(cat, "toy", seed=1, batch_size=10, world_size=1)
    loader = Loader(spec, catalog=cat)
    first, second = [b.indices for b in loader], [b.indices for b in loader]
    assert loader.epoch == 2 and first[0].tolist() != second[0].tolist()
    assert sorted(np.concatenate(first)) == sorted(np.concatenate(second)) == list(range(300))
    loader.close()


def test_mixture_reads_each_source_and_names_it(cat):
    spec = RunSpec.create(cat, {"toy": 3.0, "other": 1.0}, seed=2, batch_size=16, mixture_block=64)
    with Loader(spec, catalog=cat) as loader:
        b = next(iter(loader))
    ids = b.table.column("id").to_pylist()
    for k, i, got in zip(b.sources, b.indices, ids):
        assert got == (i if k == 0 else 1000 + i)
    assert set(b.sources.tolist()) == {0, 1} and b.source_names == ("toy", "other")


def test_columns_select_and_numpy_conversion(cat):
    spec = RunSpec.create(cat, "toy", batch_size=4, shuffle="none")
    with Loader(spec, catalog=cat, columns=["id"]) as loader:
        b = next(iter(loader))
    assert b.table.column_names == ["id"]
    assert b.to_numpy()["id"].tolist() == [0, 1, 2, 3]
    with pytest.raises(UserError, match="no field"):
        Loader(spec, catalog=cat, columns=["nope"])


def test_state_is_tiny_json_and_restores_in_o1(cat):
    spec = RunSpec.create(cat, "toy", seed=9, batch_size=5, world_size=2)
    a = Loader(spec, rank=0, catalog=cat)
    it = iter(a)
    for _ in range(7):
        next(it)
    state = json.loads(json.dumps(a.state_dict()))
    assert len(json.dumps(state)) < 400 and state["step"] == 7
    rest = [b.indices.tolist() for b in it]
    b = Loader(spec, rank=0, catalog=cat)
    b.load_state_dict(state)
    assert [x.indices.tolist() for x in b] == rest
    a.close(), b.close()


def test_records_specs_and_fingerprints(cat, tmp_path):
    spec = RunSpec.create(cat, "toy", seed=3, batch_size=6, world_size=2)
    logs = {}
    for rank in (0, 1):
        with Loader(spec, rank=rank, catalog=cat, record_dir=str(tmp_path / "run")) as loader:
            logs[rank] = {b.step: b.fingerprint for b in loader}
    assert read_specs(str(tmp_path / "run")) == [spec]
    entries = list(read_fingerprints(str(tmp_path / "run")))
    assert len(entries) == 2 * steps_in_epoch(spec, 0)
    for e in entries:
        assert e["fingerprint"] == logs[e["rank"]][e["step"]] and e["of"] == "stored" and e["n"] == 6
    # a resumed segment with another world size is recorded as its own spec
    resumed = Loader(spec.replace(world_size=3), rank=0, catalog=cat, record_dir=str(tmp_path / "run"))
    resumed.load_state_dict(LoaderState.at(spec, 4, 0).to_json())
    specs = read_specs(str(tmp_path / "run"))
    assert [s.start.step for s in specs] == [0, 4] and spec_for_step(specs, 10).world_size == 3
    resumed.close()


@pytest.mark.parametrize("name", ["demo-text", "demo-images", "demo-video", "demo-rl"])
def test_every_role_reads_back_exactly_through_the_cache(name):
    """Nested trajectories, binary media, token lists and text: batches equal the stored rows."""
    import dsinspect

    cat = dsinspect.open_catalog()
    spec = RunSpec.create(cat, f"{name}@v2", seed=4, batch_size=3, shuffle="global")
    version = cat.resolve(f"{name}@v2")
    with Loader(spec, catalog=cat) as loader:
        for b in loader:
            assert b.rows() == [version.row(int(i)) for i in b.indices]
            assert b.row_hashes == [version.row_hash(int(i)) for i in b.indices]


def test_transform_runs_on_each_batch_seeded_per_sample(cat):
    def jitter(batch):
        return [int(np.random.default_rng(int(s)).integers(0, 1000)) + i for s, i in zip(batch.seeds, batch.indices)]

    spec = RunSpec.create(cat, "toy", seed=8, batch_size=4)
    with Loader(spec, catalog=cat, transform=jitter) as a, Loader(spec, catalog=cat, transform=jitter, prefetch=0) as b:
        first, again = [x.transformed for x in a], [x.transformed for x in b]
    assert first == again and first[0] != first[1]

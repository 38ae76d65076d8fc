"""The Loader reads what the order says, records what it read, and resumes in O(1)."""

import json

import numpy as np
import pyarrow as pa
import pytest
from conftest import TOY_FIELDS, toy_rows

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.order.plan import batch_indices, steps_in_epoch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.records.runlog import batch_fingerprint, read_log, read_specs, spec_for_step
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.writer import WriteOptions


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


@pytest.mark.parametrize("source", ["toy", "mixture"])
def test_runs_read_together_equal_batches_read_one_by_one(cat, source):
    """Iteration reads runs of steps in one gather (1, 2, 4, ... up to 16) and DataLoader workers
    read `batches_at`: every batch equals `batch_at` of its step, values, hashes and order."""
    addresses = "toy" if source == "toy" else {"toy": 3.0, "other": 1.0}
    spec = RunSpec.create(cat, addresses, seed=3, batch_size=5, world_size=2, shuffle="global", mixture_block=32)
    with Loader(spec, rank=1, catalog=cat) as run, Loader(spec, rank=1, catalog=cat) as single:
        iterated = list(run)
        together = run.batches_at(range(3, 24))
        for b in iterated + together:
            alone = single.batch_at(b.step)
            assert b.indices.tolist() == alone.indices.tolist() and b.sources.tolist() == alone.sources.tolist()
            assert b.table.equals(alone.table) and b.row_hashes == alone.row_hashes
            assert b.to_numpy()["id"].tolist() == alone.to_numpy()["id"].tolist()
    assert [b.step for b in iterated] == list(range(steps_in_epoch(spec, 0)))
    assert [b.step for b in together] == list(range(3, 24))


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
    assert [s for _, s in read_specs(str(tmp_path / "run"))] == [spec]
    entries = list(read_log(str(tmp_path / "run")))
    headers = [e for e in entries if "segment" in e]
    lines = [e for e in entries if "step" in e]
    assert len(headers) == 2 and {h["rank"] for h in headers} == {0, 1} and headers[0]["parent"] is None
    assert len(lines) == 2 * steps_in_epoch(spec, 0)
    for e in lines:
        assert e["fingerprint"] == logs[e["rank"]][e["step"]] and e["of"] == "stored" and e["n"] == 6
        assert e["seg"] == headers[0]["segment"]
    # a resumed segment with another world size is recorded as its own spec, naming its parent
    resumed = Loader(spec.replace(world_size=3), rank=0, catalog=cat, record_dir=str(tmp_path / "run"))
    resumed.load_state_dict(LoaderState.at(spec, 4, 0, segment=headers[0]["segment"]).to_json())
    specs = [s for _, s in read_specs(str(tmp_path / "run"))]
    assert [s.start.step for s in specs] == [0, 4] and spec_for_step(specs, 10).world_size == 3
    resumed.close()
    header = [e for e in read_log(str(tmp_path / "run")) if "segment" in e and e["rank"] == 0][-1]
    assert (header["parent"], header["start"], header["world_size"]) == (headers[0]["segment"], 4, 3)
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


# -- the fast gather paths equal Arrow's own take ----------------------------------------------

WIDE_FIELDS = [Field("id", pa.int64(), "scalar", nullable=False),
               Field("tok", pa.list_(pa.int32()), "tokens"),            # one length everywhere: dense
               Field("mixed", pa.list_(pa.int32()), "tokens"),          # dense in shards 0-1, ragged in 2
               Field("perlen", pa.list_(pa.int16()), "tokens"),         # dense per shard, widths differ
               Field("empty", pa.list_(pa.int64()), "tokens"),          # every row empty
               Field("maybe", pa.list_(pa.int64()), "tokens"),          # null rows: Arrow's take
               Field("fsl", pa.list_(pa.int16(), 3), "tokens"),         # fixed-size list: dense
               Field("f", pa.float64(), "scalar"), Field("ts", pa.timestamp("us"), "scalar"),
               Field("fb", pa.binary(5), "bytes"), Field("blob", pa.binary(), "bytes")]


def wide_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        shard = i // 20
        rows.append({"id": i, "tok": rng.integers(-2**31, 2**31, 6, dtype=np.int64).astype(np.int32).tolist(),
                     "mixed": list(range(i, i + (4 if shard < 2 else i % 5))),
                     "perlen": [i % 100] * (3 + shard), "empty": [],
                     "maybe": None if i % 7 == 3 else rng.integers(0, 9, i % 3).tolist(),
                     "fsl": rng.integers(-9, 9, 3).tolist(), "f": float(rng.random()),
                     "ts": int(rng.integers(0, 2**50)), "fb": rng.bytes(5),
                     "blob": rng.bytes(int(rng.integers(0, 30)))})
    return rows


@pytest.mark.parametrize("shuffle", ["none", "global"])
def test_fast_gathers_equal_arrows_take(tmp_path, shuffle):
    """Dense (numpy) and list gathers, across shards and with ragged, empty and null rows, give the
    rows, Arrow table and numpy arrays that Arrow's generic take of the stored table gives."""
    from dsinspect.loaders.read.batch import _column_to_numpy
    c = Catalog(str(tmp_path / "cat"))
    rows = wide_rows(60)
    c.write_version("wide", rows, WIDE_FIELDS, key="id", options=WriteOptions(shard_rows=20, row_group_rows=8))
    stored = pa.Table.from_pylist(rows, schema=pa.schema([pa.field(f.name, f.type, f.nullable) for f in WIDE_FIELDS]))
    spec = RunSpec.create(c, "wide", seed=3, batch_size=9, shuffle=shuffle)
    seen = 0
    with Loader(spec, catalog=c) as loader:
        for b in loader:
            want = stored.take(pa.array(b.indices.astype(np.int64)))
            assert b.rows() == want.to_pylist()
            got_numpy = b.to_numpy()
            for name in b.table.column_names:
                expect = _column_to_numpy(want.column(name).combine_chunks().cast(b.table.schema.field(name).type))
                got = got_numpy[name]
                assert got.shape == expect.shape and got.dtype == expect.dtype, name
                assert [np.asarray(x).tolist() for x in got] == [np.asarray(x).tolist() for x in expect], name
            assert b.row_hashes == [c.resolve("wide").row_hash(int(i)) for i in b.indices]
            seen += len(b)
    assert seen == 54


def test_dense_columns_are_numpy_until_arrow_is_asked_for(cat):
    spec = RunSpec.create(cat, "toy", seed=5, batch_size=7, shuffle="global")
    with Loader(spec, catalog=cat, columns=["id"]) as loader:
        b = next(iter(loader))
        ids = b.to_numpy()["id"]
        assert ids.tolist() == b.indices.tolist() and not ids.flags.writeable  # shared with the Arrow form
        assert b.table.column("id").to_pylist() == ids.tolist()
        assert b.hash_array.shape == (7, 16) and b.hash_array.tobytes() == b"".join(b.row_hashes)

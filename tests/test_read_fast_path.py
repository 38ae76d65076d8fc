"""The loader's lean per-batch path: a column whose every block is verified skips per-read checks,
batches are split by shard for a whole chunk of steps at once, and permutations walk their last
indices in Python ints. None of it may change a batch or let an unchecked byte through."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.errors import IntegrityError
from dsinspect.loaders import HASH_COLUMN, Catalog, Field, Loader, RunSpec, WriteOptions
from dsinspect.loaders.order.permutation import Permutation, key_of, mix64
from dsinspect.loaders.order.plan import plan_batch, plan_steps
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.reader import BatchReader

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens"),
          Field("blob", pa.binary(), "bytes")]


def write(tmp_path, rows=900, shard_rows=300, width=256, blob=300, name="fast"):
    """Dense tokens and ragged blobs (each over many 16 KiB blocks), and an id column."""
    rng = np.random.default_rng(7)
    data = [{"id": i, "tokens": rng.integers(0, 1 << 30, width, dtype=np.int32).tolist(),
             "blob": rng.bytes(int(rng.integers(0, blob)))} for i in range(rows)]
    catalog = Catalog(str(tmp_path / "catalog"))
    version = catalog.write_version(name, data, FIELDS, key="id", options=WriteOptions(shard_rows=shard_rows))
    return catalog, version, data


def flip(root: Path, sha: str, column: str, at: float) -> None:
    """Flip one byte of a column's values in a cached shard, `at` (0..1) of the way through them."""
    arrow = root / f"{sha}.arrow"
    data = pa.memory_map(str(arrow)).read_buffer()
    col = pa.ipc.open_file(data).get_batch(0).column(column)
    buf = col.values.buffers()[1] if pa.types.is_list(col.type) else col.buffers()[-1]
    offset = buf.address - data.address + int(buf.size * at)
    raw = bytearray(arrow.read_bytes())
    raw[offset] ^= 0x40
    arrow.write_bytes(bytes(raw))


def read_all(spec, catalog, cache, columns):
    """Every batch of the epoch until the loader refuses one: (batches read, the error or None)."""
    got = []
    with Loader(spec, catalog=catalog, cache=cache, columns=columns) as loader:
        try:
            for b in loader:
                got.append((b.indices.copy(), b.to_numpy(), b.row_hashes))
        except IntegrityError as e:
            return got, e
    return got, None


def assert_stored(got, data, columns):
    for indices, arrays, _ in got:
        for c in columns:
            want = [data[i][c] for i in indices]
            have = arrays[c].tolist()
            assert have == want, f"a batch carried {c} bytes that are not the stored ones"


@pytest.mark.parametrize("column", ["tokens", "blob"])
def test_a_verified_column_does_not_vouch_for_another(tmp_path, column):
    """One cache (one process): `id` is read over a whole epoch (every block it reaches verified,
    its reads now unchecked); a block of another column, damaged on disk and never read, is still
    refused the first time a batch would carry it, and no batch before carries a damaged byte."""
    catalog, version, data = write(tmp_path, blob=4000)
    root = tmp_path / "cache"
    spec = RunSpec.create(catalog, "fast", seed=5, batch_size=12, shuffle="global")
    cache = ShardCache(root)
    got, error = read_all(spec, catalog, cache, ["id"])
    assert error is None and len(got) == 75
    flip(root, version.manifest.shards[1].sha256, column, at=0.6)
    got, error = read_all(spec, catalog, cache, [column])
    assert error is not None and "do not match" in str(error), "the damaged block went unchecked"
    assert_stored(got, data, [column])


@pytest.mark.parametrize("column", ["tokens", "blob"])
def test_a_damaged_block_at_the_end_of_a_column_is_refused_when_reached(tmp_path, column):
    """Read in order, a column's first blocks are all verified long before its last ones: the
    column counts as verified only when every block any of its rows reaches is, so a damaged
    block near its end is refused when the loader gets there, not skipped."""
    catalog, version, data = write(tmp_path, rows=600, width=1024, blob=8000)
    root = tmp_path / "cache"
    spec = RunSpec.create(catalog, "fast", seed=5, batch_size=10, shuffle="none")
    read_all(spec, catalog, ShardCache(root), ["id"])  # fills the cache
    flip(root, version.manifest.shards[1].sha256, column, at=0.95)
    got, error = read_all(spec, catalog, ShardCache(root), [column])
    assert error is not None and "do not match" in str(error), "the damaged block went unchecked"
    assert len(got) >= 30, "refused before shard 1 was reached"
    assert_stored(got, data, [column])


def test_a_block_damaged_after_the_fast_path_is_caught_by_the_next_process(tmp_path):
    """Once a process has verified every block a column reaches, it reads without checks; the
    cache's promise is per process: a new process (a new cache object) checks again, refuses the
    damaged block, drops the entry, and the next read fetches it afresh, correct."""
    catalog, version, data = write(tmp_path)
    root = tmp_path / "cache"
    spec = RunSpec.create(catalog, "fast", seed=6, batch_size=30, shuffle="global")
    cache = ShardCache(root)
    for _ in range(2):  # the second epoch runs entirely on the fast path
        got, error = read_all(spec, catalog, cache, ["tokens"])
        assert error is None
        assert_stored(got, data, ["tokens"])
    sha = version.manifest.shards[2].sha256
    flip(root, sha, "tokens", at=0.3)
    got, error = read_all(spec, catalog, ShardCache(root), ["tokens"])
    assert error is not None and str(root / f"{sha}.arrow") in str(error)
    assert_stored(got, data, ["tokens"])
    assert not (root / f"{sha}.json").exists(), "the damaged entry is dropped"
    got, error = read_all(spec, catalog, ShardCache(root), ["tokens", "blob"])
    assert error is None and len(got) == 30
    assert_stored(got, data, ["tokens", "blob"])


def test_batches_are_the_same_on_the_fast_path(tmp_path):
    """Epoch 2 (every block verified, every split precomputed) gives the batches epoch 1 gave and
    the stored rows, for dense, ragged and row-hash columns, including a restored loader."""
    catalog, version, data = write(tmp_path, rows=700, shard_rows=160)
    spec = RunSpec.create(catalog, "fast", seed=8, batch_size=24, shuffle="global")
    stored_hashes = pa.concat_tables([version.read_shard(s) for s in range(5)]).column(HASH_COLUMN).to_pylist()
    with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        first = [(b.indices.copy(), b.rows(), b.row_hashes) for b in loader]
        state = None
        second = []
        for b in loader:
            second.append((b.indices.copy(), b.rows(), b.row_hashes))
            if len(second) == 10:
                state = loader.state_dict()
    with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "cache")) as resumed:
        resumed.load_state_dict(state)
        tail = [(b.indices.copy(), b.rows(), b.row_hashes) for b in resumed]
    assert len(first) == len(second) == 29
    for indices, rows, hashes in first:
        assert rows == [data[i] for i in indices] and hashes == [stored_hashes[i] for i in indices]
    assert [(i.tolist(), r, h) for i, r, h in second[10:]] == [(i.tolist(), r, h) for i, r, h in tail]


def test_a_chunk_split_by_shard_puts_every_row_back_in_plan_order(tmp_path):
    """`BatchReader.layouts` (many plans split in one sort) names, for every row of every plan,
    its shard and row there and its place in the batch; a single in-order part says None."""
    catalog, _, _ = write(tmp_path, rows=600, shard_rows=90)
    catalog.write_version("other", [{"id": i, "tokens": [i] * 4, "blob": b"x"} for i in range(250)], FIELDS,
                          key="id", options=WriteOptions(shard_rows=64))
    for spec in (RunSpec.create(catalog, "fast", seed=1, batch_size=37, shuffle="global"),
                 RunSpec.create(catalog, "fast", seed=1, batch_size=50, shuffle="none"),
                 RunSpec.create(catalog, {"fast": 0.7, "other": 0.3}, seed=2, batch_size=29, shuffle="window",
                                window_shards=2)):
        reader = BatchReader(catalog, spec)
        plans = plan_steps(spec, range(0, 40), 0)
        for plan, layout in zip(plans, reader.layouts(plans)):
            n = len(plan.indices)
            seen = np.zeros(n, int)
            for (k, shard), rows, where in layout:
                where = np.arange(n) if where is None else where
                starts = reader.versions[k].shard_starts
                assert (rows >= 0).all() and (rows < starts[shard + 1] - starts[shard]).all()
                assert (plan.sources[where] == k).all()
                assert (starts[shard] + rows == plan.indices[where]).all()
                seen[where] += 1
            assert (seen == 1).all()
            assert len({key for key, _, _ in layout}) == len(layout), "one part per shard"
        reader.close()


def _feistel_reference(n: int, key: int, i: int) -> int:
    """The permutation's definition in plain Python ints (a second, independent spelling)."""
    bits = max(2, (n - 1).bit_length())
    bits += bits % 2
    half, mask, u64 = bits // 2, (1 << (bits // 2)) - 1, (1 << 64) - 1
    keys = [key_of(key, r) for r in range(4)]

    def mix(x):
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & u64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & u64
        return x ^ (x >> 31)

    x = i
    while True:
        left, right = x >> half, x & mask
        for k in keys:
            left, right = right, left ^ (mix(right ^ k) & mask)
        x = (left << half) | right
        if x < n:
            return x


@pytest.mark.parametrize("n", [2, 3, 17, 1000, 100_003, 2**33 + 5])
def test_permutation_matches_its_plain_definition(n):
    """Vectorised rounds, walking only the indices still out of range, and the last walks in
    Python ints give what the plain definition gives, for single indices and whole arrays."""
    rng = np.random.default_rng(n % 1000)
    key = int(rng.integers(0, 2**63))
    p = Permutation(n, key)
    idx = rng.integers(0, n, 400)
    want = [_feistel_reference(n, key, int(i)) for i in idx]
    assert p(idx).tolist() == want
    assert [int(p(int(i))) for i in idx[:20]] == want[:20]
    assert p(idx[:33]).tolist() == want[:33]
    if n <= 100_003:
        assert np.array_equal(np.sort(p(np.arange(n))), np.arange(n))
    assert mix64(np.array([1, 2], np.uint64)).tolist() == [int(_mix_one(1)), int(_mix_one(2))]


def _mix_one(x: int) -> int:
    u64 = (1 << 64) - 1
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & u64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & u64
    return x ^ (x >> 31)


def test_planning_a_chunk_equals_planning_each_step(tmp_path):
    """plan_steps (vectorised step location, across an epoch boundary and from a resumed start)
    equals plan_batch step by step, and refuses what plan_batch refuses."""
    catalog, _, _ = write(tmp_path, rows=300, shard_rows=100)
    spec = RunSpec.create(catalog, "fast", seed=3, batch_size=16, shuffle="global", world_size=2)
    resumed = RunSpec.from_json({**spec.to_json(), "start": {"step": 5, "epoch": 0, "position": 5 * 32 + 7}})
    for s in (spec, resumed):
        steps = list(range(s.start.step, s.start.step + 25)) + [s.start.step + 40, s.start.step + 3]
        for rank in (0, 1):
            for got, step in zip(plan_steps(s, steps, rank), steps):
                want = plan_batch(s, step, rank)
                assert (got.step, got.epoch, got.rank) == (want.step, want.epoch, want.rank)
                for f in ("positions", "sources", "indices", "padding", "seeds"):
                    assert np.array_equal(getattr(got, f), getattr(want, f)), (step, f)
    from dsinspect.errors import UserError
    with pytest.raises(UserError, match="outside the world size"):
        plan_steps(spec, [0, 1], 2)
    with pytest.raises(UserError, match="negative"):
        plan_steps(spec, [3, -1], 0)
    with pytest.raises(UserError, match="before this run spec's start"):
        plan_steps(resumed, [4, 6], 0)

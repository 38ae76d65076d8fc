"""A bounded shard cache evicts by the known order (Belady's policy: the shard needed furthest in the
future goes first), measured against a simulation of the same order under Belady's and LRU."""

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions
from dsinspect.loaders.order.future import NextUse, cache_fetches, shard_uses
from dsinspect.loaders.order.plan import batch_indices
from dsinspect.loaders.read.cache import ShardCache

SHARDS, ROWS, BATCH, EPOCHS = 16, 64, 8, 3


def test_the_simulation_gives_the_textbook_fault_counts():
    """The classic reference string: with 3 frames the optimum faults 7 times and LRU 10; with 4,
    6 and 8 (one use per step, unit sizes)."""
    uses = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]
    steps, sizes = range(len(uses)), [1] * 6
    assert [cache_fetches(steps, uses, sizes, c, "belady")[1] for c in (3, 4)] == [7, 6]
    assert [cache_fetches(steps, uses, sizes, c, "lru")[1] for c in (3, 4)] == [10, 8]


def test_shards_read_at_one_step_are_never_evicted_for_each_other():
    """Two shards read at the same step, in a cache of room for one: both are held (over the bound,
    as pinned shards are) rather than one fetched twice."""
    assert cache_fetches([0, 0, 1, 1], [0, 1, 0, 1], [1, 1], 1, "belady") == (2, 2)


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    rng = np.random.default_rng(1)
    rows = [{"id": i, "blob": rng.bytes(2000)} for i in range(SHARDS * ROWS)]
    catalog = Catalog(str(tmp_path_factory.mktemp("policy") / "catalog"))
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("blob", pa.binary(), "bytes")]
    return catalog.write_version("w", rows, fields, key="id",
                                 options=WriteOptions(shard_rows=ROWS, row_group_rows=16, shard_index=False))


def test_next_use_names_the_first_step_at_or_after_that_reads_a_shard(version):
    spec = RunSpec.create(version.catalog, "w", seed=3, batch_size=BATCH, world_size=2, shuffle="window",
                          window_shards=2)
    steps = 2 * SHARDS * ROWS // (2 * BATCH)
    future = NextUse(spec, 0, steps)
    reads = {s: {int(i) // ROWS for r in range(2) for i in batch_indices(spec, s, r)} for s in range(steps)}
    for shard in range(SHARDS):
        for now in (0, 5, steps // 2, steps - 1):
            want = next((s for s in range(now, steps) if shard in reads[s]), None)
            assert future.after(shard, now) == (float("inf") if want is None else want)
    assert future.after(SHARDS + 3, 0) == float("inf")  # not a shard of this run
    got_steps, got_keys = shard_uses(spec, 0, steps)
    assert sorted(zip(got_steps.tolist(), got_keys.tolist())) == sorted((s, k) for s in reads for k in reads[s])


def read_epochs(version, tmp_path, name, bound, policy):
    spec = RunSpec.create(version.catalog, "w", seed=3, batch_size=BATCH, shuffle="window", window_shards=2)
    cache = ShardCache(tmp_path / name, max_bytes=bound)
    with Loader(spec, 0, version.catalog, cache=cache) as loader:
        if policy == "lru":
            cache.evict_by(None)  # the cache as it was: least recently used first
        seen = [b.indices.tolist() for _ in range(EPOCHS) for b in loader]
        return loader.stats()["cache_misses"], seen, spec


def test_a_bounded_cache_evicting_by_the_order_fetches_less_than_lru(version, tmp_path):
    """Half the data fits: across epochs the cache keeps what the next epoch needs first. Both
    policies read the same exact batches; the order-aware one fills fewer shards than LRU, never
    fewer than the optimum for the same order, and the LRU run is within 10 % of the LRU simulation."""
    probe = ShardCache(tmp_path / "probe").open(version, 0)
    size = probe.nbytes
    probe.release()
    bound = 8 * size + size // 2
    fills_by_order, batches, spec = read_epochs(version, tmp_path, "order", bound, "belady")
    fills_lru, batches_lru, _ = read_epochs(version, tmp_path, "lru", bound, "lru")
    assert batches == batches_lru
    steps = len(batches)
    assert batches[:3] == [batch_indices(spec, s, 0).tolist() for s in range(3)]
    uses = shard_uses(spec, 0, steps)
    optimum = cache_fetches(*uses, [size] * SHARDS, bound, "belady")[1]
    lru = cache_fetches(*uses, [size] * SHARDS, bound, "lru")[1]
    assert optimum < lru
    # the simulation models the cache, read-ahead apart: how far ahead the fills run depends on timing
    # (measured 41-43 fills against 40-42 simulated, CI once 43 against 40, while read-ahead under a
    # bound could reach past the open shards; since 2043552 bounded it: 37 against 40, at load ~14)
    assert abs(fills_lru - lru) <= 0.1 * lru
    assert optimum <= fills_by_order < fills_lru

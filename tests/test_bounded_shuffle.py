"""Issue #35: a shuffle a bounded cache can live with. The sliding shuffle (order/sliding.py) is a
pure, pinned function of (seed, epoch, shard sizes) that covers every sample once an epoch, keeps
at most `window_shards` shards resident, resumes into another world size on the same order, and
through a real cache with a bound (S3 on loopback) fetches each shard once an epoch. A shuffle
whose working set the bound cannot hold is warned about with its numbers (order/bounded.py)."""

import logging

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.errors import UserError
from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions, batch_indices, epoch_order
from dsinspect.loaders.order.bounded import READ_AHEAD
from dsinspect.loaders.order.inverse import reading_in
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.plan import plan_batch, steps_in_epoch
from dsinspect.loaders.order.quality import shuffle_quality
from dsinspect.loaders.order.spec import Source
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.cache import ShardCache

ONE = (Source("a", "a" * 64, (50, 0, 30, 20)),)
MIX3 = (Source("a", "a" * 64, (30, 30, 0, 30), 1.0), Source("b", "b" * 64, (20, 5), 0.5),
        Source("c", "c" * 64, (7,), 0.25))
FORTY = (Source("a", "a" * 64, (1000,) * 40),)
LAYOUTS = [(50, 0, 30, 20), (1000,) * 40, (7, 3, 0, 12, 1, 9, 30), (5,), (10, 20), (13,) * 10, (0, 9, 0), (64, 1, 1)]


def sliding(sources=ONE, **options):
    return RunSpec(sources, **{"seed": 1234, "shuffle": "sliding", "window_shards": 2, **options})


def shard_of(rows, ids):
    return np.searchsorted(np.cumsum([0, *rows]), ids, side="right") - 1


# ---- golden values: computed once at the commit that added shuffle='sliding'; a change reorders runs ----

GOLDEN = {
    "one_q2_epoch0":
        [54, 61, 93, 89, 99, 85, 62, 96, 81, 84, 60, 95, 91, 83, 80, 64, 92, 53, 98, 87, 55, 94, 88, 97, 63, 56, 59,
         57, 51, 52, 90, 58, 50, 82, 86, 9, 15, 23, 14, 41, 32, 70, 8, 66, 37, 2, 43, 65, 40, 75, 33, 6, 1, 0, 77, 71,
         18, 69, 79, 47, 72, 19, 49, 16, 36, 28, 5, 45, 31, 12, 21, 74, 17, 27, 24, 73, 34, 67, 78, 11, 42, 20, 44,
         35, 13, 30, 7, 68, 46, 76, 38, 48, 10, 22, 4, 3, 39, 29, 25, 26],
    "one_q2_epoch1":
        [84, 47, 13, 34, 5, 43, 3, 2, 87, 0, 6, 46, 82, 31, 30, 49, 39, 22, 24, 16, 42, 45, 40, 8, 7, 18, 23, 86, 48,
         83, 15, 32, 89, 14, 44, 4, 35, 29, 28, 81, 37, 38, 26, 27, 17, 25, 19, 85, 1, 36, 21, 88, 80, 12, 9, 41, 33,
         20, 11, 10, 96, 91, 63, 77, 66, 72, 90, 56, 68, 94, 50, 76, 60, 61, 53, 79, 62, 51, 74, 52, 57, 97, 54, 55,
         93, 73, 65, 95, 58, 69, 75, 99, 64, 71, 92, 70, 59, 67, 78, 98],
    "mix3_q2_epoch0":
        [[1, 14], [1, 4], [0, 6], [2, 2], [1, 15], [0, 8], [0, 23], [0, 34], [0, 22], [0, 20], [0, 26], [2, 3],
         [0, 35], [1, 20], [2, 0], [1, 5], [0, 5], [0, 9], [0, 21], [0, 31], [1, 8], [2, 6], [0, 11], [0, 3], [0, 14],
         [1, 23], [2, 4], [0, 19], [0, 32], [1, 16]],
    "forty_q8_at":
        [30607, 36250, 36220, 2482, 22263],
}  # forty_q8_at: epoch 3 at positions 0, 1, 999, 20000, 39999
GOLDEN_ORDER_HASH = "daa5e473e223c336ea5357580172802527aea04d4452350433a00f6d0d9d5843"


def golden_now():
    return {
        "one_q2_epoch0": epoch_order(sliding(), 0).tolist(),
        "one_q2_epoch1": epoch_order(sliding(), 1).tolist(),
        "mix3_q2_epoch0": epoch_order(sliding(MIX3, seed=5, mixture_block=12), 0)[:30].tolist(),
        "forty_q8_at": epoch_order(sliding(FORTY, seed=7, window_shards=8), 3)[[0, 1, 999, 20000, 39999]].tolist(),
    }


def test_sliding_order_is_pinned():
    assert golden_now() == GOLDEN
    assert sliding().order_hash == GOLDEN_ORDER_HASH


def test_sliding_order_is_deterministic_and_differs_by_seed_and_epoch():
    spec = sliding(FORTY, window_shards=8)
    a, b = epoch_order(spec, 2), epoch_order(RunSpec.loads(spec.dumps()), 2)
    assert a.tolist() == b.tolist()
    assert a.tolist() != epoch_order(spec, 3).tolist()
    assert a.tolist() != epoch_order(spec.replace(seed=1235), 2).tolist()


@pytest.mark.parametrize("rows", LAYOUTS)
@pytest.mark.parametrize("q", [1, 2, 3, 8, 50])
def test_sliding_covers_every_sample_once_and_keeps_at_most_q_shards_resident(rows, q):
    spec = sliding((Source("a", "a" * 64, rows),), window_shards=q)
    for epoch in (0, 1):
        order = epoch_order(spec, epoch)
        assert sorted(order.tolist()) == list(range(sum(rows)))
        assert shuffle_quality(order, rows).most_resident <= min(q, sum(1 for n in rows if n))
        # where() inverts it: each sample's reading is at its position
        for position in np.linspace(0, len(order) - 1, 7).astype(int).tolist():
            assert reading_in(spec, 0, epoch, int(order[position])).position == position


def test_sliding_mixes_more_shards_than_a_window_of_the_same_cache():
    """With room for 10 shards of 40: the fitting window shuffle (5 and the next 5 read ahead)
    lets ~1/8 of the pairs meet, the sliding one (8 resident, 2 read ahead) ~1/3."""
    rows = FORTY[0].shard_rows
    window = shuffle_quality(epoch_order(RunSpec(FORTY, seed=7, shuffle="window", window_shards=5), 0), rows)
    slide = shuffle_quality(epoch_order(sliding(FORTY, seed=7, window_shards=8), 0), rows)
    assert slide.most_resident == 8 and window.most_resident == 5
    assert slide.pairs_meet > 2.5 * window.pairs_meet and slide.pairs_meet > 0.3
    assert slide.spread > window.spread > 0.8


def test_sliding_resumes_into_another_world_size_on_the_same_order():
    """2 ranks x 5 read 7 steps; 3 ranks x 4 resume from rank 0's state: together they read the
    epoch's order as one stream, nothing lost or doubled (drop: a tail shorter than 12 is left)."""
    spec = sliding((Source("a", "a" * 64, (100, 37, 0, 55, 61, 80)),), seed=3, window_shards=4, batch_size=5,
                   world_size=2)
    read = [i for step in range(7) for r in range(2) for i in plan_batch(spec, step, r).indices.tolist()]
    state = LoaderState.at(spec, 7, 0)
    wide = state.resume_spec(spec.replace(world_size=3, batch_size=4))
    for step in range(7, 7 + steps_in_epoch(wide, 0)):
        read += [i for r in range(3) for i in plan_batch(wide, step, r).indices.tolist()]
    order = epoch_order(spec, 0).tolist()
    assert read == order[:len(read)] and len(set(read)) == len(read)
    assert len(order) - len(read) == (len(order) - 70) % 12
    assert plan_batch(wide, 7 + steps_in_epoch(wide, 0), 0).epoch == 1  # then epoch 1, from its start
    assert plan_batch(wide, 7 + steps_in_epoch(wide, 0), 0).indices.tolist() == epoch_order(spec, 1)[:4].tolist()


def test_packed_sequences_refuse_the_sliding_shuffle():
    src = (Source("a", "a" * 64, (10, 10), 1.0, (400, 400)),)
    with pytest.raises(UserError, match="shuffle=sliding keeps rows of a few shards together"):
        RunSpec(src, shuffle="sliding", sequences=SequenceSpec(64))


# ---- through a real cache with a bound, a version on S3 on loopback --------------------------------------

pytest.importorskip("s3fs")
pytest.importorskip("moto.moto_server.werkzeug_app")

from s3_server import PROBLEM_RETRIES, s3_server  # noqa: E402

SHARDS, SHARD_ROWS, GROUP_ROWS = 12, 100, 10
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("blob", pa.binary(), "bytes")]


@pytest.fixture(scope="module")
def s3():
    with s3_server(**PROBLEM_RETRIES) as served:
        yield served


@pytest.fixture(scope="module")
def version(s3):
    _, url, _ = s3
    rng = np.random.default_rng(0)
    rows = [{"id": i, "blob": rng.bytes(400)} for i in range(SHARDS * SHARD_ROWS)]  # incompressible
    return Catalog(url).write_version("rand", rows, FIELDS, key="id",
                                      options=WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=GROUP_ROWS))


def shard_bytes(version, tmp_path):
    """The most a shard takes, stored or as cached (the reader judges a bound by the larger)."""
    probe = ShardCache(tmp_path / "probe").open(version, 0)
    try:
        return max(probe.nbytes, *(s.bytes for s in version.manifest.shards))
    finally:
        probe.release()


def fresh(url):
    catalog = Catalog(url)
    catalog.fs.invalidate_cache()
    return catalog


def shard_gets(server, version):
    """Body bytes of the GETs of shard files (whole and ranged), and how many there were."""
    gets = [r for r in server.requests("GET", contains="/shards/") if r.path.endswith(".parquet")]
    return sum(r.nbytes for r in gets), len(gets)


@pytest.mark.parametrize("world", [1, 2])
def test_sliding_under_a_bound_fills_each_shard_once_an_epoch(s3, version, tmp_path, world, caplog):
    """A bound of 5 shards of 12; the sliding shuffle of 3 resident shards (and 2 read ahead), ranks
    reading in step as a job does: every batch exact, nothing streamed, no warning, each shard filled
    once (and the next epoch's first ones, as many as each rank runs ahead: READ_AHEAD, of the shards
    that rank reads first, which may differ by rank), and the cache within its bound. (The bytes
    fetched also count rows read cold while their shard fills, which depends on timing: the
    benchmark measures them, bench_bounded_shuffle.py.)"""
    server, url, _ = s3
    catalog = fresh(url)
    bound = 5 * shard_bytes(version, tmp_path)
    spec = RunSpec.create(catalog, "rand", seed=5, batch_size=8, world_size=world, shuffle="sliding", window_shards=3)
    cache = ShardCache(tmp_path / "node", max_bytes=bound)
    server.reset_counts()
    seen = []
    with caplog.at_level(logging.WARNING, logger="dsinspect.reader"):
        loaders = [Loader(spec, rank, catalog=catalog, cache=cache) for rank in range(world)]
        for loader in loaders:
            assert loader._reader.streamed == set()
        for batches in zip(*loaders):
            for rank, batch in enumerate(batches):
                assert batch.indices.tolist() == batch_indices(spec, batch.step, rank).tolist()
                assert batch.table.column("id").to_pylist() == batch.indices.tolist()
                seen += batch.indices.tolist()
        fills = loaders[0].stats()["cache_misses"]
        for loader in loaders:
            loader.close()
    assert not [r for r in caplog.records if "cache bound" in r.getMessage()]
    assert len(seen) == len(set(seen)) == SHARDS * SHARD_ROWS // (8 * world) * 8 * world
    assert SHARDS <= fills <= SHARDS + READ_AHEAD * world, f"{fills} fills of {SHARDS} shards in one epoch"
    assert cache.cached_bytes() <= bound
    fetched, _ = shard_gets(server, version)
    assert fetched < 2 * sum(s.bytes for s in version.manifest.shards)


def test_sliding_under_a_bound_fills_the_next_shards_before_their_first_read(s3, version, tmp_path):
    """The order is known, so the shard entering the resident set next is asked of the cache (its
    fill started, or already in) before the step that first reads it, for every shard entering past
    the first steps, whose plans are still short; the shards filled ahead never push the bound. (The
    loader warmed once per chunk of planned steps, half its open budget at most: most entering
    shards were read cold at their first step, then filled.) Whether a fill has begun is the
    reader's state, read between two batches: no timing."""
    _, url, _ = s3
    catalog = fresh(url)
    bound = 5 * shard_bytes(version, tmp_path)
    spec = RunSpec.create(catalog, "rand", seed=5, batch_size=8, shuffle="sliding", window_shards=3)
    cache = ShardCache(tmp_path / "node", max_bytes=bound)
    starts = np.cumsum([0, *spec.sources[0].shard_rows])
    first_read: dict[int, int] = {}
    for step in range(steps_in_epoch(spec, 0)):
        for shard in np.unique(np.searchsorted(starts, batch_indices(spec, step, 0), side="right") - 1).tolist():
            first_read.setdefault(shard, step)
    entering = {step: shard for shard, step in first_read.items() if step >= 20}
    assert len(entering) >= SHARDS - 5  # the test has shards to judge
    asked, missed = [], []
    with Loader(spec, catalog=catalog, cache=cache) as loader:
        reader = loader._reader
        for _ in loader:
            shard = entering.get(loader.step)
            if shard is not None:
                key, sha = (0, shard), version.manifest.shards[shard].sha256
                with reader._lock:
                    started = key in reader._pending or key in reader._open or cache.holds(sha)
                (asked if started else missed).append(shard)
    assert not missed, f"shards {missed} not being filled before their first read ({len(asked)} were)"
    assert cache.cached_bytes() <= bound


def test_a_global_shuffle_over_a_bound_it_cannot_hold_is_warned_about_with_its_numbers(s3, version, tmp_path,
                                                                                     caplog):
    """The same bound under a global shuffle: one warning with the bound, the working set (the whole
    version), the amplification to expect, and the sliding and window shuffles that fit; the streamed
    epoch then fetches more than that warning's floor (kept + streamed x 1) and reads every batch."""
    server, url, _ = s3
    catalog = fresh(url)
    bound = 5 * shard_bytes(version, tmp_path)
    spec = RunSpec.create(catalog, "rand", seed=5, batch_size=8, shuffle="global")
    sizes = [s.bytes for s in version.manifest.shards]
    server.reset_counts()
    with caplog.at_level(logging.WARNING, logger="dsinspect.reader"):
        loader = Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "node", max_bytes=bound))
    warned = [r.getMessage() for r in caplog.records if "cache bound" in r.getMessage()]
    assert len(warned) == 1, warned
    (message,) = warned
    streamed = len(loader._reader.streamed)
    kept = SHARDS - streamed
    assert kept == bound // max(sizes) and streamed > 0
    # the expected amplification: groups of 10 rows over the epoch's 150 batches of 8
    reads = SHARDS * SHARD_ROWS / 8
    per_group = reads * (1 - (1 - 1 / reads) ** GROUP_ROWS)
    expected = (sum(sizes[:kept]) + sum(sizes[kept:]) * per_group) / sum(sizes)
    assert f"cache bound of {bound:,} bytes" in message
    working = f"the whole version (global shuffle reads anywhere in it) of {version.address} ({sum(sizes):,} bytes"
    assert working in message
    assert f"{streamed} of {SHARDS} shards will be streamed" in message and "~10 rows each" in message
    assert f"~{expected:.1f}x the version's stored bytes ({sum(sizes):,})" in message
    fits = bound // max(sizes)
    assert f"shuffle='sliding' with window_shards={fits - 2}" in message
    assert f"shuffle='window' with window_shards={fits // 2}" in message
    assert f"a bound of at least {sum(sizes):,} bytes" in message
    (advice,) = loader._reader.bound_advice
    assert advice.amplification == pytest.approx(expected)
    with loader:
        steps = 30  # a fifth of the epoch: streaming is slow by design
        for step in range(steps):
            assert loader.batch_at(step).indices.tolist() == batch_indices(spec, step, 0).tolist()
    fetched, gets = shard_gets(server, version)
    assert gets > steps, "streamed row groups are fetched batch by batch"


def test_a_sliding_shuffle_too_wide_for_its_bound_is_warned_about_with_the_width_that_fits(s3, version, tmp_path,
                                                                                         caplog):
    server, url, _ = s3
    catalog = fresh(url)
    bound = 5 * shard_bytes(version, tmp_path)
    spec = RunSpec.create(catalog, "rand", seed=5, batch_size=8, shuffle="sliding", window_shards=5)
    with caplog.at_level(logging.WARNING, logger="dsinspect.reader"):
        Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "node", max_bytes=bound)).close()
    (message,) = [r.getMessage() for r in caplog.records if "cache bound" in r.getMessage()]
    assert "smaller than the sliding shuffle's resident shards (5, and 2 read ahead)" in message
    assert "shuffle='sliding' with window_shards=3 " in message


def test_quality_of_known_orders():
    """The metrics on orders whose values are known: the stored order, a uniform one, disjoint windows."""
    rows = (100,) * 10
    stored = shuffle_quality(np.arange(1000), rows)
    assert stored.spread == pytest.approx(1 / (1000 / 3)) and stored.most_resident == 1
    assert stored.pairs_meet == pytest.approx(10 * 100 * 99 / 2 / (1000 * 999 / 2))
    uniform = shuffle_quality(np.random.default_rng(0).permutation(1000), rows)
    assert uniform.spread == pytest.approx(1.0, abs=0.05) and uniform.pairs_meet == 1.0 and uniform.most_resident == 10
    pairs = shuffle_quality(np.concatenate([np.random.default_rng(1).permutation(200) + 200 * w for w in range(5)]),
                            rows)  # windows of 2 shards, one after another
    assert pairs.most_resident == 2
    assert pairs.pairs_meet == pytest.approx(5 * 200 * 199 / 2 / (1000 * 999 / 2))

"""Properties of the sample order and the loader state, over random specs (hypothesis).

The order is pure, so most properties run on specs without data (`Source(name, version,
shard_rows)`); the Loader tests at the end read a small real catalog. docs/GUARANTEES.md links
each guarantee to the tests here.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from state_harness import check_save_load

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field
from dsinspect.loaders.order import plan as order_module
from dsinspect.loaders.order.permutation import Permutation, sample_seeds
from dsinspect.loaders.order.plan import (
    batch_indices,
    epoch_order,
    locate_step,
    mixture_counts,
    plan_batch,
    samples_at,
    steps_in_epoch,
)
from dsinspect.loaders.order.spec import LastBatch, RunSpec, Shuffle, Source
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.writer import WriteOptions

# DSINSPECT_PROPERTY_SCALE=20 runs twenty times the examples (a deep search, not for every CI run)
SCALE = float(os.environ.get("DSINSPECT_PROPERTY_SCALE", "1"))


def examples(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


SETTINGS, FEW = examples(80), examples(20)

# -- strategies ----------------------------------------------------------------------------------

shard_lists = st.lists(st.integers(0, 30), min_size=1, max_size=7).filter(lambda rows: sum(rows) > 0)


@st.composite
def sources(draw, count: int) -> tuple[Source, ...]:
    return tuple(Source(f"s{k}", f"{k:x}" * 64, tuple(draw(shard_lists)),
                        draw(st.floats(0.1, 10.0, allow_nan=False)) if count > 1 else 1.0)
                 for k in range(count))


@st.composite
def specs(draw, mixtures: bool | None = None) -> RunSpec:
    """Any valid spec: one source or a 2-3 source mixture, every shuffle and last-batch mode."""
    n_sources = draw(st.sampled_from([1]) if mixtures is False else
                     st.sampled_from([2, 3]) if mixtures else st.sampled_from([1, 1, 2, 3]))
    srcs = draw(sources(n_sources))
    epoch_size = draw(st.one_of(st.none(), st.integers(1, 150))) if n_sources > 1 else None
    length = epoch_size or sum(s.rows for s in srcs)
    last = draw(st.sampled_from(list(LastBatch)))
    world, batch = draw(st.integers(1, 5)), draw(st.integers(1, 8))
    if last is LastBatch.DROP:  # a global batch must fit the epoch; shrink rather than reject
        world = min(world, length)
        batch = min(batch, max(1, length // world))
    return RunSpec(srcs, seed=draw(st.integers(0, 2**40)), batch_size=batch, world_size=world,
                   shuffle=draw(st.sampled_from(list(Shuffle))), window_shards=draw(st.integers(1, 4)),
                   last_batch=last, epoch_size=epoch_size,
                   mixture_block=draw(st.integers(n_sources, 40)))


# -- helpers -------------------------------------------------------------------------------------

def first_step(spec: RunSpec, epoch: int) -> int:
    """The first global step of `epoch` for a spec that starts at (0, 0, 0)."""
    return epoch * steps_in_epoch(spec, 0)


def epoch_plans(spec: RunSpec, epoch: int) -> list:
    """Every (step, rank) plan of one epoch of a fresh spec, in step-then-rank order."""
    s0 = first_step(spec, epoch)
    steps = range(s0, s0 + steps_in_epoch(spec, epoch))
    return [plan_batch(spec, s, r) for s in steps for r in range(spec.world_size)]


def pairs(sources_: np.ndarray, indices: np.ndarray) -> list[tuple[int, int]]:
    return list(zip(np.asarray(sources_).tolist(), np.asarray(indices).tolist()))


def order_pairs(spec: RunSpec, epoch: int) -> list[tuple[int, int]]:
    order = epoch_order(spec, epoch)
    return pairs(order[:, 0], order[:, 1]) if spec.is_mixture else pairs(np.zeros(len(order), int), order)


def same_plan(a, b) -> bool:
    return (a.step, a.epoch, a.rank) == (b.step, b.epoch, b.rank) and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in ("positions", "sources", "indices", "padding", "seeds"))


def roundtrip(state: LoaderState) -> LoaderState:
    return LoaderState.from_json(json.loads(json.dumps(state.to_json())))


# -- exactly once per epoch ------------------------------------------------------------------------

@SETTINGS
@given(spec=specs(), epoch=st.integers(0, 3))
def test_every_sample_once_per_epoch_across_ranks(spec, epoch):
    """drop: exactly the first steps*G positions' samples, each once; pad: every sample, the
    non-padding ones exactly once, padding flagged and repeating the epoch's first samples."""
    order = order_pairs(spec, epoch)
    assert len(order) == spec.epoch_length
    if not spec.is_mixture:
        assert sorted(i for _, i in order) == list(range(spec.sources[0].rows))  # a permutation
    plans = epoch_plans(spec, epoch)
    read = [p for plan in plans for p in pairs(plan.sources[~plan.padding], plan.indices[~plan.padding])]
    steps, g = steps_in_epoch(spec, epoch), spec.global_batch
    if spec.last_batch is LastBatch.DROP:
        assert steps == spec.epoch_length // g and not any(plan.padding.any() for plan in plans)
        assert read == order[:steps * g]
    else:
        assert steps == math.ceil(spec.epoch_length / g)
        assert read == order  # all of them, each once, in order
        pads = [p for plan in plans for p in pairs(plan.sources[plan.padding], plan.indices[plan.padding])]
        assert len(pads) == steps * g - spec.epoch_length
        assert pads == [order[k % spec.epoch_length] for k in range(len(pads))]
    if not spec.is_mixture:
        assert len(set(read)) == len(read)


@SETTINGS
@given(spec=specs(), epoch=st.integers(0, 3))
def test_ranks_get_equal_batches_and_steps(spec, epoch):
    s0 = first_step(spec, epoch)
    for s in range(s0, s0 + steps_in_epoch(spec, epoch)):
        for r in range(spec.world_size):
            plan = plan_batch(spec, s, r)
            assert len(plan.indices) == len(plan.seeds) == len(plan.padding) == spec.batch_size
            assert plan.epoch == epoch
    assert locate_step(spec, s0 + steps_in_epoch(spec, epoch)) == (epoch + 1, 0)


@SETTINGS
@given(spec=specs(), step=st.integers(0, 10**6), data=st.data())
def test_batch_indices_are_slices_of_epoch_order(spec, step, data):
    rank = data.draw(st.integers(0, spec.world_size - 1))
    epoch, first = locate_step(spec, step)
    positions = (first + rank * spec.batch_size + np.arange(spec.batch_size)) % spec.epoch_length
    order = epoch_order(spec, epoch)
    want = order[positions, 1] if spec.is_mixture else order[positions]
    assert np.array_equal(batch_indices(spec, step, rank), want)
    plan = plan_batch(spec, step, rank)
    if spec.is_mixture:
        assert np.array_equal(plan.sources, order[positions, 0])
    assert np.array_equal(plan.positions, positions)


@SETTINGS
@given(spec=specs(mixtures=False), epoch=st.integers(0, 50))
def test_window_shuffle_keeps_a_bounded_set_of_shards_open(spec, epoch):
    """Window mode: the epoch order splits into consecutive stretches that each touch at most
    `window_shards` shards, and a shard never comes back after its stretch (a bounded cache)."""
    spec = spec.replace(shuffle=Shuffle.WINDOW)
    starts = np.cumsum((0,) + spec.sources[0].shard_rows)
    shard_of = np.searchsorted(starts, epoch_order(spec, epoch), side="right") - 1
    first, last = {}, {}
    for pos, shard in enumerate(shard_of.tolist()):
        first.setdefault(shard, pos)
        last[shard] = pos
    assert sorted(first) == [k for k, n in enumerate(spec.sources[0].shard_rows) if n]
    group, reach = [], -1  # shards whose spans overlap form one stretch
    for shard in sorted(first, key=first.get):
        if first[shard] > reach and group:
            assert len(group) <= spec.window_shards
            group = []
        group.append(shard)
        reach = max(reach, last[shard])
    assert len(group) <= spec.window_shards


@SETTINGS
@given(spec=specs(mixtures=False))
def test_shuffled_epochs_differ(spec):
    assume(spec.shuffle is not Shuffle.NONE and spec.sources[0].rows >= 12)  # equal orders: odds below 1e-6
    assert not np.array_equal(epoch_order(spec, 0), epoch_order(spec, 1))


# -- resume -----------------------------------------------------------------------------------------

@SETTINGS
@given(spec=specs(), data=st.data())
def test_state_at_any_step_restores_identical_continuation(spec, data):
    """Saved at any step (epoch ends included), restored, the next steps are the same; a resume of
    that resume is too."""
    per_epoch = steps_in_epoch(spec, 0)
    step = data.draw(st.one_of(st.integers(0, 4 * per_epoch), st.sampled_from([per_epoch, per_epoch - 1, 0])))
    step = max(step, 0)
    rank = data.draw(st.integers(0, spec.world_size - 1))
    resumed = roundtrip(LoaderState.at(spec, step, rank)).resume_spec(spec)
    for s in range(step, step + per_epoch + 2):
        assert same_plan(plan_batch(resumed, s, rank), plan_batch(spec, s, rank)), s
    later = step + data.draw(st.integers(0, 2 * per_epoch))
    again = roundtrip(LoaderState.at(resumed, later, rank)).resume_spec(resumed)
    for s in range(later, later + per_epoch + 2):
        assert same_plan(plan_batch(again, s, rank), plan_batch(spec, s, rank)), s


@SETTINGS
@given(spec=specs(), data=st.data())
def test_plan_batches_equal_plan_batch_per_step(spec, data):
    """The vectorised planner the Loader reads ahead with agrees with planning step by step,
    across epoch boundaries and from a resumed spec's start."""
    plan_batches = getattr(order_module, "plan_batches", None)
    if plan_batches is None:
        pytest.skip("no plan_batches in this engine")
    per_epoch = steps_in_epoch(spec, 0)
    rank = data.draw(st.integers(0, spec.world_size - 1))
    first = data.draw(st.integers(0, 3 * per_epoch))
    count = data.draw(st.integers(0, 2 * per_epoch + 2))
    got = plan_batches(spec, first, count, rank)
    assert [p.step for p in got] == list(range(first, first + count))
    assert all(same_plan(p, plan_batch(spec, p.step, rank)) for p in got)
    resumed = roundtrip(LoaderState.at(spec, first, rank)).resume_spec(spec)
    assert all(same_plan(p, q) for p, q in zip(plan_batches(resumed, first, count, rank), got))


class PlanStream:
    """A data-free iterator over one rank's plans with the Loader's state semantics: the harness
    runs on it for any spec, in milliseconds."""

    def __init__(self, spec: RunSpec, rank: int):
        self.spec, self.rank, self.step = spec, rank, spec.start.step

    def next(self):
        plan = plan_batch(self.spec, self.step, self.rank)
        self.step += 1
        return plan

    def state_dict(self) -> dict:
        return LoaderState.at(self.spec, self.step, self.rank).to_json()

    def load_state_dict(self, state: dict) -> None:
        self.spec = LoaderState.from_json(state).resume_spec(self.spec)
        self.step = self.spec.start.step


def plan_key(plan) -> tuple:
    return (plan.step, plan.epoch, tuple(plan.sources.tolist()), tuple(plan.indices.tolist()),
            tuple(plan.padding.tolist()), tuple(plan.seeds.tolist()))


@FEW
@given(spec=specs(), data=st.data())
def test_harness_on_plan_stream(spec, data):
    rank = data.draw(st.integers(0, spec.world_size - 1))
    per_epoch = steps_in_epoch(spec, 0)
    check_save_load(lambda: PlanStream(spec, rank), PlanStream.next, total=min(2 * per_epoch + 1, 24),
                    comparable=plan_key, boundaries=[per_epoch, 2 * per_epoch])


@st.composite
def elastic_runs(draw):
    """A spec and a list of (world size, batch size, steps) segments, e.g. 4 -> 2 -> 3 ranks."""
    spec = draw(specs())
    segments = []
    for _ in range(draw(st.integers(2, 5))):
        world, batch = draw(st.integers(1, 5)), draw(st.integers(1, 6))
        if spec.last_batch is LastBatch.DROP:
            world = min(world, spec.epoch_length)
            batch = min(batch, max(1, spec.epoch_length // world))
        segments.append((world, batch, draw(st.integers(0, 40))))
    return spec, segments


def run_elastic(spec: RunSpec, segments, epochs: int):
    """Run segments (the last one until `epochs` epochs are complete), moving the state through
    JSON and into a spec with another world size and batch size at each change. Returns the
    samples read per epoch as {epoch: {position: [(source, index, padding)]}} and, per epoch, the
    starts of the segments that began inside it."""
    read: dict[int, dict[int, list]] = {}
    starts: dict[int, list[RunSpec]] = {}
    current = spec.replace(world_size=segments[0][0], batch_size=segments[0][1])
    step = 0
    for k, (_, _, n) in enumerate(segments):
        if k:
            world, batch, _ = segments[k]
            state = roundtrip(LoaderState.at(current, step, rank=0))
            current = state.resume_spec(spec.replace(world_size=world, batch_size=batch))
        starts.setdefault(current.start.epoch, []).append(current)
        last = k == len(segments) - 1
        while (locate_step(current, step)[0] < epochs) if last else n > 0:
            for r in range(current.world_size):
                plan = plan_batch(current, step, r)
                for pos, src, idx, pad in zip(plan.positions.tolist(), plan.sources.tolist(),
                                              plan.indices.tolist(), plan.padding.tolist()):
                    read.setdefault(plan.epoch, {}).setdefault(pos if not pad else -1, []).append((src, idx, pad))
            step += 1
            n -= 1
    return read, starts


@examples(50)
@given(run=elastic_runs())
def test_elastic_resume_reads_every_sample_once_per_epoch(run):
    """World size and batch size changed at random steps (say 4 -> 2 -> 3): each epoch still reads
    a prefix of its order with no repeat; drop leaves a tail shorter than the global batch of the
    segment that ended the epoch, pad leaves none."""
    spec, segments = run
    epochs = 2
    read, starts = run_elastic(spec, segments, epochs)
    for epoch in range(epochs):
        order = order_pairs(spec, epoch)
        by_position = read.get(epoch, {})
        padded = by_position.pop(-1, [])
        assert all(len(v) == 1 for v in by_position.values()), "a position was read twice"
        end = len(by_position)
        assert sorted(by_position) == list(range(end)), "the positions read are not a prefix of the epoch"
        assert [(s, i) for p in range(end) for s, i, _ in by_position[p]] == order[:end]
        # the segment that ended the epoch is the last one that started inside it
        ender = starts[max(e for e in starts if e <= epoch)][-1]
        begin = ender.start.position if ender.start.epoch == epoch else 0
        g = ender.global_batch
        if spec.last_batch is LastBatch.DROP:
            assert not padded
            assert end == begin + (spec.epoch_length - begin) // g * g
        else:
            assert end == spec.epoch_length
            assert all(pad for _, _, pad in padded)
            assert len(padded) < g


def test_elastic_resume_example_4_2_3():
    """The brief's example spelt out: 4 ranks x 3 for 5 steps (positions 0-59), 2 ranks x 5 for 4
    steps (60-99), then 3 ranks x 4 (G = 12): epoch 0 ends after 3 more steps at 136, its last 6
    positions unread; later epochs read 11 x 12 = 132 of 142."""
    spec = RunSpec((Source("a", "a" * 64, (100, 37, 0, 5)),), seed=7, shuffle="window", window_shards=2)
    read, _ = run_elastic(spec, [(4, 3, 5), (2, 5, 4), (3, 4, 0)], epochs=3)
    for epoch, end in [(0, 136), (1, 132), (2, 132)]:
        positions = read[epoch]
        assert sorted(positions) == list(range(end)) and all(len(v) == 1 for v in positions.values())
        assert [positions[p][0][1] for p in range(end)] == epoch_order(spec, epoch)[:end].tolist()


def test_receipt_catches_an_edited_epoch():
    spec = RunSpec((Source("a", "a" * 64, (40,)),), seed=3, batch_size=4, shuffle="none")
    state = LoaderState.at(spec, 12, 0).to_json()  # epoch 1, position 8
    assert state["epoch"] == 1
    with pytest.raises(IntegrityError):
        LoaderState.from_json({**state, "epoch": 2}).resume_spec(spec)


# -- mixtures -----------------------------------------------------------------------------------------

@SETTINGS
@given(spec=specs(mixtures=True), blocks=st.integers(1, 4), epoch=st.integers(0, 5))
def test_mixture_blocks_realise_mixture_counts(spec, blocks, epoch):
    counts = mixture_counts(spec)
    m, length = spec.mixture_block, spec.epoch_length
    assert sum(counts) == m and all(c >= 1 for c in counts)
    total = sum(s.weight for s in spec.sources)
    exact = [s.weight / total * m for s in spec.sources]
    if all(x >= 1 for x in exact):  # largest remainder: each share rounded down or up, never further
        assert all(math.floor(x) <= c <= math.ceil(x) for c, x in zip(counts, exact))
    first_block = epoch * length // m + 1
    for b in range(first_block, first_block + blocks):
        stream = np.arange(b * m, (b + 1) * m)
        got = Counter()
        for e in np.unique(stream // length):
            srcs, _ = samples_at(spec, int(e), stream[stream // length == e] % length)
            got.update(srcs.tolist())
        assert [got[k] for k in range(len(spec.sources))] == counts


@SETTINGS
@given(spec=specs(mixtures=True), epochs=st.integers(1, 4))
def test_mixture_source_samples_once_per_source_epoch(spec, epochs):
    """Along the run's stream of positions, each source cycles through its own epochs: every
    source epoch is a permutation of that source's rows (so a read is at most once, under drop)."""
    stream = [order_pairs(spec, e) for e in range(epochs)]
    for k, source in enumerate(spec.sources):
        seq = [i for part in stream for s, i in part if s == k]
        for start in range(0, len(seq), source.rows):
            chunk = seq[start:start + source.rows]
            assert len(set(chunk)) == len(chunk)
            if len(chunk) == source.rows:
                assert sorted(chunk) == list(range(source.rows))


@SETTINGS
@given(spec=specs(mixtures=True), step=st.integers(0, 10**7), data=st.data())
def test_mixture_plans_replay(spec, step, data):
    rank = data.draw(st.integers(0, spec.world_size - 1))
    assert same_plan(plan_batch(spec, step, rank), plan_batch(spec, step, rank))
    clone = RunSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert same_plan(plan_batch(clone, step, rank), plan_batch(spec, step, rank))


# -- permutation and seeds -----------------------------------------------------------------------------

PRIMES = [2, 3, 5, 7, 11, 13, 31, 97, 101, 127, 257, 1009, 4093, 65521]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 15, 16, 17, 63, 64, 65, 255, 256, 1000, 1024, 4096, 100_000] + PRIMES)
@pytest.mark.parametrize("key", [0, 1, 2**63 + 12345])
def test_permutation_is_a_bijection(n, key):
    out = Permutation(n, key)(np.arange(n))
    assert out.dtype == np.int64 and len(out) == n
    assert np.array_equal(np.sort(out), np.arange(n))


@SETTINGS
@given(n=st.integers(0, 3000), key=st.integers(0, 2**64 - 1))
def test_permutation_is_a_bijection_for_any_n_and_key(n, key):
    assert np.array_equal(np.sort(Permutation(n, key)(np.arange(n))), np.arange(n))


@SETTINGS
@given(n=st.integers(2, 5000), key=st.integers(0, 2**64 - 1), count=st.integers(1, 300))
def test_cycle_walks_in_python_ints_and_in_numpy_give_the_same_values(n, key, count):
    """Where the walk switches from numpy to Python ints (`_SCALAR_WALKS`) is a speed choice: every
    switch point gives the same permutation."""
    from dsinspect.loaders.order import permutation
    index = np.arange(count) % n
    got, kept = [], permutation._SCALAR_WALKS
    try:
        for walks in (0, 8, 32, 10**9):  # numpy to the end, ..., Python ints from the first walk
            permutation._SCALAR_WALKS = walks
            got.append(Permutation(n, key)(index).tolist())
    finally:
        permutation._SCALAR_WALKS = kept
    assert got[1:] == got[:-1]


def test_permutation_accepts_a_scalar_index():
    """The signature takes `np.ndarray | int`; a scalar maps to a scalar, like the array does
    (regression: at 2400ef9 a scalar that needed a cycle walk raised TypeError)."""
    perm = Permutation(5, 3)
    table = perm(np.arange(5))
    got = [perm(i) for i in range(5)]
    assert all(np.shape(g) == () for g in got)
    assert [int(g) for g in got] == table.tolist()


@SETTINGS
@given(seed=st.integers(0, 2**40), epochs=st.lists(st.integers(0, 10**6), min_size=2, max_size=2, unique=True),
       n=st.integers(1, 2000), source=st.integers(0, 2))
def test_sample_seeds_differ_across_samples_and_epochs(seed, epochs, n, source):
    index = np.arange(n)
    a = sample_seeds(seed, epochs[0], np.full(n, source), index)
    b = sample_seeds(seed, epochs[1], np.full(n, source), index)
    assert len(np.unique(a)) == n and len(np.unique(b)) == n
    assert not np.any(a == b)  # the same sample in another epoch gets another seed
    assert np.array_equal(a, sample_seeds(seed, epochs[0], np.full(n, source), index))  # and replays


@FEW
@given(spec=specs(mixtures=False))
def test_plan_seeds_are_the_sample_seeds(spec):
    plan = plan_batch(spec, steps_in_epoch(spec, 0), 0)  # first batch of epoch 1
    assert np.array_equal(plan.seeds, sample_seeds(spec.seed, 1, plan.sources, plan.indices))


def test_mixture_repeats_get_fresh_seeds():
    """Source a (3 rows) cycles ~9 source epochs inside one mixture epoch of 53 positions; each
    of its occurrences gets its own seed, as a new epoch of a single source does (regression: at
    2400ef9 seeds came from the mixture epoch, so all repeats shared one augmentation)."""
    spec = RunSpec((Source("a", "0" * 64, (3,)), Source("b", "1" * 64, (50,))), seed=1, batch_size=4, mixture_block=8)
    plans = [plan_batch(spec, s, 0) for s in range(steps_in_epoch(spec, 0))]
    a_seeds = np.concatenate([p.seeds[p.sources == 0] for p in plans])
    assert len(a_seeds) > 3
    assert len(np.unique(a_seeds)) == len(a_seeds)


@FEW
@given(spec=specs(mixtures=True))
def test_mixture_seeds_differ_across_source_epochs(spec):
    """Along two mixture epochs every occurrence of a sample (non-padding) has its own seed, and
    distinct samples have distinct seeds."""
    seen = {}
    for epoch in range(2):
        for plan in epoch_plans(spec, epoch):
            keep = ~plan.padding
            for key, seed in zip(pairs(plan.sources[keep], plan.indices[keep]), plan.seeds[keep].tolist()):
                seen.setdefault(seed, key)
                assert seen[seed] == key, f"{key} and {seen[seed]} share seed {seed}"
    reads = sum(int((~p.padding).sum()) for e in range(2) for p in epoch_plans(spec, e))
    assert len(seen) == reads  # no seed twice: repeats of a sample (later source epochs) get new ones


# -- bounds and refusals (pure) ------------------------------------------------------------------

def test_state_is_small_and_far_steps_are_arithmetic():
    spec = RunSpec((Source("a", "a" * 64, tuple([10_000] * 10_000)),), seed=3, batch_size=32, world_size=64,
                   shuffle="window", window_shards=8)
    small = LoaderState.at(spec, 10, 5).to_json()
    far = LoaderState.at(spec, 10**12, 5).to_json()
    assert set(far) == set(small) and len(json.dumps(far)) < 400  # a few integers and two hashes, at any step
    resumed = LoaderState.from_json(far).resume_spec(spec)
    assert same_plan(plan_batch(resumed, 10**12 + 1, 5), plan_batch(spec, 10**12 + 1, 5))


def test_refusals_in_the_pure_order():
    src = (Source("a", "a" * 64, (10, 0, 7)),)
    with pytest.raises(UserError, match="larger than the epoch"):
        RunSpec(src, batch_size=6, world_size=3, last_batch="drop")
    RunSpec(src, batch_size=6, world_size=3, last_batch="pad")  # pad allows it
    spec = RunSpec(src, batch_size=2, world_size=2)
    with pytest.raises(UserError, match="outside the world size"):
        plan_batch(spec, 0, 2)
    with pytest.raises(UserError, match="negative"):
        plan_batch(spec, -1, 0)
    resumed = roundtrip(LoaderState.at(spec, 9, 0)).resume_spec(spec)
    with pytest.raises(UserError, match="before this run spec's start"):
        plan_batch(resumed, 8, 0)
    other = spec.replace(seed=1)
    with pytest.raises(UserError, match="another data order"):
        LoaderState.at(spec, 3, 0).resume_spec(other)
    tampered = {**LoaderState.at(spec, 3, 0).to_json(), "receipt": "0" * 16}
    with pytest.raises(IntegrityError, match="receipt"):
        LoaderState.from_json(tampered).resume_spec(spec)
    moved = {**LoaderState.at(spec, 3, 0).to_json(), "position": 5}
    with pytest.raises(IntegrityError, match="receipt"):
        LoaderState.from_json(moved).resume_spec(spec)
    outside = {**LoaderState.at(spec, 3, 0).to_json(), "position": 17}
    with pytest.raises(UserError, match="outside the epoch"):
        LoaderState.from_json(outside).resume_spec(spec)
    for bad in ({}, {"format": "x"}, {**LoaderState.at(spec, 3, 0).to_json(), "step": -1}):
        with pytest.raises(UserError):
            LoaderState.from_json(bad)


# -- the Loader on a real catalog ----------------------------------------------------------------------

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens")]


def rows(n: int, tag: int = 0):
    return [{"id": i, "tokens": [tag, i % 13, i % 7][: 1 + i % 3]} for i in range(n)]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A local catalog: `text` (310 rows, shards of 70 in row groups of 16), `other` (130 rows)
    and a second version of `text` with the same shard sizes but other content."""
    cat = Catalog(str(tmp_path_factory.mktemp("order") / "catalog"))
    opts = WriteOptions(shard_rows=70, row_group_rows=16)
    text = cat.write_version("text", rows(310), FIELDS, options=opts)
    other = cat.write_version("other", rows(130, tag=1), FIELDS,
                              options=WriteOptions(shard_rows=40, row_group_rows=16))
    text2 = cat.write_version("text", rows(310, tag=2), FIELDS, options=opts)
    hashes = {v.id: v.take(np.arange(v.num_rows), [HASH_COLUMN]).column(0).to_pylist() for v in (text, other, text2)}
    return cat, text, other, text2, hashes


def batch_key(batch) -> tuple:
    return (batch.step, batch.epoch, tuple(batch.sources.tolist()), tuple(batch.indices.tolist()),
            tuple(batch.padding.tolist()), tuple(batch.seeds.tolist()), tuple(batch.row_hashes))


def next_batch(loader: Loader):
    return next(iter(loader))  # one batch; the next call picks up the loader's (possibly new) epoch


LOADER_CASES = [
    dict(shuffle="global", last_batch="drop", world_size=2, batch_size=17),
    dict(shuffle="window", window_shards=2, last_batch="pad", world_size=3, batch_size=13),
    dict(shuffle="none", last_batch="pad", world_size=1, batch_size=40),
    dict(shuffle="global", last_batch="drop", world_size=2, batch_size=12, mixture=True, epoch_size=200,
         mixture_block=32),
]


@pytest.mark.parametrize("case", LOADER_CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_loader_save_load_harness(real, case):
    cat, text, other, _, hashes = real
    options = {k: v for k, v in case.items() if k != "mixture"}
    addresses = f"text@{text.id[:12]}"
    if case.get("mixture"):
        addresses = {addresses: 3.0, f"other@{other.id[:12]}": 1.0}
    spec = RunSpec.create(cat, addresses, seed=11, **options)
    rank = spec.world_size - 1
    per_epoch = steps_in_epoch(spec, 0)
    total = 2 * per_epoch + 3
    midpoints = [0, 1, per_epoch // 2, per_epoch - 1, per_epoch, per_epoch + 1, 2 * per_epoch, total - 1, total]
    report = check_save_load(lambda: Loader(spec, rank, cat, prefetch=2), next_batch, total=total,
                             comparable=batch_key, midpoints=midpoints)
    assert report.pairs  # resumes of resumes ran too
    # the hashes read are the stored hashes of the planned rows, and the ids are those rows
    versions = [cat.version(s.name, s.version) for s in spec.sources]
    with Loader(spec, rank, cat) as loader:
        for _ in range(per_epoch + 1):
            batch = next_batch(loader)
            want = [hashes[versions[s].id][i] for s, i in zip(batch.sources.tolist(), batch.indices.tolist())]
            assert batch.row_hashes == want
            assert batch.table.column("id").to_pylist() == batch.indices.tolist()


def test_loader_epoch_iteration_and_restore_mid_epoch(real):
    """`for batch in loader` yields the rest of the current epoch, also right after a restore."""
    cat, text, *_ = real
    spec = RunSpec.create(cat, f"text@{text.id[:12]}", seed=2, batch_size=9, world_size=2, shuffle="window")
    with Loader(spec, 1, cat) as loader:
        epoch0, epoch1 = [batch_key(b) for b in loader], [batch_key(b) for b in loader]
    assert len(epoch0) == len(epoch1) == steps_in_epoch(spec, 0) and epoch0 != epoch1
    with Loader(spec, 1, cat) as loader, Loader(spec, 1, cat) as resumed:
        it = iter(loader)
        for _ in range(5):
            next(it)
        resumed.load_state_dict(loader.state_dict())
        assert [batch_key(b) for b in resumed] == epoch0[5:]
        assert [batch_key(b) for b in resumed] == epoch1


def test_loader_prefetch_does_not_change_batches(real):
    cat, text, *_ = real
    spec = RunSpec.create(cat, f"text@{text.id[:12]}", seed=4, batch_size=6, world_size=3)
    streams = []
    for prefetch in (0, 1, 4):
        with Loader(spec, 2, cat, prefetch=prefetch) as loader:
            streams.append([batch_key(next_batch(loader)) for _ in range(40)])
    assert streams[0] == streams[1] == streams[2]


def test_loader_elastic_resume_covers_every_row_once(real):
    """Two ranks read part of an epoch; three ranks with another batch size resume from rank 0's
    state: every row of the epoch is read once (drop: all but a tail shorter than 3 x 4)."""
    cat, text, _, _, hashes = real
    spec = RunSpec.create(cat, f"text@{text.id[:12]}", seed=5, batch_size=7, world_size=2)
    loaders = [Loader(spec, r, cat) for r in range(2)]
    seen = [i for _ in range(9) for ld in loaders for i in next_batch(ld).indices.tolist()]
    for ld in loaders:
        ld.close()
    state = loaders[0].state_dict()
    wide = spec.replace(world_size=3, batch_size=4)
    resumed = [Loader(wide, r, cat) for r in range(3)]
    for ld in resumed:
        ld.load_state_dict(state)
    for ld in resumed:
        for batch in ld:
            assert batch.row_hashes == [hashes[text.id][i] for i in batch.indices.tolist()]
            seen.extend(batch.indices.tolist())
        ld.close()
    assert len(seen) == len(set(seen))
    assert 310 - len(seen) == (310 - 9 * 14) % 12


def test_loader_refuses_foreign_or_tampered_state(real):
    cat, text, _, text2, _ = real
    spec = RunSpec.create(cat, f"text@{text.id[:12]}", seed=1, batch_size=8, world_size=2)
    with Loader(spec, 0, cat) as source:
        for _ in range(3):
            next_batch(source)
        state = source.state_dict()
    with Loader(spec, 0, cat) as fresh:
        expected = batch_key(fresh.batch_at(0))
        other_seed = Loader(spec.replace(seed=2), 0, cat)
        spec2 = RunSpec.create(cat, f"text@{text2.id[:12]}", seed=1, batch_size=8, world_size=2)
        other_version = Loader(spec2, 0, cat)
        for foreign in (other_seed, other_version):
            with pytest.raises(UserError, match="another data order"):
                foreign.load_state_dict(state)
            foreign.close()
        with pytest.raises(IntegrityError, match="receipt mismatch"):
            fresh.load_state_dict({**state, "receipt": "deadbeefdeadbeef"})
        with pytest.raises(IntegrityError, match="receipt mismatch"):
            fresh.load_state_dict({**state, "position": state["position"] + 1})
        with pytest.raises(UserError, match="not a dsinspect loader state"):
            fresh.load_state_dict({"step": 3})
        assert batch_key(next_batch(fresh)) == expected  # a refused state leaves the loader as it was
        fresh.load_state_dict(state)
        assert fresh.step == 3
        with pytest.raises(UserError, match="before this run spec's start"):
            fresh.batch_at(2)
    with pytest.raises(UserError, match="outside the world size"):
        Loader(spec, 2, cat)
    wrong = RunSpec((Source("text", text.id, (70, 70, 70, 100)),), seed=1, batch_size=8)
    with pytest.raises(IntegrityError, match="do not match the run spec's shard sizes"):
        Loader(wrong, 0, cat)

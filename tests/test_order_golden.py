"""Golden values that pin the sample order across releases (like Grain's cross-version
determinism test).

A change to any value here reorders every existing run: resumed jobs would read other samples,
replays of old steps would show other batches, and saved loader states would be refused. Such a
change must be deliberate and versioned (a new spec/state format, a release note), never a quiet
update of these lists. The order values were computed once at commit 2400ef9; the per-sample
seeds at 9ac0bd9, which derives a sample's seed from its own source epoch.
"""

from __future__ import annotations

import numpy as np
import pytest

from dsinspect.loaders.order.permutation import Permutation, key_of, mix64, sample_seeds
from dsinspect.loaders.order.plan import epoch_order, mixture_counts, plan_batch
from dsinspect.loaders.order.spec import RunSpec, Source
from dsinspect.loaders.order.state import LoaderState

ONE = (Source("a", "a" * 64, (50, 0, 30, 20)),)
MIX = (Source("a", "a" * 64, (60, 40), 2.0), Source("b", "b" * 64, (25,), 1.0))
MIX3 = (Source("a", "a" * 64, (30, 30, 0, 30), 1.0), Source("b", "b" * 64, (20, 5), 0.5),
        Source("c", "c" * 64, (7,), 0.25))

RUNS = {
    "global_drop": RunSpec(ONE, seed=1234, batch_size=4, world_size=3, shuffle="global", last_batch="drop"),
    "window_pad": RunSpec(ONE, seed=1234, batch_size=4, world_size=3, shuffle="window", window_shards=2,
                          last_batch="pad"),
    "none_pad": RunSpec(ONE, seed=1234, batch_size=4, world_size=3, shuffle="none", last_batch="pad"),
    "mix_global": RunSpec(MIX, seed=99, batch_size=5, world_size=2, shuffle="global", epoch_size=90,
                          mixture_block=16),
    "mix_window": RunSpec(MIX3, seed=5, batch_size=3, world_size=2, shuffle="window", window_shards=2,
                          mixture_block=12, last_batch="pad"),
    "mix_none": RunSpec(MIX, seed=0, batch_size=4, world_size=1, shuffle="none", mixture_block=8),
}

# ---- golden values: computed once; see the module docstring before touching anything below ----

PERMUTATIONS = {  # (n, key): Permutation(n, key)(arange(n))
    (0, 5): [],
    (1, 5): [0],
    (10, 0): [5, 8, 7, 1, 6, 3, 9, 2, 4, 0],
    (17, 42): [4, 6, 5, 15, 14, 8, 12, 13, 16, 11, 7, 9, 3, 2, 1, 0, 10],
    (2, 5): [0, 1],
    (3, 0): [2, 0, 1],
    (32, 7): [20, 4, 27, 21, 3, 24, 12, 19, 13, 22, 6, 9, 8, 29, 25, 17, 31, 14, 18, 7, 26, 15, 16, 11, 28, 23,
        2, 1, 30, 5, 10, 0],
    (33, 2**63 + 5): [6, 5, 19, 14, 3, 2, 1, 32, 9, 25, 30, 7, 12, 21, 11, 0, 13, 16, 26, 31, 17, 22, 10, 27,
        24, 29, 15, 18, 4, 28, 8, 20, 23],
}
PERMUTATION_1E8_KEY_99 = [2664565, 42415583, 37186968, 14308474, 75581446]  # at [0, 1, 2, 12345678, 10**8 - 1]
KEY_OF = [214715211074630150, 16629034431890738719, 5611419446354586042, 10875331098243895125,
          9655813907517506465, 3244421341483603138]
# of key_of('global', 0, 0, 0), ('a'), (1, 2, 3), ('sample-seed', 5, 1), ('mix', 0, 0), ()
MIX64 = [0, 6238072747940578789, 15839785061582574730, 13029008266876403067]  # of [0, 1, 2, 2**64 - 1]
# sample_seeds(seed=7, epoch=3, sources=[0, 0, 1], indices=[0, 1, 2])
SAMPLE_SEEDS = [5232906577053022275, 14187374600291669102, 5378575717261285100]

# per spec: order_hash, mixture_counts, receipt of the state at step 9 (rank 0), the seeds of
# (step 8, rank 0), the first 24 entries of epoch 1's order, and {(step, rank): (epoch, sources,
# indices, padding)} at steps 0, 7, 8, 1000 and 10**9
SPECS = {
    'global_drop': dict(
        order_hash='ca2570ea011c69444ba1af31b3085134fa2814166fb88ab512817c9fe6983e74',
        counts=None, receipt='57a165c2335d2568',
        seeds=[2470183987656991382, 11269072421618945605, 10726068743349877554, 12969143818353152952],
        epoch1_head=[43, 47, 29, 99, 62, 98, 34, 68, 95, 35, 14, 37, 39, 75, 77, 86, 70, 73, 11, 58, 72, 81, 32,
                     56],
        batches={
            (0, 0): (0, [0, 0, 0, 0], [55, 6, 19, 42], [0, 0, 0, 0]),
            (0, 1): (0, [0, 0, 0, 0], [87, 86, 0, 45], [0, 0, 0, 0]),
            (0, 2): (0, [0, 0, 0, 0], [59, 17, 57, 12], [0, 0, 0, 0]),
            (7, 0): (0, [0, 0, 0, 0], [28, 66, 13, 49], [0, 0, 0, 0]),
            (7, 1): (0, [0, 0, 0, 0], [63, 53, 75, 7], [0, 0, 0, 0]),
            (7, 2): (0, [0, 0, 0, 0], [64, 22, 85, 23], [0, 0, 0, 0]),
            (8, 0): (1, [0, 0, 0, 0], [43, 47, 29, 99], [0, 0, 0, 0]),
            (8, 1): (1, [0, 0, 0, 0], [62, 98, 34, 68], [0, 0, 0, 0]),
            (8, 2): (1, [0, 0, 0, 0], [95, 35, 14, 37], [0, 0, 0, 0]),
            (1000, 0): (125, [0, 0, 0, 0], [42, 35, 57, 98], [0, 0, 0, 0]),
            (1000, 1): (125, [0, 0, 0, 0], [9, 84, 50, 80], [0, 0, 0, 0]),
            (1000, 2): (125, [0, 0, 0, 0], [29, 28, 7, 32], [0, 0, 0, 0]),
            (10**9, 0): (125000000, [0, 0, 0, 0], [30, 73, 58, 49], [0, 0, 0, 0]),
            (10**9, 1): (125000000, [0, 0, 0, 0], [67, 51, 38, 55], [0, 0, 0, 0]),
            (10**9, 2): (125000000, [0, 0, 0, 0], [91, 94, 32, 9], [0, 0, 0, 0]),
        },
    ),
    'mix_global': dict(
        order_hash='979065f55e6c1786ec3beae4fe2031ff050f0bd73b95dd30393caa7e257c823d',
        counts=[11, 5], receipt='a9c95e04aafba570',
        seeds=[17100051492246566691, 635706367494084171, 17847295335042404133, 14468290311559740489,
               12874477621702974198],
        epoch1_head=[[1, 19], [1, 3], [0, 88], [1, 20], [0, 25], [0, 97], [0, 60], [1, 7], [1, 8], [1, 9],
                     [0, 26], [0, 17], [0, 13], [0, 46], [0, 94], [1, 16], [1, 2], [0, 64], [0, 61], [0, 8],
                     [0, 9], [0, 24], [0, 2], [1, 1]],
        batches={
            (0, 0): (0, [0, 1, 1, 0, 0], [33, 24, 17, 98, 59], [0, 0, 0, 0, 0]),
            (0, 1): (0, [0, 0, 1, 0, 0], [82, 68, 1, 19, 44], [0, 0, 0, 0, 0]),
            (7, 0): (0, [0, 0, 0, 1, 1], [86, 84, 16, 11, 6], [0, 0, 0, 0, 0]),
            (7, 1): (0, [0, 1, 0, 1, 0], [43, 14, 65, 5, 34], [0, 0, 0, 0, 0]),
            (8, 0): (0, [0, 0, 0, 1, 0], [37, 89, 79, 12, 22], [0, 0, 0, 0, 0]),
            (8, 1): (0, [1, 0, 0, 0, 0], [18, 49, 4, 83, 1], [0, 0, 0, 0, 0]),
            (1000, 0): (111, [0, 1, 0, 0, 0], [36, 13, 92, 6, 69], [0, 0, 0, 0, 0]),
            (1000, 1): (111, [1, 1, 1, 1, 0], [23, 14, 15, 2, 83], [0, 0, 0, 0, 0]),
            (10**9, 0): (111111111, [1, 1, 0, 0, 1], [5, 22, 59, 32, 16], [0, 0, 0, 0, 0]),
            (10**9, 1): (111111111, [0, 0, 0, 0, 0], [69, 95, 42, 90, 39], [0, 0, 0, 0, 0]),
        },
    ),
    'mix_none': dict(
        order_hash='14c459d606a4c258ec722b2f8fe42df34480d5a7dab1ba3ccea9da42b1ebba7b',
        counts=[5, 3], receipt='7a33d849bb7df5fc',
        seeds=[9407329524409781153, 6626797028556705508, 15351899742656246608, 15043425032501653583],
        epoch1_head=[[0, 78], [1, 22], [0, 79], [0, 80], [1, 23], [0, 81], [0, 82], [1, 24], [0, 83], [1, 0],
                     [0, 84], [0, 85], [1, 1], [0, 86], [0, 87], [1, 2], [0, 88], [1, 3], [0, 89], [0, 90],
                     [1, 4], [0, 91], [0, 92], [1, 5]],
        batches={
            (0, 0): (0, [0, 1, 0, 0], [0, 0, 1, 2], [0, 0, 0, 0]),
            (7, 0): (0, [1, 0, 1, 0], [10, 18, 11, 19], [0, 0, 0, 0]),
            (8, 0): (0, [0, 1, 0, 0], [20, 12, 21, 22], [0, 0, 0, 0]),
            (1000, 0): (32, [0, 1, 0, 0], [20, 12, 21, 22], [0, 0, 0, 0]),
            (10**9, 0): (32258064, [0, 1, 0, 0], [90, 24, 91, 92], [0, 0, 0, 0]),
        },
    ),
    'mix_window': dict(
        order_hash='220f29949e20c0eb5a73aba1b3cd5e505039fb0c27e69ada38a7fd4b4fcb20f2',
        counts=[7, 3, 2], receipt='f176f12ed708bac9',
        seeds=[14719369424201954195, 13805094929584308810, 14765110825417002253],
        epoch1_head=[[0, 88], [0, 62], [1, 20], [0, 67], [1, 7], [2, 2], [2, 3], [0, 68], [0, 86], [1, 3],
                     [2, 4], [2, 1], [0, 89], [0, 78], [1, 9], [0, 70], [0, 63], [1, 14], [0, 84], [0, 87],
                     [1, 10], [0, 77], [0, 66], [2, 0]],
        batches={
            (0, 0): (0, [1, 1, 0], [17, 4, 27], [0, 0, 0]),
            (0, 1): (0, [2, 1, 0], [2, 19, 20], [0, 0, 0]),
            (7, 0): (0, [1, 0, 0], [10, 12, 33], [0, 0, 0]),
            (7, 1): (0, [2, 0, 0], [4, 59, 58], [0, 0, 0]),
            (8, 0): (0, [0, 0, 0], [43, 24, 47], [0, 0, 0]),
            (8, 1): (0, [1, 0, 0], [9, 55, 1], [0, 0, 0]),
            (1000, 0): (47, [2, 0, 0], [6, 73, 53], [0, 0, 0]),
            (1000, 1): (47, [0, 0, 0], [44, 48, 34], [0, 0, 0]),
            (10**9, 0): (47619047, [1, 0, 0], [18, 26, 36], [0, 0, 0]),
            (10**9, 1): (47619047, [0, 1, 0], [19, 8, 49], [0, 0, 0]),
        },
    ),
    'none_pad': dict(
        order_hash='468dacf1bef8f5af18ce227378ccc1a345a64c7e72f52fc08d45e0684f0686eb',
        counts=None, receipt='f48f6d4d3a8f55b7',
        seeds=[7410412678813134175, 139972868988054612, 14157059462574643621, 17236025391683302326],
        epoch1_head=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23],
        batches={
            (0, 0): (0, [0, 0, 0, 0], [0, 1, 2, 3], [0, 0, 0, 0]),
            (0, 1): (0, [0, 0, 0, 0], [4, 5, 6, 7], [0, 0, 0, 0]),
            (0, 2): (0, [0, 0, 0, 0], [8, 9, 10, 11], [0, 0, 0, 0]),
            (7, 0): (0, [0, 0, 0, 0], [84, 85, 86, 87], [0, 0, 0, 0]),
            (7, 1): (0, [0, 0, 0, 0], [88, 89, 90, 91], [0, 0, 0, 0]),
            (7, 2): (0, [0, 0, 0, 0], [92, 93, 94, 95], [0, 0, 0, 0]),
            (8, 0): (0, [0, 0, 0, 0], [96, 97, 98, 99], [0, 0, 0, 0]),
            (8, 1): (0, [0, 0, 0, 0], [0, 1, 2, 3], [1, 1, 1, 1]),
            (8, 2): (0, [0, 0, 0, 0], [4, 5, 6, 7], [1, 1, 1, 1]),
            (1000, 0): (111, [0, 0, 0, 0], [12, 13, 14, 15], [0, 0, 0, 0]),
            (1000, 1): (111, [0, 0, 0, 0], [16, 17, 18, 19], [0, 0, 0, 0]),
            (1000, 2): (111, [0, 0, 0, 0], [20, 21, 22, 23], [0, 0, 0, 0]),
            (10**9, 0): (111111111, [0, 0, 0, 0], [12, 13, 14, 15], [0, 0, 0, 0]),
            (10**9, 1): (111111111, [0, 0, 0, 0], [16, 17, 18, 19], [0, 0, 0, 0]),
            (10**9, 2): (111111111, [0, 0, 0, 0], [20, 21, 22, 23], [0, 0, 0, 0]),
        },
    ),
    'window_pad': dict(
        order_hash='77adf952332899965bcf0f1cd70fa8603b560f38e0eaca33ce4244e985644584',
        counts=None, receipt='e80a1b1f2861bf0c',
        seeds=[14298558437475098251, 139806571477452709, 14675690890052945303, 6594824779502151884],
        epoch1_head=[92, 18, 96, 31, 29, 39, 27, 3, 32, 91, 98, 8, 16, 93, 81, 85, 19, 38, 33, 95, 42, 22, 43,
                     48],
        batches={
            (0, 0): (0, [0, 0, 0, 0], [78, 59, 62, 73], [0, 0, 0, 0]),
            (0, 1): (0, [0, 0, 0, 0], [63, 76, 56, 51], [0, 0, 0, 0]),
            (0, 2): (0, [0, 0, 0, 0], [74, 65, 57, 60], [0, 0, 0, 0]),
            (7, 0): (0, [0, 0, 0, 0], [16, 48, 40, 22], [0, 0, 0, 0]),
            (7, 1): (0, [0, 0, 0, 0], [93, 1, 35, 21], [0, 0, 0, 0]),
            (7, 2): (0, [0, 0, 0, 0], [82, 29, 7, 30], [0, 0, 0, 0]),
            (8, 0): (0, [0, 0, 0, 0], [43, 90, 49, 19], [0, 0, 0, 0]),
            (8, 1): (0, [0, 0, 0, 0], [78, 59, 62, 73], [1, 1, 1, 1]),
            (8, 2): (0, [0, 0, 0, 0], [63, 76, 56, 51], [1, 1, 1, 1]),
            (1000, 0): (111, [0, 0, 0, 0], [95, 74, 61, 53], [0, 0, 0, 0]),
            (1000, 1): (111, [0, 0, 0, 0], [87, 58, 92, 73], [0, 0, 0, 0]),
            (1000, 2): (111, [0, 0, 0, 0], [57, 90, 77, 94], [0, 0, 0, 0]),
            (10**9, 0): (111111111, [0, 0, 0, 0], [85, 63, 90, 57], [0, 0, 0, 0]),
            (10**9, 1): (111111111, [0, 0, 0, 0], [95, 69, 54, 55], [0, 0, 0, 0]),
            (10**9, 2): (111111111, [0, 0, 0, 0], [67, 51, 52, 96], [0, 0, 0, 0]),
        },
    ),
}

# ---- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, key", list(PERMUTATIONS))
def test_permutation_golden(n, key):
    assert Permutation(n, key)(np.arange(n)).tolist() == PERMUTATIONS[(n, key)]


def test_permutation_golden_on_a_large_domain():
    assert Permutation(10**8, 99)(np.array([0, 1, 2, 12345678, 10**8 - 1])).tolist() == PERMUTATION_1E8_KEY_99


def test_key_of_mix64_and_sample_seeds_golden():
    assert [key_of("global", 0, 0, 0), key_of("a"), key_of(1, 2, 3), key_of("sample-seed", 5, 1),
            key_of("mix", 0, 0), key_of()] == KEY_OF
    assert mix64(np.array([0, 1, 2, 2**64 - 1], dtype=np.uint64)).tolist() == MIX64
    assert sample_seeds(7, 3, np.array([0, 0, 1]), np.array([0, 1, 2])).tolist() == SAMPLE_SEEDS


@pytest.mark.parametrize("name", list(RUNS))
def test_spec_hash_counts_and_receipt_golden(name):
    spec, gold = RUNS[name], SPECS[name]
    assert spec.order_hash == gold["order_hash"]
    assert (mixture_counts(spec) if spec.is_mixture else None) == gold["counts"]
    assert LoaderState.at(spec, 9, 0).receipt == gold["receipt"]


@pytest.mark.parametrize("name", list(RUNS))
def test_batches_golden(name):
    spec, gold = RUNS[name], SPECS[name]
    got = {}
    for step, rank in gold["batches"]:
        p = plan_batch(spec, step, rank)
        got[(step, rank)] = (p.epoch, p.sources.tolist(), p.indices.tolist(), p.padding.astype(int).tolist())
    assert got == gold["batches"]
    assert plan_batch(spec, 8, 0).seeds.tolist() == gold["seeds"]


@pytest.mark.parametrize("name", list(RUNS))
def test_epoch_order_golden(name):
    assert epoch_order(RUNS[name], 1)[:24].tolist() == SPECS[name]["epoch1_head"]

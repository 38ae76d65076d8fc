"""`best_fit` packing as arithmetic (sequences/best_fit.py): over random layouts every token of every
document (with its EOS) sits in exactly one sequence of the epoch, each sequence holds documents of one
shard in at most its width, a shard's sequences number ceil(its tokens / width) (what locates them from
the manifest alone), `spans` is the exact inverse, and locating reads only the shard located. On a
heavy-tailed length distribution it splits no document that fits a sequence, where `concat` splits
most. docs/PRETRAINING.md links here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sequence_fixtures import EOS, layout_of

from dsinspect.errors import UserError
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.sequences.best_fit import BestFitPlan, pack_shard, packing_stats

layouts = st.lists(st.lists(st.integers(0, 50), max_size=8), min_size=1, max_size=6)
specs = st.builds(SequenceSpec, length=st.integers(1, 24), labels=st.booleans(), eos=st.sampled_from([None, EOS]),
                  packing=st.just("best_fit"), shuffle_documents=st.booleans())


@settings(max_examples=120, deadline=None)
@given(lengths=layouts, spec=specs, seed=st.integers(0, 2**32), epoch=st.integers(0, 3))
def test_every_token_once_in_sequences_of_one_shard_located_from_the_counts(lengths, spec, seed, epoch):
    eos = int(spec.eos is not None)
    sizes = [[n + eos for n in shard] for shard in lengths]
    if not any(map(sum, sizes)):
        with pytest.raises(UserError, match="no document to pack"):
            BestFitPlan(layout_of(lengths), spec, seed)
        return
    calls: list[int] = []
    plan = BestFitPlan(layout_of(lengths, calls), spec, seed)
    per_shard = [-(-sum(s) // spec.width) for s in sizes]
    assert plan.sequences == sum(per_shard) and calls == []  # from the counts alone
    held: dict[int, list[tuple[int, int, int, int]]] = {}  # document -> (sequence, start, stop, offset)
    shard_of_doc = np.repeat(np.arange(len(lengths)), [len(x) for x in lengths])
    seen_shards = []
    for j in range(plan.sequences):
        calls.clear()
        seg = plan.segments(epoch, j)
        assert int(seg.sizes.sum()) <= spec.width and (seg.sizes > 0).all()
        shards = set(shard_of_doc[seg.docs].tolist())
        assert len(shards) == 1 and set(calls) <= shards  # one shard's documents; only its lengths read
        seen_shards.append(shards.pop())
        offsets = (np.cumsum(seg.sizes) - seg.sizes).tolist()
        for d, a, b, o in zip(seg.docs.tolist(), seg.starts.tolist(), seg.stops.tolist(), offsets):
            held.setdefault(d, []).append((j, a, b, o))
    flat = [n for shard in sizes for n in shard]
    for d, n in enumerate(flat):  # each document's tokens [0, n) exactly once, in pieces that do not overlap
        pieces = sorted((a, b) for _, a, b, _ in held.get(d, []))
        assert sum(b - a for a, b in pieces) == n and all(p[1] <= q[0] for p, q in zip(pieces, pieces[1:]))
        # spans: the exact inverse (sequence, token range, offset in the sequence)
        assert [(s.sequence, s.start, s.stop, s.offset) for s in plan.spans(epoch, d)] == \
            sorted(held.get(d, []), key=lambda x: x[1])
    # the epoch's shards in their seeded order, each its ceil(tokens / width) sequences in a row
    order = np.arange(len(lengths))
    if spec.shuffle_documents:
        order = Permutation(len(lengths), key_of("doc-shards", seed, 0, epoch))(order)
    assert seen_shards == [s for s in order.tolist() for _ in range(per_shard[s])]


def test_a_shard_packs_into_its_count_with_documents_longer_than_a_sequence_cut_into_full_pieces():
    packed = pack_shard(np.array([10, 3, 25, 7, 1, 4]), 10)  # 50 tokens: 5 sequences of 10
    assert len(packed.first) - 1 == 5
    pieces = {(int(d), int(a), int(b)) for d, a, b in zip(packed.docs, packed.starts, packed.stops)}
    assert {(0, 0, 10), (2, 0, 10), (2, 10, 20)} <= pieces  # full pieces, a sequence each
    fill = np.bincount(packed.seqs, weights=packed.stops - packed.starts, minlength=5)
    assert fill.tolist() == [10, 10, 10, 10, 10]  # 7+3, 5+4+1 fit exactly: best fit finds them


def test_on_a_heavy_tailed_corpus_best_fit_splits_little_more_than_what_exceeds_a_sequence():
    """Log-normal lengths (median ~400 tokens, 5 % longer than a sequence), 20,000 documents in one
    shard: packed into the fewest sequences that hold them, best fit leaves < 0.1 % padding and splits
    the documents longer than a sequence and < 0.2 % of the others (the last small ones, when the
    sequences' room runs out), where concat splits a document at nearly every sequence boundary."""
    rng = np.random.default_rng(0)
    lengths = np.minimum(np.maximum(1, rng.lognormal(6.0, 1.0, 20_000).astype(np.int64)), 30_000)
    stats = packing_stats(lengths, SequenceSpec(length=2048, labels=True, eos=0, packing="best_fit"))
    assert stats["dropped_tokens"] == 0 and stats["sequences"] == -(-stats["tokens"] // 2049)
    assert stats["split_longer_than_a_sequence"] == int((lengths + 1 > 2049).sum())
    assert stats["split_others"] <= stats["documents"] // 500
    assert stats["padding_fraction"] < 1e-3
    split = stats["split_longer_than_a_sequence"] + stats["split_others"]
    assert stats["concat_split"] > 5 * split and stats["concat_split"] > 0.8 * stats["concat_sequences"]


def test_best_fit_runs_are_spec_fields_that_leave_concat_hashes_alone():
    concat = SequenceSpec(length=8, eos=0)
    assert "pad" not in concat.to_json()
    packed = SequenceSpec(length=8, eos=0, labels=True, packing="best_fit", pad=3)
    assert SequenceSpec.from_json(packed.to_json()) == packed and packed.pad_token == 3
    assert packed.width == 9 and packed.overlap == 0  # its own label token: nothing shared with the next
    assert SequenceSpec(length=8, eos=5, packing="best_fit").pad_token == 5
    with pytest.raises(UserError, match="pad is for best_fit"):
        SequenceSpec(length=8, pad=1)

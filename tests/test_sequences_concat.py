"""`concat` packing as arithmetic, checked against the stream it describes built by brute force:
every sequence's segments hold exactly its window of the epoch's stream, every document's spans are
exactly where its tokens went, and locating touches only the shards a sequence spans (no pass over
the documents). Random layouts include empty shards, empty documents and documents longer than a
sequence; docs/PRETRAINING.md links here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sequence_fixtures import EOS, brute_stream, layout_of, tokens_of

from dsinspect.errors import UserError
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.sequences.concat import ConcatPlan
from dsinspect.loaders.sequences.layout import TokenLayout
from dsinspect.loaders.sequences.segments import assemble

layouts = st.lists(st.lists(st.integers(0, 30), max_size=6), min_size=1, max_size=7)
specs = st.builds(SequenceSpec, length=st.integers(1, 40), labels=st.booleans(),
                  eos=st.sampled_from([None, EOS]), shuffle_documents=st.booleans())


@settings(max_examples=120, deadline=None)
@given(lengths=layouts, spec=specs, seed=st.integers(0, 2**32), epoch=st.integers(0, 3))
def test_sequences_and_spans_are_the_stream_they_describe(lengths, spec, seed, epoch):
    stream, owner = brute_stream(lengths, spec, seed, epoch)
    expected = max(0, (len(stream) - spec.overlap) // spec.length)
    if expected == 0:
        with pytest.raises(UserError, match="make no sequence"):
            ConcatPlan(layout_of(lengths), spec, seed)
        return
    plan = ConcatPlan(layout_of(lengths), spec, seed)
    assert plan.sequences == expected
    spans: dict[int, list[tuple[int, int, int, int]]] = {}
    for j in range(plan.sequences):
        segments = plan.segments(epoch, j)
        window = stream[j * spec.length: j * spec.length + spec.width]
        assert len(window) == spec.width
        np.testing.assert_array_equal(assemble(segments, lambda d: tokens_of(d, lengths), spec.eos), window)
        np.testing.assert_array_equal(np.repeat(segments.docs, segments.sizes), owner[j * spec.length:][:spec.width])
        assert segments.cu_seqlens()[-1] == spec.width and (segments.sizes > 0).all()
        offset = 0
        for doc, start, stop in zip(segments.docs.tolist(), segments.starts.tolist(), segments.stops.tolist()):
            spans.setdefault(doc, []).append((j, start, stop, offset))
            offset += stop - start
    for doc in range(sum(len(x) for x in lengths)):
        assert [(s.sequence, s.start, s.stop, s.offset) for s in plan.spans(epoch, doc)] == spans.get(doc, [])
    # many sequences at once (in any order) are each one's segments, and name the shards they take from
    picked = np.random.default_rng(seed).permutation(plan.sequences)[:7]
    owner_of, docs, starts, stops = plan.segments_many(epoch, picked)
    for i, j in enumerate(picked.tolist()):
        one = plan.segments(epoch, j)
        mine = owner_of == i
        assert (docs[mine].tolist(), starts[mine].tolist(), stops[mine].tolist()) == \
            (one.docs.tolist(), one.starts.tolist(), one.stops.tolist())
    first_need = [plan.layout.shard_of(int(d)) for d in docs]
    assert plan.shards(epoch, picked) == list(dict.fromkeys(first_need))


def test_a_document_order_is_a_permutation_that_changes_with_the_epoch_and_the_seed():
    lengths = [[5] * 40, [3] * 25, [], [7] * 30]
    spec = SequenceSpec(length=16, eos=EOS, shuffle_documents=True)

    def order(seed: int, epoch: int) -> list[int]:
        _, owner = brute_stream(lengths, spec, seed, epoch)
        plan = ConcatPlan(layout_of(lengths), spec, seed)
        seen = np.concatenate([plan.segments(epoch, j).docs for j in range(plan.sequences)])
        firsts = list(dict.fromkeys(seen.tolist()))
        assert firsts == list(dict.fromkeys(owner.tolist()))[:len(firsts)]
        return list(dict.fromkeys(owner.tolist()))

    base = order(1, 0)
    assert sorted(base) == list(range(95))
    assert order(1, 1) != base and order(2, 0) != base and order(1, 0) == base
    plain = ConcatPlan(layout_of(lengths), SequenceSpec(length=16, eos=EOS), 1)
    assert plain.segments(0, 0).docs.tolist() == [0, 1, 2]  # stored order: 6 + 6 + 4 tokens of documents 0..2


def test_a_sequence_longer_than_its_documents_and_documents_longer_than_a_sequence():
    lengths = [[100], [2, 2], [0, 0, 3], [4]]
    plan = ConcatPlan(layout_of(lengths), SequenceSpec(length=8, labels=True), 0)  # 111 tokens: 13 sequences of 9
    assert plan.sequences == (111 - 1) // 8
    last = plan.segments(0, plan.sequences - 1)  # tokens 96..104: the long document's end, shard 1, shard 2
    assert last.docs.tolist() == [0, 1, 2, 5] and last.starts.tolist() == [96, 0, 0, 0]
    assert last.stops.tolist() == [100, 2, 2, 1] and last.cu_seqlens().tolist() == [0, 4, 6, 8, 9]
    assert last.position_ids().tolist() == [0, 1, 2, 3, 0, 1, 0, 1, 0]
    assert [(s.sequence, s.start, s.stop) for s in plan.spans(0, 0)][-2:] == [(11, 88, 97), (12, 96, 100)]
    assert [(s.sequence, s.start, s.stop, s.offset) for s in plan.spans(0, 5)] == [(12, 0, 1, 8)]  # the rest unread
    assert plan.spans(0, 3) == [] and plan.spans(0, 6) == []  # an empty document; one in the epoch's unread tail
    with pytest.raises(UserError, match="sequence 13 is outside 0..12"):
        plan.segments(0, 13)
    with pytest.raises(UserError, match="document 7 is outside 0..6"):
        plan.spans(0, 7)


def test_locating_reads_the_lengths_of_the_shards_a_sequence_spans_and_no_others():
    rng = np.random.default_rng(5)
    lengths = [rng.integers(1, 60, 50).tolist() for _ in range(200)]
    calls: list[int] = []
    spec = SequenceSpec(length=64, eos=EOS, shuffle_documents=True)
    plan = ConcatPlan(layout_of(lengths, calls), spec, 9)
    assert calls == []  # nothing read to start
    for j in rng.integers(0, plan.sequences, 20).tolist():
        calls.clear()
        plan = ConcatPlan(layout_of(lengths, calls), spec, 9)  # a fresh process: nothing kept
        docs = plan.segments(3, j).docs
        shards = {plan.layout.shard_of(int(d)) for d in docs}
        assert set(calls) == shards and len(calls) == len(shards) <= 2
        plan.segments(4, j)  # another epoch orders the same shards' documents anew, without reading them again
        assert len(calls) == len(shards) + len({plan.layout.shard_of(int(d)) for d in plan.segments(4, j).docs}
                                                - shards)
    calls.clear()
    plan = ConcatPlan(layout_of(lengths, calls), spec, 9)
    plan.spans(3, 4321)
    assert calls == [plan.layout.shard_of(4321)]


def test_a_layout_that_disagrees_with_its_lengths_is_refused():
    layout = TokenLayout(np.array([2]), np.array([10]), lambda s: np.array([4, 5]))
    with pytest.raises(UserError, match="shard 0: 2 document lengths summing to 9, the layout says 2 documents of 10"):
        ConcatPlan(layout, SequenceSpec(length=4), 0).segments(0, 0)


@pytest.mark.parametrize("bad, says", [
    ({"length": 0}, "sequence length must be an integer >= 1"),
    ({"length": 8, "eos": -1}, "eos must be a token id"),
    ({"length": 8, "packing": "zigzag"}, "packing must be one of concat"),
    ({"length": 8, "labels": "yes"}, "labels must be true or false"),
])
def test_a_bad_sequence_spec_says_what_is_wrong(bad, says):
    with pytest.raises(UserError, match=says):
        SequenceSpec(**bad)


def test_the_sequence_spec_round_trips_through_json():
    spec = SequenceSpec(length=2048, labels=True, eos=50256, shuffle_documents=True)
    assert SequenceSpec.from_json(spec.to_json()) == spec
    with pytest.raises(UserError, match="sequences: malformed sequence spec"):
        SequenceSpec.from_json({"length": 3})


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 65537])
def test_the_inverse_permutation_undoes_the_permutation(n):
    p = Permutation(n, key_of("t", n))
    i = np.arange(n)
    np.testing.assert_array_equal(p.inverse(p(i)), i)
    np.testing.assert_array_equal(p(p.inverse(i)), i)

"""`pad` packing (sequences/pad.py): one document per sequence, a longer one cut into pieces of the
sequence's width, the rest padding. Over random layouts every token of every document (with its EOS)
sits in exactly one sequence, a sequence holds one piece of one document, a document's pieces are
consecutive sequences in order, the epoch lays out the shards in their seeded order with the counts
the run spec records, and `spans` is the exact inverse. The spec counts each shard's sequences once
(`RunSpec.create`), and a count that is not these documents' is refused. docs/PRETRAINING.md links here."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sequence_fixtures import EOS, layout_of

from dsinspect.errors import UserError
from dsinspect.loaders import Catalog, Field, PackedLoader, RunSpec, WriteOptions, packed_run
from dsinspect.loaders.order.packing import SequenceSpec, pad_sequences
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.sequences.pad import PadPlan, pack_padded

layouts = st.lists(st.lists(st.integers(0, 50), max_size=8), min_size=1, max_size=6)
specs = st.builds(SequenceSpec, length=st.integers(1, 24), labels=st.booleans(), eos=st.sampled_from([None, EOS]),
                  packing=st.just("pad"), shuffle_documents=st.booleans())


def counts_of(lengths: list[list[int]], spec: SequenceSpec) -> np.ndarray:
    return np.array([pad_sequences(np.array(shard, np.int64), spec) for shard in lengths])


@settings(max_examples=120, deadline=None)
@given(lengths=layouts, spec=specs, seed=st.integers(0, 2**32), epoch=st.integers(0, 3))
def test_every_token_once_a_piece_a_sequence_each_documents_pieces_in_a_row(lengths, spec, seed, epoch):
    eos = int(spec.eos is not None)
    sizes = [[n + eos for n in shard] for shard in lengths]
    counts = counts_of(lengths, spec)
    assert counts.tolist() == [sum(-(-n // spec.width) for n in shard) for shard in sizes]
    if not counts.sum():
        with pytest.raises(UserError, match="no document to pack"):
            PadPlan(layout_of(lengths), spec, seed, 0, counts)
        return
    calls: list[int] = []
    plan = PadPlan(layout_of(lengths, calls), spec, seed, 0, counts)
    assert plan.sequences == counts.sum() and calls == []  # from the counts alone
    shard_of_doc = np.repeat(np.arange(len(lengths)), [len(x) for x in lengths])
    pieces: list[tuple[int, int, int]] = []  # (document, start, stop) of each sequence, in order
    for j in range(plan.sequences):
        calls.clear()
        seg = plan.segments(epoch, j)
        assert len(seg) == 1 and 0 < int(seg.sizes[0]) <= spec.width  # one piece of one document
        assert seg.starts[0] % spec.width == 0
        assert calls in ([], [int(shard_of_doc[seg.docs[0]])])  # only its shard's lengths, when not kept
        pieces.append((int(seg.docs[0]), int(seg.starts[0]), int(seg.stops[0])))
    # the epoch: shards in their seeded order, each one's documents in theirs, each document's pieces in a row
    order = np.arange(len(lengths))
    if spec.shuffle_documents:
        order = Permutation(len(lengths), key_of("doc-shards", seed, 0, epoch))(order)
    starts = np.concatenate([[0], np.cumsum([len(x) for x in lengths])])
    expected = []
    for shard in order.tolist():
        local = np.arange(len(lengths[shard]))
        if spec.shuffle_documents:
            local = Permutation(len(local), key_of("doc-order", seed, 0, epoch, shard))(local)
        for k in local.tolist():
            n = sizes[shard][k]
            expected += [(int(starts[shard]) + k, a, min(a + spec.width, n)) for a in range(0, n, spec.width)]
    assert pieces == expected
    for d in range(int(starts[-1])):  # spans: the exact inverse
        assert [(s.sequence, s.start, s.stop, s.offset) for s in plan.spans(epoch, d)] == \
            [(j, a, b, 0) for j, (e, a, b) in enumerate(pieces) if e == d]


def test_a_document_longer_than_a_sequence_is_cut_into_full_pieces_and_its_last_padded():
    packed = pack_padded(np.array([10, 3, 25, 0, 1]), 10)
    got = list(zip(packed.docs.tolist(), packed.starts.tolist(), packed.stops.tolist()))
    assert got == [(0, 0, 10), (1, 0, 3), (2, 0, 10), (2, 10, 20), (2, 20, 25), (4, 0, 1)]  # no piece of the empty one
    assert packed.seqs.tolist() == list(range(6)) and packed.first.tolist() == list(range(7))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """60 documents of 0-99 tokens in 4 shards of 15 (one null, one empty)."""
    rng = np.random.default_rng(11)
    docs = [rng.integers(1, 50_000, int(n)).tolist() for n in rng.integers(0, 100, 60)]
    docs[5], docs[40] = None, []
    catalog = Catalog(str(tmp_path_factory.mktemp("pad") / "cat"))
    catalog.write_version("corpus", [{"tokens": d} for d in docs], [Field("tokens", pa.list_(pa.uint16()), "tokens")],
                          options=WriteOptions(shard_rows=15, row_group_rows=5))
    return catalog, [d or [] for d in docs]


def pad_spec(catalog: Catalog, last_batch: str = "drop", **packing) -> RunSpec:
    seq = SequenceSpec(**{"length": 32, "labels": True, "eos": 65_535, "packing": "pad", **packing})
    return RunSpec.create(catalog, "corpus", seed=3, batch_size=4, world_size=1, last_batch=last_batch, sequences=seq)


def test_the_spec_counts_each_shards_sequences_once_and_keeps_them(corpus):
    catalog, docs = corpus
    for eos in (65_535, None):
        spec = pad_spec(catalog, eos=eos)
        sizes = [len(d) + (eos is not None) for d in docs]
        want = [sum(-(-n // 33) for n in sizes[s * 15:(s + 1) * 15]) for s in range(4)]
        assert list(spec.sources[0].shard_sequences) == want and spec.epoch_length == sum(want)
        again = RunSpec.loads(spec.dumps())
        assert again == spec and again.order_hash == spec.order_hash
    concat = RunSpec.create(catalog, "corpus", sequences=SequenceSpec(length=32))
    assert concat.sources[0].shard_sequences is None and "shard_sequences" not in concat.dumps()


def test_a_count_that_is_not_these_documents_is_refused(corpus, tmp_path):
    catalog, _ = corpus
    spec = pad_spec(catalog, labels=False, eos=None)
    data = json.loads(spec.dumps())
    counts = data["order"]["sources"][0]["shard_sequences"]
    for bad, said in [(counts[:-1], "needs the sequences of each shard"), ([*counts[:-1], 10**6], "cannot make"),
                      ([*counts[:-1], "7"], "must be a list of integers")]:
        data["order"]["sources"][0]["shard_sequences"] = bad
        data.pop("order_hash", None)
        with pytest.raises(UserError, match=said):
            RunSpec.from_json(data)
    # a count inside the bounds, but not what these documents make: refused where the shard is packed
    data["order"]["sources"][0]["shard_sequences"] = [*counts[:-1], counts[-1] + 1]
    edited = RunSpec.from_json(data)
    with pytest.raises(UserError, match=r"shard 3 of source 0: its documents make \d+ pad sequences, the run spec "
                                        r"counts \d+"):
        with PackedLoader(edited.replace(shuffle="none"), 0, catalog, cache=ShardCache(tmp_path / "c")) as loader:
            for _ in loader:
                pass
    concat = json.loads(RunSpec.create(catalog, "corpus", sequences=SequenceSpec(length=32)).dumps())
    concat["order"]["sources"][0]["shard_sequences"] = counts
    concat.pop("order_hash", None)
    with pytest.raises(UserError, match="shard_sequences are for pad packing, not concat"):
        RunSpec.from_json(concat)


def test_where_names_every_piece_of_a_long_document(corpus):
    catalog, docs = corpus
    spec = pad_spec(catalog, "pad", length=16, labels=False, shuffle_documents=True)
    run = packed_run(catalog, spec)
    longest = max(range(len(docs)), key=lambda d: len(docs[d]))
    steps = -(-spec.epoch_length // 4)  # the first epoch, its last batch padded
    found = sorted((f for f in run.where(0, longest, steps) if f.reading.source_epoch == 0), key=lambda f: f.span.start)
    n = len(docs[longest]) + 1
    assert [(f.span.start, f.span.stop, f.span.offset) for f in found] == \
        [(a, min(a + 16, n), 0) for a in range(0, n, 16)]
    sequences = {f.span.sequence for f in found}
    assert sequences == set(range(min(sequences), min(sequences) + -(-n // 16)))  # in a row

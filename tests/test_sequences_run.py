"""A run of packed sequences (sequences/packed.py): every (step, rank) reads the sequences the run
spec's order names, each holding exactly its window of its source epoch's stream; `where` finds every
reading of a document and nothing else; and at pretraining scale (10^12 tokens, 10^9 documents over
10^5 shards, no data) locating touches only the shards located. docs/PRETRAINING.md links here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sequence_fixtures import EOS, brute_stream, tokens_of

from dsinspect.errors import UserError
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.plan import locate_step
from dsinspect.loaders.order.spec import RunSpec, Source, Start
from dsinspect.loaders.sequences.packed import PackedRun
from dsinspect.loaders.sequences.segments import assemble

layouts = st.lists(st.lists(st.integers(0, 12), max_size=5), min_size=1, max_size=4)


def source_of(k: int, lengths: list[list[int]]) -> Source:
    return Source(f"s{k}", f"{k}" * 64, tuple(len(x) for x in lengths), float(k + 1), tuple(sum(x) for x in lengths))


@st.composite
def packed_runs(draw):
    sources = draw(st.lists(layouts, min_size=1, max_size=2))
    seq = SequenceSpec(length=draw(st.integers(1, 9)), labels=draw(st.booleans()),
                       eos=draw(st.sampled_from([None, EOS])), shuffle_documents=draw(st.booleans()))
    specs = [source_of(k, lengths) for k, lengths in enumerate(sources)]
    try:
        spec = RunSpec(tuple(specs), seed=draw(st.integers(0, 50)), batch_size=draw(st.integers(1, 3)),
                       world_size=draw(st.integers(1, 2)), shuffle=draw(st.sampled_from(["none", "global"])),
                       last_batch="pad", mixture_block=4, sequences=seq)
    except UserError:  # a source too short for one sequence: refused (its own test below)
        return draw(packed_runs())
    if draw(st.booleans()):
        step = draw(st.integers(0, 4))
        spec = spec.replace(start=Start(step, *locate_step(spec, step)))
    return spec, sources


@settings(max_examples=80, deadline=None)
@given(run=packed_runs(), steps=st.integers(1, 12))
def test_each_batch_holds_its_windows_and_where_inverts_it(run, steps):
    spec, sources = run
    packed = PackedRun(spec, lambda k, shard: np.asarray(sources[k][shard], dtype=np.int64))
    seq = spec.sequences
    until = spec.start.step + steps
    forward: dict[tuple[int, int], list[tuple]] = {}
    streams: dict[tuple[int, int], np.ndarray] = {}
    for step in range(spec.start.step, until):
        for rank in range(spec.world_size):
            for s in packed.batch(step, rank):
                key = (s.source, s.source_epoch)
                if key not in streams:
                    streams[key] = brute_stream(sources[s.source], seq, spec.seed, s.source_epoch, s.source)[0]
                window = streams[key][s.sequence * seq.length:][:seq.width]
                got = assemble(s.segments, lambda d, k=s.source: tokens_of(d, sources[k]), seq.eos)
                np.testing.assert_array_equal(got, window)
                if s.padding:
                    continue
                offset = 0
                for doc, start, stop in zip(s.segments.docs.tolist(), s.segments.starts.tolist(),
                                            s.segments.stops.tolist()):
                    forward.setdefault((s.source, doc), []).append((step, rank, s.slot, start, stop, offset))
                    offset += stop - start
    for k, lengths in enumerate(sources):
        for doc in range(sum(len(x) for x in lengths)):
            got = [(d.reading.step, d.reading.rank, d.reading.slot, d.span.start, d.span.stop, d.span.offset)
                   for d in packed.where(k, doc, until)]
            assert got == sorted(forward.get((k, doc), []))


def test_a_row_run_or_a_source_too_short_for_a_sequence_is_refused():
    with pytest.raises(UserError, match="this run reads rows, not packed sequences"):
        PackedRun(RunSpec((Source("a", "a" * 64, (3,)),)), lambda k, s: np.zeros(3))
    with pytest.raises(UserError, match="holds 10 tokens: not one sequence of 17"):
        RunSpec((Source("a", "a" * 64, (2,), 1.0, (10,)),), sequences=SequenceSpec(length=16, labels=True))
    with pytest.raises(UserError, match="needs the tokens of each shard"):
        RunSpec((Source("a", "a" * 64, (2,)),), sequences=SequenceSpec(length=4))
    with pytest.raises(UserError, match="shuffle globally or not at all"):
        RunSpec((Source("a", "a" * 64, (2,), 1.0, (10,)),), shuffle="window", sequences=SequenceSpec(length=4))


def test_a_packed_run_spec_round_trips_and_a_row_spec_keeps_its_hash():
    rows = RunSpec((Source("a", "a" * 64, (3, 4)),), seed=5)
    assert "sequences" not in rows.order_json() and "shard_tokens" not in rows.order_json()["sources"][0]
    packed = RunSpec((Source("a", "a" * 64, (3, 4), 1.0, (30, 40)),), seed=5,
                     sequences=SequenceSpec(length=8, labels=True, eos=2, shuffle_documents=True))
    again = RunSpec.loads(packed.dumps())
    assert again == packed and again.order_hash == packed.order_hash != rows.order_hash
    assert again.epoch_length == (70 + 7 - 1) // 8


# -- pretraining scale: 10^12 tokens in 10^9 documents over 10^5 shards, none of it stored ---------

SHARDS, DOCS, TOKENS = 100_000, 10_000, 10_000_000


def synthetic_lengths(calls: list[int]):
    """Each shard's 10^4 document lengths, 1..1,999 tokens, summing to exactly 10^7 (pairs mirrored
    around 1,000), from the shard number alone: a corpus that exists only as arithmetic."""
    def lengths(k: int, shard: int) -> np.ndarray:
        calls.append(shard)
        half = np.random.default_rng(shard).integers(-999, 1000, DOCS // 2)
        return np.concatenate([1000 + half, 1000 - half])
    return lengths


def test_locating_a_step_and_a_document_at_pretraining_scale_touches_only_the_shards_located():
    source = Source("web", "f" * 64, (DOCS,) * SHARDS, 1.0, (TOKENS,) * SHARDS)
    spec = RunSpec((source,), seed=7, batch_size=8, world_size=64, shuffle="global",
                   sequences=SequenceSpec(length=2048, labels=True, eos=0, shuffle_documents=True))
    assert spec.epoch_length == (10**12 + 10**9 - 1) // 2048
    calls: list[int] = []
    packed = PackedRun(spec, synthetic_lengths(calls))
    assert calls == []  # nothing read to start: the manifest's counts are enough
    batch = packed.batch(41_200, 7)
    assert len(batch) == 8 and len(calls) <= 16  # at most two shards per sequence
    for s in batch:
        assert int(s.segments.sizes.sum()) == 2049 and s.segments.cu_seqlens()[-1] == 2049
    first = batch[3]
    doc = int(first.segments.docs[0])
    calls.clear()
    readings = PackedRun(spec, synthetic_lengths(calls)).where(0, doc, until_step=41_201)  # a fresh process
    assert calls and set(calls) == {doc // DOCS}  # the document's own shard, nothing else
    hit = [d for d in readings if (d.reading.step, d.reading.rank, d.reading.slot) == (41_200, 7, 3)]
    assert len(hit) == 1 and hit[0].span.offset == 0
    assert hit[0].span.start == int(first.segments.starts[0]) and hit[0].span.stop == int(first.segments.stops[0])


# -- over a real catalog: Parquet shards written by the writer, lengths read from them -------------

def test_a_packed_run_over_a_catalog_reads_the_stored_documents_in_their_windows(tmp_path):
    import dataclasses

    import pyarrow as pa

    from dsinspect.loaders import Catalog, Field, WriteOptions, packed_run

    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 50_000, int(n)).tolist() for n in rng.integers(0, 300, 120)]
    fields = [Field("id", pa.int64(), "scalar", False), Field("tokens", pa.list_(pa.uint16()), "tokens", False)]
    catalog = Catalog(str(tmp_path / "cat"))
    version = catalog.write_version("corpus", [{"id": i, "tokens": d} for i, d in enumerate(docs)], fields,
                                    options=WriteOptions(shard_rows=25, row_group_rows=10))
    assert len(version.manifest.shards) == 5
    seq = SequenceSpec(length=128, labels=True, eos=65_535)
    spec = RunSpec.create(catalog, "corpus", batch_size=4, world_size=2, shuffle="none", sequences=seq)
    stream = np.concatenate([np.asarray(d + [65_535], dtype=np.int64) for d in docs])
    assert spec.epoch_length == (len(stream) - 1) // 128
    run = packed_run(catalog, spec)
    for step in range(3):
        for rank in range(2):
            for s in run.batch(step, rank):
                got = assemble(s.segments, lambda d: np.asarray(docs[d], dtype=np.int64), seq.eos)
                np.testing.assert_array_equal(got, stream[s.sequence * 128:][:129])
    # an older version, written before manifests counted tokens, cannot be packed until written again
    writer = catalog.writer("corpus", fields, parent=version.id)
    for shard in version.manifest.shards:
        writer.add_shard(dataclasses.replace(shard, tokens=()))
    older = writer.commit()
    with pytest.raises(UserError, match=f"corpus@{older.id[:12]} was written before manifests counted tokens"):
        RunSpec.create(catalog, f"corpus@{older.id}", sequences=seq)
    with pytest.raises(UserError, match="field 'id' is scalar, not tokens"):
        RunSpec.create(catalog, "corpus", sequences=SequenceSpec(length=8, field="id"))
    with pytest.raises(UserError, match="has no field 'text' to pack"):
        RunSpec.create(catalog, "corpus", sequences=SequenceSpec(length=8, field="text"))


def test_readers_of_rows_refuse_a_packed_spec_instead_of_reading_sequence_indices_as_rows(tmp_path, cli):
    import pyarrow as pa

    from dsinspect.loaders import Catalog, Field, Loader
    from dsinspect.loaders.audit.replay import replay

    catalog = Catalog(str(tmp_path / "cat"))
    catalog.write_version("c", [{"tokens": list(range(i % 40))} for i in range(50)],
                          [Field("tokens", pa.list_(pa.int32()), "tokens", False)])
    spec = RunSpec.create(catalog, "c", batch_size=2, sequences=SequenceSpec(length=16))
    with pytest.raises(UserError, match="this run packs documents into sequences; the Loader reads rows"):
        Loader(spec, 0, catalog=catalog)
    with pytest.raises(UserError, match="this run packs documents into sequences; replay reads rows"):
        replay(spec, 0, 0, catalog)
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())  # the command replays it as packed sequences (tests/test_packed_loader.py)
    code, out, err = cli("replay", "--spec", path, "--step", 0, "--catalog", catalog.url)
    assert code == 0 and "sequences of 16 tokens" in out, err

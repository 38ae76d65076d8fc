"""Packed batches of shards the node cache does not hold yet (read/packed_reader.py), and replay of
packed batches (audit/packed_replay.py) by row groups or from the node cache, over real catalogs.

A fresh node's first batch reads in place only the row groups its sequences fall in (stored document
order), or the whole shards it touches (shuffled documents), each part checked against its sha256,
instead of waiting for whole shards to be filled into the cache; every batch equals the arithmetic.
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.errors import IntegrityError
from dsinspect.loaders import Catalog, Field, WriteOptions
from dsinspect.loaders.audit.packed_replay import replay_packed
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.packed_loader import PackedLoader
from dsinspect.loaders.sequences.packed import PackedRun
from dsinspect.loaders.sequences.segments import assemble

EOS = 65_535
FIELDS = [Field("id", pa.int64(), "scalar", False), Field("tokens", pa.list_(pa.uint16()), "tokens")]


def corpus(root, empties: bool):
    """160 documents of 1-299 tokens (with `empties`, some empty or null) in 4 shards of 40, row groups of 8."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 50_000, int(n)).tolist() for n in rng.integers(1, 300, 160)]
    if empties:
        docs[5], docs[47], docs[90] = None, [], None
    catalog = Catalog(str(root / "cat"))
    version = catalog.write_version("corpus", [{"id": i, "tokens": d} for i, d in enumerate(docs)], FIELDS,
                                    options=WriteOptions(shard_rows=40, row_group_rows=8))
    return catalog, version, [d or [] for d in docs]


def spec_of(catalog, shuffle_documents: bool, **options) -> RunSpec:
    seq = SequenceSpec(length=48, labels=True, eos=EOS, shuffle_documents=shuffle_documents)
    return RunSpec.create(catalog, "corpus", **{**dict(seed=9, batch_size=3, world_size=1, shuffle="global",
                                                       sequences=seq), **options})


def expected(spec, docs, step: int, rank: int = 0) -> np.ndarray:
    run = PackedRun(spec, lambda k, shard: np.array([len(d) for d in docs[shard * 40:(shard + 1) * 40]]))
    return np.stack([assemble(s.segments, lambda d: np.asarray(docs[d], np.int64), EOS) for s in run.batch(step, rank)])


def test_a_cold_first_batch_reads_only_the_row_groups_its_sequences_fall_in(tmp_path):
    """Stored document order: no shard is filled for the batch (fill=False: nothing behind either), and
    fewer bytes are read than the shards it touches hold. Before, the batch filled each shard whole."""
    catalog, version, docs = corpus(tmp_path, empties=False)
    spec = spec_of(catalog, shuffle_documents=False)
    cache = ShardCache(tmp_path / "cache")
    with PackedLoader(spec, 0, catalog, cache=cache, fill=False) as loader:
        batch = loader.batch_at(0)
        np.testing.assert_array_equal(batch.tokens, expected(spec, docs, 0))
        touched = {int(np.searchsorted(version.shard_starts, d, side="right") - 1)
                   for s in batch.sequences for d in s.segments.docs.tolist()}
        assert not any(cache.holds(e.sha256) for e in version.manifest.shards)  # nothing filled
        stats = loader.stats()
        assert 0 < stats["bytes_fetched"] < sum(version.manifest.shards[s].bytes for s in touched) / 2
        assert stats["shards_fetched"] == 0
        for step in range(1, 6):  # later batches too, each equal to the arithmetic
            np.testing.assert_array_equal(loader.batch_at(step).tokens, expected(spec, docs, step))
    assert not any(cache.holds(e.sha256) for e in version.manifest.shards)


@pytest.mark.parametrize("shuffle_documents,empties", [(False, False), (True, False), (False, True)])
def test_every_batch_read_cold_then_filled_equals_the_arithmetic(tmp_path, shuffle_documents, empties):
    """Shuffled documents (or empty ones, which the footer's counts cannot place) need every length of
    a shard: the shards are read whole in place. Behind the first batch, the shards fill; the epoch
    and its digests are the same as from a filled cache."""
    catalog, version, docs = corpus(tmp_path, empties)
    spec = spec_of(catalog, shuffle_documents)
    cold_cache = ShardCache(tmp_path / "cold")
    with PackedLoader(spec, 0, catalog, cache=cold_cache) as loader:
        got = list(loader)
        assert loader.stats()["shards_fetched"] >= 1  # filled behind
    warm_cache = ShardCache(tmp_path / "warm")
    with PackedLoader(spec, 0, catalog, cache=warm_cache) as loader:
        for key in range(len(version.manifest.shards)):
            warm_cache.open(version, key).release()
        warm = list(loader)
    assert len(got) == len(warm) == spec.epoch_length // 3
    for a, b in zip(got, warm):
        np.testing.assert_array_equal(a.tokens, expected(spec, docs, a.step))
        np.testing.assert_array_equal(a.tokens, b.tokens)
        assert a.fingerprint == b.fingerprint


@pytest.mark.parametrize("shuffle_documents", [False, True])
def test_a_damaged_row_group_is_refused_when_read_cold(tmp_path, shuffle_documents):
    """Every part a cold read takes is checked against its sha256 in the shard index."""
    catalog, version, _ = corpus(tmp_path, empties=False)
    spec = spec_of(catalog, shuffle_documents)
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp_path / "probe"), fill=False) as loader:
        batch = loader.batch_at(0)
    shard = int(np.searchsorted(version.shard_starts, int(batch.sequences[0].segments.docs[0]), side="right") - 1)
    path = version.shard_path(shard)
    data = bytearray(open(path, "rb").read())
    index = version.shard_index(shard)
    row = int(batch.sequences[0].segments.docs[0]) - int(version.shard_starts[shard])
    start, end = index.span(int(index.parts_of(np.array([row]))[0]))
    data[(start + end) // 2] ^= 0xFF  # inside the row group the first sequence reads
    open(path, "wb").write(bytes(data))
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp_path / "cache"), fill=False) as loader:
        with pytest.raises(IntegrityError, match="sha256"):
            loader.batch_at(0)


@pytest.mark.parametrize("shuffle_documents", [False, True])
def test_replay_equals_the_loader_again_and_again_in_one_process(tmp_path, shuffle_documents):
    """From the catalog: by row groups in stored order, whole shards otherwise (their lengths kept)."""
    catalog, _, docs = corpus(tmp_path, empties=False)
    spec = spec_of(catalog, shuffle_documents, world_size=2)
    with PackedLoader(spec, 1, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        for step in (0, 4, 4, 9, spec.epoch_length // 6 + 2):
            replayed = replay_packed(spec, step, 1, catalog)
            read = loader.batch_at(step)
            assert not replayed.damaged
            np.testing.assert_array_equal(replayed.batches[0].tokens, read.tokens)
            np.testing.assert_array_equal(read.tokens, expected(spec, docs, step, 1))
            assert replayed.batches[0].fingerprint == read.fingerprint


def test_replay_from_the_node_cache_reads_no_catalog_shard_and_refuses_a_damaged_block(tmp_path):
    """With `cache`, held shards are read from the node's verified copy: the catalog's shard files can
    be gone. Before, replay had no such parameter and read every shard's lengths from the catalog."""
    catalog, version, docs = corpus(tmp_path, empties=False)
    spec = spec_of(catalog, shuffle_documents=False)
    cache = ShardCache(tmp_path / "cache")
    with PackedLoader(spec, 0, catalog, cache=cache) as loader:
        for s in range(len(version.manifest.shards)):
            cache.open(version, s).release()
        read = [loader.batch_at(step) for step in (2, 7)]
    moved = tmp_path / "moved"
    moved.mkdir()
    for s in range(len(version.manifest.shards)):
        shutil.move(version.shard_path(s), moved / f"{s}.parquet")
    for batch in read:
        replayed = replay_packed(spec, batch.step, 0, catalog, cache=cache)
        assert not replayed.damaged and replayed.batches[0].fingerprint == batch.fingerprint
        np.testing.assert_array_equal(replayed.batches[0].tokens, batch.tokens)
    with pytest.raises(Exception):  # noqa: B017 - without the node cache: the catalog's files are gone
        replay_packed(spec, 2, 0, catalog)
    for path in (tmp_path / "cache").rglob("*.arrow"):  # every cached shard damaged where its tokens are
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="do not match the hash taken when it was cached"):
        replay_packed(spec, 2, 0, catalog, cache=ShardCache(tmp_path / "cache"))

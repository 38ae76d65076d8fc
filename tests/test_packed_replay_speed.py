"""What packed replay (audit/packed_replay.py) keeps between replays of one process, and how it reads:
only what verified bytes give, by their sha256 (parsed shard indexes, footers' group tokens, whole
shards' lengths), while every document taken is read and re-hashed on every replay, from row groups
decoded by threads kept for the process. What is kept never hides a changed document nor carries over
to other bytes. Behaviour only: no timing is asserted (tests must not depend on the machine's load).
"""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pyarrow as pa
import pytest
from replay_diff_fixtures import rewrite_shard

from dsinspect.loaders import Catalog, Field, WriteOptions
from dsinspect.loaders.audit import packed_replay
from dsinspect.loaders.audit.bounds import BatchTooLarge
from dsinspect.loaders.audit.packed_replay import replay_packed
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.sequences.packed import PackedRun
from dsinspect.loaders.sequences.segments import assemble

EOS = 65_535
FIELDS = [Field("id", pa.int64(), "scalar", False), Field("tokens", pa.list_(pa.uint16()), "tokens")]
SHARD = 40  # documents a shard (row groups of 8)


def documents(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 50_000, int(n)).tolist() for n in rng.integers(1, 300, 160)]


def write(catalog: Catalog, docs: list[list[int]]):
    return catalog.write_version("corpus", [{"id": i, "tokens": d} for i, d in enumerate(docs)], FIELDS,
                                 options=WriteOptions(shard_rows=SHARD, row_group_rows=8))


def spec_of(catalog: Catalog, version) -> RunSpec:
    """Stored document order: replay locates by row groups and takes the documents from them."""
    return RunSpec.create(catalog, f"corpus@{version.id}", seed=9, batch_size=3, world_size=2, shuffle="global",
                          sequences=SequenceSpec(length=48, labels=True, eos=EOS))


def expected(spec: RunSpec, docs: list[list[int]], step: int, rank: int) -> np.ndarray:
    run = PackedRun(spec, lambda k, shard: np.array([len(d) for d in docs[shard * SHARD:(shard + 1) * SHARD]]))
    return np.stack([assemble(s.segments, lambda d: np.asarray(docs[d], np.int64), EOS) for s in run.batch(step, rank)])


def test_a_new_version_is_replayed_from_its_own_bytes_not_from_what_an_earlier_one_left(tmp_path):
    """The second version changes the first shard's documents and keeps the others (the same shard
    files): what replays of the first kept serves only the shards whose bytes are the same."""
    catalog = Catalog(str(tmp_path / "cat"))
    first_docs = documents(1)
    first = write(catalog, first_docs)
    second_docs = [[t ^ 1 for t in d] if i < SHARD else d for i, d in enumerate(first_docs)]
    second = write(catalog, second_docs)
    assert first.manifest.shards[0].sha256 != second.manifest.shards[0].sha256
    assert first.manifest.shards[1].sha256 == second.manifest.shards[1].sha256
    for version, docs in ((first, first_docs), (second, second_docs), (first, first_docs)):
        spec = spec_of(catalog, version)
        for step in range(spec.epoch_length // 6):
            replayed = replay_packed(spec, step, "all", catalog)
            assert not replayed.damaged
            for batch in replayed.batches:
                np.testing.assert_array_equal(batch.tokens, expected(spec, docs, step, batch.rank))


def test_a_document_changed_after_replays_is_still_named(tmp_path):
    """Replays first fill what the process keeps; then a document is edited in place (its stored row
    hash left as it was): the next replay reads and re-hashes it, and names it."""
    catalog = Catalog(str(tmp_path / "cat"))
    docs = documents(2)
    version = write(catalog, docs)
    spec = spec_of(catalog, version)
    clean = {step: replay_packed(spec, step, 0, catalog) for step in range(6)}
    target = int(clean[4].batches[0].sequences[0].segments.docs[0])
    rewrite_shard(version, target, "tokens", [t ^ 1 for t in docs[target]], rehash=False)
    replayed = replay_packed(spec, 4, 0, catalog)
    assert (0, 0, f"corpus@{version.id}:{target}") in replayed.damaged
    assert replayed.batches[0].fingerprint == clean[4].batches[0].fingerprint  # the stored hashes: as the job read it
    changed = [[t ^ 1 for t in d] if i == target else d for i, d in enumerate(docs)]
    np.testing.assert_array_equal(replayed.batches[0].tokens, expected(spec, changed, 4, 0))  # the bytes as they are


def test_a_node_cache_holding_some_of_the_shards_replays_as_the_catalog(tmp_path):
    """Documents of cached shards and of row groups read from the catalog come together, a source at a time."""
    catalog = Catalog(str(tmp_path / "cat"))
    version = write(catalog, documents(3))
    spec = spec_of(catalog, version)
    cache = ShardCache(tmp_path / "cache")
    for shard in (0, 2):
        cache.open(version, shard).release()
    for step in range(spec.epoch_length // 6):
        mixed, plain = replay_packed(spec, step, "all", catalog, cache=cache), replay_packed(spec, step, "all", catalog)
        assert not mixed.damaged and mixed.fingerprints == plain.fingerprints
        for a, b in zip(mixed.batches, plain.batches):
            np.testing.assert_array_equal(a.tokens, b.tokens)


def test_the_row_groups_decoded_count_against_max_bytes(tmp_path):
    catalog = Catalog(str(tmp_path / "cat"))
    version = write(catalog, documents(4))
    spec = spec_of(catalog, version)
    with pytest.raises(BatchTooLarge, match="the documents of the packed batch"):
        replay_packed(spec, 1, "all", catalog, max_bytes=1_000)
    assert not replay_packed(spec, 1, "all", catalog, max_bytes=64 << 20).damaged


def _replay_in_child(spec: RunSpec, catalog: Catalog, out) -> None:
    fingerprints = replay_packed(spec, 2, "all", catalog).fingerprints
    out.put((fingerprints, packed_replay._POOL[0] == os.getpid()))


def test_a_forked_child_decodes_with_threads_of_its_own(tmp_path):
    """The decoding threads are kept for the process; a child forked after a replay has none of them
    running (it would wait forever on their queue): it makes its own."""
    catalog = Catalog(str(tmp_path / "cat"))
    version = write(catalog, documents(5))
    spec = spec_of(catalog, version)
    fingerprints = replay_packed(spec, 2, "all", catalog).fingerprints
    assert packed_replay._POOL is not None and packed_replay._POOL[0] == os.getpid()  # shards decoded at once
    ctx = multiprocessing.get_context("fork")
    out = ctx.SimpleQueue()
    child = ctx.Process(target=_replay_in_child, args=(spec, catalog, out))
    child.start()
    child.join(120)
    if child.is_alive():  # waiting on threads it does not have
        child.kill()
        child.join()
    assert child.exitcode == 0
    assert out.get() == (fingerprints, True)

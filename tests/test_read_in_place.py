"""A local catalog's shards are read in place (issue #35): a cold batch decodes the row groups it
needs from the store's own Parquet file, memory-mapped, each part checked against its sha256 in the
shard index first; a fill converts the store's file where it is. Nothing is copied into a
`.partial` file, and no byte is decoded unchecked: a flipped byte in the store fails the read that
needs it (naming the shard and the bytes) and is never cached."""

import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_remote import FIELDS, NAMES, random_rows

from dsinspect.errors import IntegrityError
from dsinspect.loaders import Catalog, Loader, RunSpec, WriteOptions, batch_indices
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.read.cache import ShardCache

ROWS, SHARD_ROWS, GROUP_ROWS = 600, 200, 20


@pytest.fixture()
def local(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    version = catalog.write_version("rand", random_rows(ROWS, seed=11), FIELDS, key="id",
                                    options=WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=GROUP_ROWS))
    spec = RunSpec.create(catalog, "rand", seed=4, batch_size=12, shuffle="global")
    stored = pa.concat_tables([version.read_shard(s) for s in range(len(version.manifest.shards))])
    return catalog, version, spec, stored


def exact(batch, stored) -> bool:
    return (batch.table.select(NAMES).to_pylist() == stored.select(NAMES).take(batch.indices).to_pylist()
            and row_hashes(batch.table.select(NAMES), NAMES) == batch.row_hashes)


def leftovers(root) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.suffix in (".partial", ".have", ".parts"))


def test_a_cold_batch_reads_the_store_in_place_and_writes_nothing_to_the_cache(local, tmp_path):
    catalog, version, spec, stored = local
    cache = ShardCache(tmp_path / "cache")
    with Loader(spec, catalog=catalog, cache=cache, fill=False) as loader:
        for step in range(4):
            assert exact(loader.batch_at(step), stored)
    assert leftovers(cache.root) == [] and not any(cache.holds(s.sha256) for s in version.manifest.shards)


def test_a_fill_of_a_local_store_converts_in_place_and_the_epoch_is_exact(local, tmp_path):
    catalog, version, spec, stored = local
    cache = ShardCache(tmp_path / "cache")
    with Loader(spec, catalog=catalog, cache=cache) as loader:
        batches = list(loader)
        loader.close(wait=True)
        stats = loader.stats()
    assert all(exact(b, stored) for b in batches)
    assert sorted(i for b in batches for i in b.indices.tolist()) == list(range(ROWS))
    assert all(cache.holds(s.sha256) for s in version.manifest.shards)
    # every byte of the store read (and checked) once: by a cold batch or by the fill, never both
    assert stats["shards_fetched"] == len(version.manifest.shards)
    assert stats["bytes_fetched"] == sum(s.bytes for s in version.manifest.shards)
    assert leftovers(cache.root) == []
    for s in range(len(version.manifest.shards)):
        shard = cache.open(version, s)
        shard.check_all()  # the converted file against the block hashes taken when it was cached
        shard.release()


def flip(catalog, version, shard: int, position: int) -> None:
    path = version.shard_path(shard)
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_flipped_byte_in_a_row_group_the_first_batch_reads_fails_it(local, tmp_path):
    catalog, version, spec, _ = local
    with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "probe"), fill=False) as probe:
        first = probe.batch_at(0).indices
    row = int(first[0])
    shard, within = row // SHARD_ROWS, row % SHARD_ROWS
    index = version.shard_index(shard)
    part = int(index.parts_of(np.array([within]))[0])
    start, end = index.span(part)
    flip(catalog, version, shard, (start + end) // 2)
    cache = ShardCache(tmp_path / "cache")
    with Loader(spec, catalog=catalog, cache=cache) as loader:
        with pytest.raises(IntegrityError) as e:
            loader.batch_at(0)
    assert version.shard_url(shard) in str(e.value) and f"bytes {start}..{end}" in str(e.value)
    assert not cache.holds(version.manifest.shards[shard].sha256)


def test_a_flipped_byte_the_fill_reaches_is_never_cached(local, tmp_path):
    catalog, version, spec, _ = local
    index = version.shard_index(1)
    start, end = index.span(index.parts - 2)  # the last row group of shard 1
    flip(catalog, version, 1, start + 1)
    cache = ShardCache(tmp_path / "cache")
    with pytest.raises(IntegrityError, match=rf"bytes {start}\.\.{end}"):
        cache.open(version, 1)
    assert not cache.holds(version.manifest.shards[1].sha256)
    assert not [p.name for p in cache.root.iterdir() if p.name.startswith(".convert-") or p.suffix == ".arrow"]


def test_a_fresh_loader_warmed_parses_the_footers_of_its_first_batch_on_its_cold_pool(local, tmp_path, monkeypatch):
    """Issue #35: a fresh reader's warm starts checking and parsing, on its cold pool, the footers of
    the local shards its first batch reads in place (`ColdRows.prime`): ~3 ms each in a fresh process,
    which every row group of that shard waits for. In a job the read follows at once and waits at most
    for a parse under way; here the test waits for them, then reads: each footer is parsed once, by
    the pool, and the batch parses none itself."""
    catalog, version, spec, stored = local
    parsed, real = [], pq.read_metadata

    def counted(*args, **kwargs):
        parsed.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(pq, "read_metadata", counted)
    needed = len(set((batch_indices(spec, 0, 0) // SHARD_ROWS).tolist()))
    assert needed >= 2
    with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        loader.warm([0])
        deadline = time.monotonic() + 30  # generous: the parses take milliseconds
        while len(parsed) < needed:
            assert time.monotonic() < deadline, f"{len(parsed)} of {needed} footers parsed after warm"
            time.sleep(0.01)
        assert exact(loader.batch_at(0), stored)
        by_read = [name for name in parsed if not name.startswith("dsinspect-cold")]
        assert len(parsed) - len(by_read) == needed and "MainThread" not in by_read, parsed

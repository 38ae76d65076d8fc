"""Reading a catalog on S3 (moto's server on loopback, through s3fs) via the node-local shard cache:
exact batches under a byte bound, one download per residency, integrity on corrupted objects,
retries on transient errors, ranged reads of single rows, and start-up cost independent of the
number of shards. Every claim about I/O is checked on the server's own request log."""

import hashlib
import os
import tempfile
from collections import Counter

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.moto_server.werkzeug_app")

from s3_server import PROBLEM_RETRIES, s3_environment, s3_server  # noqa: E402

from dsinspect.errors import DsinspectError, IntegrityError, UserError  # noqa: E402
from dsinspect.loaders import (  # noqa: E402
    HASH_COLUMN,
    Catalog,
    Field,
    Loader,
    RunSpec,
    WriteOptions,
    batch_indices,
    steps_in_epoch,
)
from dsinspect.loaders.format.canonical import row_hashes  # noqa: E402
from dsinspect.loaders.read.cache import ShardCache  # noqa: E402

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("blob", pa.binary(), "bytes"),
          Field("tokens", pa.list_(pa.int32()), "tokens")]
NAMES = [f.name for f in FIELDS]
SHARDS, SHARD_ROWS = 12, 100
WINDOW = 2


def random_rows(n, seed=0, blob=300):
    """Incompressible rows: the Parquet bytes of a shard are close to its cached Arrow bytes."""
    rng = np.random.default_rng(seed)
    return [{"id": i, "blob": rng.bytes(blob), "tokens": rng.integers(0, 1 << 30, i % 23, dtype=np.int32).tolist()}
            for i in range(n)]


@pytest.fixture(scope="module")
def s3():
    """(server, catalog URL, storage options); botocore does not retry, so injected errors reach dsinspect."""
    with s3_server(**PROBLEM_RETRIES) as served:
        yield served


@pytest.fixture(scope="module")
def data(s3, tmp_path_factory):
    """One version written straight to S3, and the same rows in a local catalog to compare with."""
    server, url, _ = s3
    rows = random_rows(SHARDS * SHARD_ROWS)
    options = WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=25, shard_index=False)  # whole-shard fills
    remote = Catalog(url).write_version("rand", rows, FIELDS, key="id", options=options)
    local = Catalog(str(tmp_path_factory.mktemp("local"))).write_version(
        "rand", rows, FIELDS, key="id", options=options)
    assert remote.id == local.id, "content addressing: the same rows make the same version anywhere"
    stored = pa.concat_tables([local.read_shard(s) for s in range(SHARDS)])
    return {"remote": remote, "local": local, "rows": stored.select(NAMES).to_pylist(),
            "hashes": stored.column(HASH_COLUMN).to_pylist()}


@pytest.fixture
def cache_root():
    with tempfile.TemporaryDirectory(prefix="dsinspect-remote-cache-") as d:
        yield d


class EvictionLog(ShardCache):
    """A ShardCache that remembers which shards it evicted."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.evicted = []

    def _evict(self, sha256):
        done = super()._evict(sha256)
        if done:
            self.evicted.append(sha256)
        return done


def spec_for(catalog, name="rand", **options):
    return RunSpec.create(catalog, name, **{"seed": 7, "batch_size": 16, "shuffle": "window",
                                            "window_shards": WINDOW, **options})


def fresh_catalog(url):
    """A Catalog as a new process would see it (no s3fs listing cache from the writes)."""
    catalog = Catalog(url)
    catalog.fs.invalidate_cache()
    return catalog


def shard_keys(version):
    """Request path of each shard of `version`, in manifest order."""
    return ["/" + version.shard_path(s) for s in range(len(version.manifest.shards))]


def check_batch(batch, spec, rank, data):
    assert batch.indices.tolist() == batch_indices(spec, batch.step, rank).tolist(), f"step {batch.step}"
    assert batch.rows() == [data["rows"][i] for i in batch.indices]
    assert batch.row_hashes == [data["hashes"][i] for i in batch.indices]
    assert row_hashes(batch.table, NAMES) == batch.row_hashes  # the data, re-hashed, matches what was stored


def test_global_shuffle_is_refused_at_start_when_the_bound_cannot_hold_the_version(s3, data, cache_root):
    server, url, _ = s3
    catalog = fresh_catalog(url)
    sizes = [s.bytes for s in data["remote"].manifest.shards]
    bound = (WINDOW + 2) * max(sizes)
    spec = spec_for(catalog, shuffle="global")
    server.reset_counts()
    with pytest.raises(UserError, match=r"cache bound of [\d,]+ bytes is smaller than the whole version.*global") as e:
        Loader(spec, catalog=catalog, cache=ShardCache(cache_root, max_bytes=bound))
    assert f"{sum(sizes):,}" in str(e.value) and "window" in str(e.value)  # what it needs, and the way out
    assert server.requests(contains="/shards/") == [], "refused before reading any shard"


@pytest.mark.parametrize("prefetch", [0, 2])
def test_window_shuffle_under_a_bound_reads_exact_batches_and_each_shard_once_per_residency(s3, data, cache_root,
                                                                                           prefetch):
    server, url, _ = s3
    catalog = fresh_catalog(url)
    version = data["remote"]
    sizes = [s.bytes for s in version.manifest.shards]
    bound = (WINDOW + 2) * max(sizes)  # holds a window (check_fits), far less than the version
    assert bound < sum(sizes) / 2
    spec = spec_for(catalog, world_size=2)
    server.reset_counts()
    cache = EvictionLog(cache_root, max_bytes=bound, backoff=0.01)
    with Loader(spec, rank=1, catalog=catalog, cache=cache, prefetch=prefetch) as loader:
        batches = list(loader)
    stats = loader.stats()  # after close: fetches begun by read-ahead have finished
    assert len(batches) == steps_in_epoch(spec, 0) == SHARDS * SHARD_ROWS // 32
    for batch in batches:
        check_batch(batch, spec, 1, data)

    downloads = server.downloads()
    keys = shard_keys(version)
    assert set(downloads) == set(keys), "every shard read, nothing else downloaded"
    assert stats["shards_fetched"] == sum(downloads.values())
    assert stats["bytes_fetched"] >= sum(sizes)
    assert stats["evictions"] == len(cache.evicted) >= 1, "the bound was exercised"
    # once per residency: a shard comes again only after an eviction of it made room
    for s, key in enumerate(keys):
        assert downloads[key] <= 1 + cache.evicted.count(version.manifest.shards[s].sha256), key
    if prefetch == 0:
        # nothing reads ahead past the epoch: the window order needs each shard in one stretch,
        # and the reader pins it for that stretch, so one epoch downloads every shard exactly once
        assert downloads == dict.fromkeys(keys, 1)
    # every shard GET is a whole-file fetch (no footer probes, no ranged re-reads)
    assert all(r.start == 0 for r in server.requests("GET", contains="/shards/"))


def test_shard_corrupted_on_the_server_is_refused_and_never_cached(s3, data, cache_root):
    server, url, _ = s3
    catalog = fresh_catalog(url)
    version = data["remote"]
    spec = spec_for(catalog)
    bad = int(np.searchsorted(version.shard_starts, batch_indices(spec, 40, 0)[0], side="right") - 1)
    path = version.shard_path(bad)
    good = catalog.fs.cat_file(path)
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF  # what the server will serve
    expected, got = version.manifest.shards[bad].sha256, hashlib.sha256(flipped).hexdigest()

    server.reset_counts()
    server.corrupt(path)
    yielded = []
    try:
        with Loader(spec, catalog=catalog, cache=ShardCache(cache_root, max_bytes=None, backoff=0.01)) as loader:
            with pytest.raises(IntegrityError) as e:
                for batch in loader:
                    yielded.append(batch)
        stats = loader.stats()
    finally:
        server.clear_faults()
    message = str(e.value)
    assert f"s3://{path}" in message and expected in message and got in message, message
    assert len(yielded) >= 1, "batches before the bad shard was needed were read"
    lo, hi = version.shard_starts[bad], version.shard_starts[bad + 1]
    for batch in yielded:
        check_batch(batch, spec, 0, data)
        assert not ((batch.indices >= lo) & (batch.indices < hi)).any(), "a row of the corrupt shard was yielded"
    assert server.downloads()["/" + path] == 2, "fetched, re-fetched once, then refused"
    assert stats["verify_failures"] == 2
    leftovers = [f for f in os.listdir(cache_root) if f.startswith(expected) and not f.endswith((".lock", ".pin"))]
    assert leftovers == [] and ShardCache(cache_root)._trusted(expected) is None
    assert not [f for f in os.listdir(cache_root) if f.startswith(".")], "no temp file left behind"


def test_corruption_caught_by_the_store_clients_checksum_is_an_integrity_error_naming_the_shard(s3, data, cache_root):
    server, url, _ = s3
    catalog = fresh_catalog(url)
    version = data["remote"]
    spec = spec_for(catalog, shuffle="none")
    server.corrupt(version.shard_path(0), checksums=True)  # corrupted in transit: the checksum header disagrees
    try:
        with Loader(spec, catalog=catalog, cache=ShardCache(cache_root, backoff=0.01), prefetch=0) as loader:
            with pytest.raises(IntegrityError, match="s3://" + version.shard_path(0)):
                next(iter(loader))
    finally:
        server.clear_faults()


def test_shard_corrupted_once_is_fetched_again_and_read(s3, data, cache_root):
    server, url, _ = s3
    catalog = fresh_catalog(url)
    version = data["remote"]
    spec = spec_for(catalog)
    bad = int(np.searchsorted(version.shard_starts, batch_indices(spec, 0, 0)[0], side="right") - 1)
    server.reset_counts()
    server.corrupt(version.shard_path(bad), times=1)
    try:
        with Loader(spec, catalog=catalog, cache=ShardCache(cache_root, backoff=0.01)) as loader:
            batches = list(loader)
        stats = loader.stats()
    finally:
        server.clear_faults()
    for batch in batches:
        check_batch(batch, spec, 0, data)
    assert stats["verify_failures"] == 1
    assert server.downloads()["/" + version.shard_path(bad)] == 2


def test_transient_server_errors_are_retried_and_counted(s3, data, cache_root):
    server, url, _ = s3
    catalog = fresh_catalog(url)
    version = data["remote"]
    spec = spec_for(catalog)
    server.reset_counts()
    server.fail_next(version.shard_path(3), 2, status=503)
    server.fail_next(version.shard_path(8), 1, status=500)
    try:
        with Loader(spec, catalog=catalog, cache=ShardCache(cache_root, backoff=0.01)) as loader:
            batches = list(loader)
        stats = loader.stats()
    finally:
        server.clear_faults()
    assert len(batches) == steps_in_epoch(spec, 0)
    for batch in batches:
        check_batch(batch, spec, 0, data)
    failed = [r for r in server.requests("GET", contains="/shards/") if r.status >= 500]
    assert Counter(r.status for r in failed) == {503: 2, 500: 1}
    assert stats["retries"] == 3, stats
    assert stats["shards_fetched"] == SHARDS and stats["verify_failures"] == 0


def test_an_outage_fails_after_the_retries_naming_the_shard(s3, data, cache_root):
    server, url, _ = s3
    catalog = fresh_catalog(url)
    version = data["remote"]
    spec = spec_for(catalog, shuffle="none")
    server.reset_counts()
    server.fail_next(version.shard_path(0), 100, status=503)
    try:
        with Loader(spec, catalog=catalog, cache=ShardCache(cache_root, retries=2, backoff=0.01)) as loader:
            with pytest.raises(DsinspectError, match="s3://" + version.shard_path(0)):
                next(iter(loader))
        stats = loader.stats()
    finally:
        server.clear_faults()
    assert stats["retries"] == 2
    assert len([r for r in server.requests("GET", path=version.shard_path(0)) if r.status == 503]) == 3


def test_a_short_burst_is_absorbed_by_botocore_with_its_default_retries(s3, data, cache_root):
    """With botocore's own retries on (the default outside these tests), dsinspect never sees a
    short burst of 503s (one here: botocore's backoff is slow): `retries` in the loader stats counts
    only what survived botocore."""
    server, url, _ = s3
    with s3_environment(server):  # no retry config: botocore's defaults
        catalog = fresh_catalog(url)
        version = data["remote"]
        spec = spec_for(catalog, shuffle="none")
        server.reset_counts()
        server.fail_next(version.shard_path(0), 1, status=503)
        try:
            with Loader(spec, catalog=catalog, cache=ShardCache(cache_root, backoff=0.01), prefetch=0) as loader:
                check_batch(next(iter(loader)), spec, 0, data)
                stats = loader.stats()
        finally:
            server.clear_faults()
    assert len([r for r in server.requests("GET", path=version.shard_path(0)) if r.status == 503]) == 1
    assert stats["retries"] == 0


def test_one_row_of_a_remote_version_reads_the_footer_and_one_row_group(s3, tmp_path):
    server, url, _ = s3
    rows = random_rows(2000, seed=1, blob=1000)
    options = WriteOptions(shard_rows=2000, row_group_rows=100)
    Catalog(url).write_version("big", rows, FIELDS, options=options)
    local = Catalog(str(tmp_path / "local")).write_version("big", rows, FIELDS, options=options)
    meta = pq.ParquetFile(local.catalog.fs.open(local.shard_path(0), "rb")).metadata
    assert meta.num_row_groups == 20
    shard_bytes = local.manifest.shards[0].bytes
    largest_group = max(sum(meta.row_group(g).column(c).total_compressed_size for c in range(meta.num_columns))
                        for g in range(meta.num_row_groups))

    catalog = fresh_catalog(url)
    version = catalog.resolve("big")
    server.reset_counts()
    assert version.row(1234) == {k: rows[1234][k] for k in NAMES}
    assert version.row_hash(1234) == local.row_hash(1234)
    sent = server.get_bytes(contains="/shards/")
    gets = server.requests("GET", contains="/shards/")
    assert all(r.range for r in gets), "only ranged reads"
    # the footer (pyarrow reads the last 64 KiB, then the whole footer) plus the one row group
    assert sent <= (64 << 10) + 2 * meta.serialized_size + largest_group + 8, (sent, [r.range for r in gets])
    assert sent < shard_bytes / 8, (sent, shard_bytes)


def test_first_batch_reads_the_manifest_and_the_ranks_own_shards_whatever_the_version_size(s3, tmp_path):
    """Start-up reads the tags and the manifest, then only the shards the rank's first batches
    need (at most one window ahead): the same requests for a version of 10 shards and of 200."""
    server, url, _ = s3
    fs = fsspec.filesystem("s3")
    for name, shards in (("few", 10), ("many", 200)):
        local = Catalog(str(tmp_path / name))
        local.write_version(name, [{"id": i} for i in range(shards * 20)], FIELDS[:1],
                            options=WriteOptions(shard_rows=20, shard_index=False))
        fs.put(str(tmp_path / name) + "/", url.split("://", 1)[1] + "/", recursive=True)  # a catalog is plain files

    window = 4
    seen = {}
    for name in ("few", "many"):
        for rank in (0, 3):
            cache = tmp_path / f"cache-{name}-{rank}"
            catalog = fresh_catalog(url)
            server.reset_counts()
            spec = RunSpec.create(catalog, name, seed=1, batch_size=8, world_size=4, shuffle="window",
                                  window_shards=window)
            version = catalog.version(name, spec.sources[0].version)
            with Loader(spec, rank=rank, catalog=catalog, cache=ShardCache(cache), prefetch=0) as loader:
                first = next(iter(loader))
            assert first.table.column("id").to_pylist() == batch_indices(spec, 0, rank).tolist()

            # the shards this rank needs, in order of first need over the steps the loader plans
            indices = np.concatenate([batch_indices(spec, s, rank) for s in range(256)])
            shard_of = np.searchsorted(version.shard_starts, indices, side="right") - 1
            need = list(dict.fromkeys(shard_of.tolist()))
            keys = shard_keys(version)
            downloads = server.downloads()
            assert all(n == 1 for n in downloads.values())
            fetched = {keys.index(k) for k in downloads}
            first_shards = set(shard_of[:8].tolist())
            assert first_shards <= fetched <= set(need[:window]), (name, rank, fetched, need[:window])
            shard_gets = server.requests("GET", contains="/shards/")
            assert all(r.start == 0 and r.path in downloads for r in shard_gets)
            others = [(r.method, r.path.rsplit("/", 1)[1]) for r in server.requests() if "/shards/" not in r.path]
            assert not [r for r in server.requests() if r.path.rstrip("/") == "/" + server.bucket], "no listing"
            seen[name, rank] = (len(others), [m for m, _ in others].count("GET"), len(shard_gets))
    for rank in (0, 3):  # the same requests for 10 and for 200 shards
        few, many = seen["few", rank], seen["many", rank]
        assert few[:2] == many[:2] and many[2] <= window, seen

"""Shards a cache bound cannot hold are streamed: read row group by row group as batches need them
and never filled. A shard larger than the bound reads through without a deadlock (Mosaic #417) and
without a byte on the node's disk; a global shuffle over a bound of a fraction of the data keeps what
fits cached and streams the rest. I/O claims are checked on the request log of a real S3 server."""

from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.moto_server.werkzeug_app")

from s3_server import PROBLEM_RETRIES, s3_server  # noqa: E402
from test_remote import FIELDS, NAMES, random_rows  # noqa: E402  (incompressible rows)

from dsinspect.errors import UserError  # noqa: E402
from dsinspect.loaders import HASH_COLUMN, Catalog, Loader, RunSpec, WriteOptions, batch_indices, steps_in_epoch  # noqa: E402
from dsinspect.loaders.format.canonical import row_hashes  # noqa: E402
from dsinspect.loaders.order.state import LoaderState  # noqa: E402
from dsinspect.loaders.read.cache import ShardCache  # noqa: E402

SHARDS, SHARD_ROWS, GROUP_ROWS = 8, 200, 20


@pytest.fixture(scope="module")
def s3():
    with s3_server(**PROBLEM_RETRIES) as served:
        yield served


@pytest.fixture(scope="module")
def data(s3):
    _, url, _ = s3
    options = WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=GROUP_ROWS)
    version = Catalog(url).write_version("rand", random_rows(SHARDS * SHARD_ROWS), FIELDS, key="id", options=options)
    stored = pa.concat_tables([version.read_shard(s) for s in range(SHARDS)])
    return {"version": version, "rows": stored.select(NAMES).to_pylist(),
            "hashes": stored.column(HASH_COLUMN).to_pylist()}


def run(url, **options):
    catalog = Catalog(url)
    catalog.fs.invalidate_cache()
    return catalog, RunSpec.create(catalog, "rand", seed=5, batch_size=16, **options)


def check_epoch(loader, spec, data, rank=0):
    batches = list(loader)
    for batch in batches:
        assert batch.indices.tolist() == batch_indices(spec, batch.step, rank).tolist()
        assert batch.rows() == [data["rows"][i] for i in batch.indices]
        assert row_hashes(batch.table.select(NAMES), NAMES) == batch.row_hashes == [data["hashes"][i]
                                                                                    for i in batch.indices]
    assert sorted(i for b in batches for i in b.indices.tolist()) == list(range(SHARDS * SHARD_ROWS))
    return batches


def files_in(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.suffix in (".arrow", ".partial", ".json", ".have"))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_shards_larger_than_the_bound_stream_through_and_leave_nothing_on_disk(s3, data, tmp_path, prefetch):
    server, url, _ = s3
    version = data["version"]
    bound = min(s.bytes for s in version.manifest.shards) // 2  # every shard is twice the bound
    catalog, spec = run(url, shuffle="none")
    server.reset_counts()
    root = tmp_path / "cache"
    with Loader(spec, catalog=catalog, cache=ShardCache(root, max_bytes=bound), prefetch=prefetch) as loader:
        assert len(loader._reader.streamed) == SHARDS
        check_epoch(loader, spec, data)
    assert files_in(root) == [], "a streamed shard leaves nothing on the node's disk"
    # in order, each row group is fetched once: the decoded group serves the batches after it
    shard_gets = [r for r in server.requests("GET", contains="/shards/") if r.path.endswith(".parquet")]
    assert all(r.range for r in shard_gets), "only ranged reads, never a whole shard"
    spans = [(r.path, r.start, r.nbytes) for r in shard_gets]
    assert len(spans) == len(set(spans)) == SHARDS * (SHARD_ROWS // GROUP_ROWS + 1)  # row groups and footers
    assert sum(r.nbytes for r in shard_gets) == sum(s.bytes for s in version.manifest.shards)


def test_a_global_shuffle_over_a_quarter_bound_caches_what_fits_and_streams_the_rest(s3, data, tmp_path):
    server, url, _ = s3
    version = data["version"]
    shards = version.manifest.shards
    bound = int(sum(s.bytes for s in shards) * 0.25)
    fits = 0
    while sum(s.bytes for s in shards[:fits + 1]) <= bound:
        fits += 1
    assert 0 < fits < SHARDS
    catalog, spec = run(url, shuffle="global")
    root = tmp_path / "cache"
    cache = ShardCache(root, max_bytes=bound)
    with Loader(spec, catalog=catalog, cache=cache) as loader:  # refused before streaming
        streamed = set(loader._reader.streamed)
        check_epoch(loader, spec, data)
    cached = {s.sha256 for s in shards[:fits]}
    assert streamed == {s.sha256 for s in shards} - cached, "the shards past what fits, in manifest order"
    assert {sha for sha in cached if cache.holds(sha)} == cached
    assert not any(cache.holds(sha) for sha in streamed)
    assert cache.cached_bytes() <= bound
    assert not [p for p in root.iterdir() if any(sha in p.name for sha in streamed)], "nothing of a streamed shard"

    # the next epoch reads the cached shards from the node's disk: only streamed shards go to the server
    server.reset_counts()
    epoch = steps_in_epoch(spec, 0)
    with Loader(spec, catalog=catalog, cache=ShardCache(root, max_bytes=bound)) as loader:
        loader.load_state_dict(LoaderState.at(spec, epoch, 0).to_json())
        batches = iter(loader)
        for step in range(epoch, epoch + 4):
            batch = next(batches)
            assert batch.indices.tolist() == batch_indices(spec, step, 0).tolist()
    paths = {r.path for r in server.requests("GET", contains="/shards/") if r.path.endswith(".parquet")}
    assert paths and paths <= {server.path(version.shard_path(s)) for s in range(fits, SHARDS)}


def test_a_bound_too_small_for_shards_without_an_index_is_still_refused_at_start(s3, tmp_path):
    _, url, _ = s3
    catalog = Catalog(url)
    version = catalog.write_version("plain", random_rows(400, seed=1), FIELDS, key="id",
                                    options=WriteOptions(shard_rows=100, shard_index=False))
    spec = RunSpec.create(catalog, "plain", seed=1, batch_size=16, shuffle="global")
    bound = sum(s.bytes for s in version.manifest.shards) // 2
    with pytest.raises(UserError, match=r"cache bound of [\d,]+ bytes is smaller than the whole version.*"
                                        r"without an index to stream them by"):
        Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "c", max_bytes=bound))

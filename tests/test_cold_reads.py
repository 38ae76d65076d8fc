"""A fresh node's first batch: read from the checked parts of each shard it needs (a shard's index,
docs/FORMAT.md) instead of after whole-shard fills, the fill then fetching only what is still missing.
I/O claims are checked on the request log of a real S3 server (moto on loopback)."""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.moto_server.werkzeug_app")

import numpy as np  # noqa: E402
from s3_server import PROBLEM_RETRIES, s3_server  # noqa: E402
from test_remote import FIELDS, NAMES, random_rows  # noqa: E402  (the same incompressible rows)

from dsinspect.errors import IntegrityError  # noqa: E402
from dsinspect.loaders import HASH_COLUMN, Catalog, Loader, RunSpec, WriteOptions  # noqa: E402
from dsinspect.loaders.format.canonical import row_hashes  # noqa: E402
from dsinspect.loaders.read import cache as cache_module  # noqa: E402
from dsinspect.loaders.read import convert as convert_module  # noqa: E402
from dsinspect.loaders.read import fetch as fetch_module  # noqa: E402
from dsinspect.loaders.read.cache import ShardCache  # noqa: E402

SHARDS, SHARD_ROWS, GROUP_ROWS = 6, 200, 20


@pytest.fixture(autouse=True)
def ranged_reads_part_by_part(monkeypatch):
    """These tests pin the cold path's ranged reads part by part, on shards small enough that
    fetch.py would otherwise read them whole (coalescing: tests/test_remote_round_trips.py)."""
    monkeypatch.setattr(fetch_module, "NEAR", -1)
    monkeypatch.setattr(fetch_module, "SPARE", -1)


@pytest.fixture(scope="module")
def s3():
    with s3_server(**PROBLEM_RETRIES) as served:
        yield served


@pytest.fixture(scope="module")
def data(s3, tmp_path_factory):
    _, url, _ = s3
    options = WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=GROUP_ROWS)
    version = Catalog(url).write_version("rand", random_rows(SHARDS * SHARD_ROWS), FIELDS, key="id", options=options)
    assert all(s.index_sha256 for s in version.manifest.shards)
    stored = pa.concat_tables([version.read_shard(s) for s in range(SHARDS)])
    return {"version": version, "rows": stored.select(NAMES).to_pylist(),
            "hashes": stored.column(HASH_COLUMN).to_pylist()}


class FillLog(ShardCache):
    """A real shard cache that notes how many requests the server had answered when its first fill
    began: everything before is what the first batch read."""

    def __init__(self, root, server, **kwargs):
        super().__init__(root, **kwargs)
        self.server, self.before_fill = server, None

    def _fill(self, version, shard):
        if self.before_fill is None:
            self.before_fill = len(self.server.requests())
        return super()._fill(version, shard)


def spec_for(url, **options):
    catalog = Catalog(url)
    catalog.fs.invalidate_cache()
    return catalog, RunSpec.create(catalog, "rand", seed=3, batch_size=16, shuffle="global", **options)


def first_batch_parts(spec, catalog, version, tmp_path):
    """(shard, its index, the row groups of it the first batch reads) for the shard of the first
    batch's first row, learnt by a probe loader on its own cache."""
    with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "probe")) as probe:
        first = probe.batch_at(0).indices
    shard = int(np.searchsorted(version.shard_starts, first[0], side="right") - 1)
    lo, hi = version.shard_starts[shard], version.shard_starts[shard + 1]
    index = version.shard_index(shard)
    return shard, index, set(index.parts_of(first[(first >= lo) & (first < hi)] - lo).tolist())


def check(batch, data):
    assert batch.rows() == [data["rows"][i] for i in batch.indices]
    assert batch.row_hashes == [data["hashes"][i] for i in batch.indices]
    assert row_hashes(batch.table.select(NAMES), NAMES) == batch.row_hashes  # the values hash to them


def test_the_first_batch_fetches_only_its_rows_parts_and_the_fill_fetches_each_byte_once(s3, data, tmp_path):
    server, url, _ = s3
    catalog, spec = spec_for(url)
    version = data["version"]
    server.reset_counts()
    cache = FillLog(tmp_path / "cache", server)
    with Loader(spec, catalog=catalog, cache=cache) as loader:
        batches = list(loader)
    assert cache.before_fill is not None
    for batch in batches:
        check(batch, data)
    assert sorted(i for b in batches for i in b.indices.tolist()) == list(range(SHARDS * SHARD_ROWS))

    # before any fill: ranged reads of exactly the footer and the row groups of the first batch's rows
    first = batches[0]
    want = set()
    for s in range(SHARDS):
        index = version.shard_index(s)
        rows = first.indices[(first.indices >= version.shard_starts[s]) & (first.indices < version.shard_starts[s + 1])]
        if len(rows):
            path = server.path(version.shard_path(s))
            parts = {*np.unique(index.parts_of(rows - version.shard_starts[s])).tolist(), index.footer}
            want |= {(path, *index.span(p)) for p in parts}
    early = [r for r in server.requests()[:cache.before_fill] if "/shards/" in r.path and r.method == "GET"]
    indexes = [r for r in early if r.path.endswith(".index.json")]
    assert len(indexes) == SHARDS and all(r.start == 0 for r in indexes)  # each read whole, once
    got = {(r.path, r.start, r.start + r.nbytes) for r in early if r.path.endswith(".parquet")}
    assert all(r.range for r in early if r.path.endswith(".parquet")), "only ranged reads of shards"
    assert got == want and len(got) == len([r for r in early if r.path.endswith(".parquet")])

    each_byte_fetched_once(server, version, cache)  # parts of the first batch included
    stats = loader.stats()
    assert stats["bytes_fetched"] == sum(s.bytes for s in version.manifest.shards)
    assert stats["shards_fetched"] == stats["cache_misses"] == SHARDS


def cold_first_batch(server, url, data, cache_dir):
    """A fresh catalog handle's first batch on an empty cache, checked; the server's faults cleared after."""
    try:
        catalog, spec = spec_for(url)
        with Loader(spec, catalog=catalog, cache=ShardCache(cache_dir), prefetch=0) as loader:
            check(next(iter(loader)), data)
    finally:
        server.clear_faults()
    return catalog


def test_a_cold_start_asks_for_each_metadata_file_once_and_makes_no_head_request(s3, data, tmp_path):
    """Each request before the first bytes of data is a round trip a fresh node waits for: the tag,
    the manifest and every shard index are one GET each (no HEAD first), the indexes in flight
    together. Before, s3fs asked each object's size first and the indexes came one after another:
    16 requests in a row for 6 shards."""
    server, url, _ = s3
    version = data["version"]
    server.reset_counts()
    catalog = cold_first_batch(server, url, data, tmp_path / "cache")
    asked = server.requests()
    assert [r for r in asked if r.method == "HEAD"] == []
    counts = server.counts()
    assert counts[("GET", server.path(catalog.layout.tags_file("rand")))] == 1
    assert counts[("GET", server.path(catalog.layout.manifest("rand", version.id)))] == 1
    indexes = [server.path(catalog.layout.shard_index("rand", s.sha256)) for s in version.manifest.shards]
    assert [counts.get(("GET", p)) for p in indexes] == [1] * SHARDS


def test_an_index_damaged_in_transit_while_fetched_with_the_others_is_fetched_again(s3, data, tmp_path):
    server, url, _ = s3
    version = data["version"]
    index = server.path(Catalog(url).layout.shard_index("rand", version.manifest.shards[2].sha256))
    server.reset_counts()
    server.corrupt(index, times=1)
    cold_first_batch(server, url, data, tmp_path / "cache")
    assert server.counts()[("GET", index)] == 2  # the bad copy dropped, the index fetched once more


def test_a_part_damaged_in_the_first_batchs_round_of_fetches_is_fetched_again_alone(s3, data, tmp_path):
    """The first batch's footers and row groups go out together; one that comes back damaged is
    dropped and fetched again on its own (with the usual retry and error), never used."""
    server, url, _ = s3
    version = data["version"]
    catalog, spec = spec_for(url)
    shard, index, parts = first_batch_parts(spec, catalog, version, tmp_path)
    part = min(parts)
    start, end = index.span(part)
    path = server.path(version.shard_path(shard))
    server.reset_counts()
    # the round asks for this shard's footer and its parts at once: each of those GETs counts
    server.corrupt(path, times=1 + len(parts), position=start + (end - start) // 2)
    cold_first_batch(server, url, data, tmp_path / "cache")
    asked = [r for r in server.requests("GET", path) if r.start == start and r.nbytes == end - start]
    assert len(asked) == 2  # the damaged copy, then the part alone


def test_metadata_of_no_bytes_reads_back_from_object_storage(s3):
    """Metadata is read from byte 0 on (one GET, no HEAD); S3 refuses that range on an empty
    object, which must still read as empty, while other refusals stay errors."""
    _, url, _ = s3
    catalog = Catalog(url)
    sha = catalog.put_blob("rand", b"")
    assert catalog.read_blob("rand", sha) == b""


def each_byte_fetched_once(server, version, cache):
    """Every byte of every shard was fetched exactly once (request log), and the cache holds each shard."""
    for s in range(SHARDS):
        path = server.path(version.shard_path(s))
        spans = sorted((r.start, r.start + r.nbytes) for r in server.requests("GET", path=version.shard_path(s))
                       if r.status in (200, 206))
        assert spans[0][0] == 0 and spans[-1][1] == version.manifest.shards[s].bytes, path
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), f"{path}: gaps or overlaps {spans}"
        assert cache.holds(version.manifest.shards[s].sha256)


def test_a_loader_that_does_not_fill_leaves_its_checked_parts_to_the_next(s3, data, tmp_path):
    """Loader(fill=False), as a TorchLoader's main process reads a pass's first batch before its
    workers start: its rows from their parts, no fill and no thread left behind; a loader after it
    on the same cache (a worker) fetches only what is still missing."""
    server, url, _ = s3
    catalog, spec = spec_for(url)
    version = data["version"]
    server.reset_counts()
    cache = FillLog(tmp_path / "cache", server)
    # threads of earlier tests in this process (packed replay's process-wide pool) are not this loader's
    earlier = set(threading.enumerate())
    with Loader(spec, catalog=catalog, cache=cache, fill=False) as alone:
        for step in (0, 1):
            check(alone.batch_at(step), data)
        assert not [t.name for t in threading.enumerate() if t.name.startswith("dsinspect-fetch")]  # no fill
    left = [t.name for t in set(threading.enumerate()) - earlier if t.name.startswith("dsinspect-")]
    assert not left  # safe to fork now
    assert cache.before_fill is None and not any(cache.holds(s.sha256) for s in version.manifest.shards)
    fetched = [r for r in server.requests("GET") if r.path.endswith(".parquet")]
    assert fetched and all(r.range for r in fetched), "only ranged reads of parts"
    with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        for batch in loader:
            check(batch, data)
    each_byte_fetched_once(server, version, cache)


def test_a_flipped_byte_in_a_row_group_the_first_batch_reads_is_caught_before_the_batch(s3, data, tmp_path):
    server, url, _ = s3
    catalog, spec = spec_for(url)
    version = data["version"]
    shard, index, read = first_batch_parts(spec, catalog, version, tmp_path)
    start, end = index.span(min(read))
    server.corrupt(version.shard_path(shard), position=(start + end) // 2)
    try:
        cache = ShardCache(tmp_path / "cache", backoff=0.0)
        with Loader(spec, catalog=catalog, cache=cache) as loader:
            with pytest.raises(IntegrityError) as e:
                next(iter(loader))
    finally:
        server.clear_faults()
    message = str(e.value)
    assert version.shard_url(shard) in message and f"bytes {start}..{end}" in message
    assert "does not match the manifest's shard index" in message and "after a re-fetch" in message
    assert not cache.holds(version.manifest.shards[shard].sha256)


def test_a_flipped_byte_in_a_row_group_read_later_stops_the_epoch_before_any_wrong_batch(s3, data, tmp_path):
    server, url, _ = s3
    catalog, spec = spec_for(url)
    version = data["version"]
    shard, index, read = first_batch_parts(spec, catalog, version, tmp_path)
    later = next(p for p in range(index.parts - 1) if p not in read)  # a row group the first batch does not need
    start, end = index.span(later)
    server.corrupt(version.shard_path(shard), position=start + 1)
    seen = []
    try:
        with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "cache", backoff=0.0)) as loader:
            with pytest.raises(IntegrityError, match=rf"bytes {start}\.\.{end}"):
                for batch in loader:
                    seen.append(batch)
    finally:
        server.clear_faults()
    assert seen, "the first batch does not need the damaged row group"
    for batch in seen:
        check(batch, data)


@pytest.mark.parametrize("shuffle", ["global", "window", "none"])
def test_a_cold_epoch_reads_exactly_what_a_warm_one_does(tmp_path, shuffle):
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("rand", random_rows(900, seed=5), FIELDS, key="id",
                          options=WriteOptions(shard_rows=150, row_group_rows=16))
    extra = {"window_shards": 2} if shuffle == "window" else {}
    spec = RunSpec.create(catalog, "rand", seed=7, batch_size=12, world_size=2, shuffle=shuffle, **extra)
    warm_cache = ShardCache(tmp_path / "warm")
    for s in range(len(catalog.resolve("rand").manifest.shards)):
        warm_cache.open(catalog.resolve("rand"), s).release()
    for rank in (0, 1):
        with Loader(spec, rank, catalog, cache=warm_cache) as warm, \
                Loader(spec, rank, catalog, cache=ShardCache(tmp_path / f"cold-{rank}")) as cold:
            for a, b in zip(warm, cold, strict=True):
                assert a.indices.tolist() == b.indices.tolist()
                assert a.table.equals(b.table) and a.row_hashes == b.row_hashes


def test_a_fill_trusts_no_part_its_process_put_in_a_partial_file_removed_since(tmp_path):
    """This process's cold reads put checked parts into a shard's `.partial` file; another process
    then removed that file (its fill ended, or an eviction) and a cold read there made a new, empty
    one. A fill here must check every part it did not write itself in the file it assembles: the
    parts its process knows of are holes there (before: 'Parquet magic bytes not found', 1 run in
    4-5 of test_concurrency's shared bounded cache). On a store that is not local: a local store's
    shards are read in place, never through a `.partial` file."""
    catalog = Catalog(f"memory://cold-partial-{os.getpid()}-{tmp_path.name}")
    catalog.write_version("rand", random_rows(300, seed=9), FIELDS, key="id",
                          options=WriteOptions(shard_rows=100, row_group_rows=10))
    spec = RunSpec.create(catalog, "rand", seed=1, batch_size=8, shuffle="global")
    cache = ShardCache(tmp_path / "cache")
    with Loader(spec, catalog=catalog, cache=cache, fill=False) as cold:
        first = cold.batch_at(0)
    version = catalog.resolve("rand")
    elsewhere = ShardCache(tmp_path / "cache")  # another process's view of the same cache
    partials = sorted(cache.root.glob("*.partial"))
    assert partials
    for path in partials:
        path.unlink()
        cache.root.joinpath(path.stem + ".have").unlink(missing_ok=True)
        shard = [s.sha256 for s in version.manifest.shards].index(path.stem)
        os.close(elsewhere.open_partial(version.shard_index(shard))[0])  # made anew, holding nothing yet
    for shard in range(len(version.manifest.shards)):
        cache.open(version, shard).release()  # the fills, with what this process knows of the parts
    with Loader(spec, catalog=catalog, cache=cache) as loader:
        batches = list(loader)
    assert batches[0].table.equals(first.table)
    stored = pa.concat_tables([version.read_shard(s) for s in range(len(version.manifest.shards))])
    for batch in batches:
        assert batch.table.select(NAMES).to_pylist() == stored.select(NAMES).take(batch.indices).to_pylist()


def test_a_resume_keeps_what_was_fetched_ahead_and_fetches_no_byte_twice(s3, data, tmp_path):
    """A job stopped mid-epoch and resumed by a new loader on the same node: what the first had
    fetched (the row groups of its first batches, most of whose rows come later in the order) serves
    the second, so across the restart every byte of every shard crossed the network exactly once
    (torchdata #1520: data read ahead is thrown away on resume). The first loader does not fill,
    so that what it leaves is the same every run."""
    server, url, _ = s3
    version = data["version"]
    server.reset_counts()
    catalog, spec = spec_for(url)
    with Loader(spec, catalog=catalog, cache=ShardCache(tmp_path / "cache"), fill=False) as loader:
        it = iter(loader)
        before = [next(it) for _ in range(3)]
        state = loader.state_dict()
    fetched_before = sum(r.nbytes for r in server.requests("GET", contains="/shards/") if r.path.endswith(".parquet"))
    assert 0 < fetched_before < sum(s.bytes for s in version.manifest.shards)  # stopped part-way
    catalog, spec = spec_for(url)
    cache = ShardCache(tmp_path / "cache")
    with Loader(spec, catalog=catalog, cache=cache) as loader:
        loader.load_state_dict(state)
        after = list(loader)
    for batch in before + after:
        check(batch, data)
    assert sorted(i for b in before + after for i in b.indices.tolist()) == list(range(SHARDS * SHARD_ROWS))
    each_byte_fetched_once(server, version, cache)


def test_a_fill_keeps_several_ranged_reads_in_flight_and_fills_fetch_one_at_a_time(s3, data, tmp_path, monkeypatch):
    """One ranged read after another, a fill would wait a round trip per run and leave a long link
    idle; with runs in flight together it fills the bandwidth-delay product. Two fills of one
    process fetch one after the other (the other converts meanwhile), and the bound on what is in
    flight holds per process. The server holds each shard GET 200 ms: reads sent together overlap
    there, reads sent one after another never do."""
    server, url, _ = s3
    version = Catalog(url).version("rand", data["version"].id)
    monkeypatch.setattr(cache_module, "_FETCH_RUN", 1)  # a run per part: 11 runs per shard
    server.hold_gets(".parquet", 0.2)
    try:
        cache = ShardCache(tmp_path / "cache")
        cache.open(version, 0).release()
        alone = server.most_in_flight
        server.hold_gets(".parquet", 0.2)
        with ThreadPoolExecutor(2) as pool:
            for shard in pool.map(lambda s: cache.open(version, s), (1, 2)):
                shard.release()
        together = server.most_in_flight
    finally:
        server.clear_faults()
    assert 3 <= alone <= cache_module._RUNS_IN_FLIGHT
    assert 3 <= together <= cache_module._RUNS_IN_FLIGHT
    for s in (0, 1, 2):
        assert cache.holds(version.manifest.shards[s].sha256)


def test_the_next_fill_starts_fetching_while_the_last_runs_of_the_one_before_land(s3, data, tmp_path, monkeypatch):
    """Fills one after the other left the link idle a round trip at each shard's end (at 80 ms RTT
    and ~20 MB shards, ~8 % of an epoch). Now the next fill starts once the last run of the one
    before is in flight: here that last run is held until the next fill's first run has begun (with
    one fill after the other it never would: the read fails after 30 s)."""
    _, url, _ = s3
    version = Catalog(url).version("rand", data["version"].id)
    monkeypatch.setattr(cache_module, "_FETCH_RUN", 1)  # a run per part
    first_began, second_began = threading.Event(), threading.Event()
    real = ShardCache._fetch_into

    def gated(self, fd, version, shard, index, run):
        if shard == 1:
            first_began.set()
            if run[-1] == index.footer - 1:  # the first fill's last run (the footer comes first)
                assert second_began.wait(30), "the next fill did not start while this run was in flight"
        if shard == 2:
            second_began.set()
        return real(self, fd, version, shard, index, run)

    monkeypatch.setattr(ShardCache, "_fetch_into", gated)
    cache = ShardCache(tmp_path / "cache")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.open, version, 1)
        assert first_began.wait(60)
        second = pool.submit(cache.open, version, 2)
        for shard in (first.result(timeout=120), second.result(timeout=120)):
            shard.release()
    assert all(cache.holds(version.manifest.shards[s].sha256) for s in (1, 2))


def test_a_fill_converts_row_groups_as_they_land_not_after_its_last_byte(s3, data, tmp_path, monkeypatch):
    """A shard's conversion to Arrow follows its fill row group by row group (a 65 MB shard took
    ~1 s to convert after its last byte: at an epoch's end, the consumer waited that long with the
    link idle). Here the fill's last run is held until the conversion has appended a row group:
    with the conversion after the fill it never would (the fill fails after 30 s)."""
    _, url, _ = s3
    version = Catalog(url).version("rand", data["version"].id)
    monkeypatch.setattr(cache_module, "_FETCH_RUN", 1)  # a run per part
    monkeypatch.setattr(convert_module, "_RUN_BYTES", 1)  # a row group per conversion step
    appended = threading.Event()
    real_append, real_fetch = convert_module._append_table, ShardCache._fetch_into

    def noted_append(table, columns):
        appended.set()
        return real_append(table, columns)

    def gated(self, fd, version, shard, index, run):
        if run[-1] == index.footer - 1:  # the last row group
            assert appended.wait(30), "nothing was converted before the fill's last run"
        return real_fetch(self, fd, version, shard, index, run)

    monkeypatch.setattr(convert_module, "_append_table", noted_append)
    monkeypatch.setattr(ShardCache, "_fetch_into", gated)
    ShardCache(tmp_path / "cache").open(version, 3).release()
    shard = ShardCache(tmp_path / "cache").open(version, 3)  # a fresh process's view: from the sidecar
    try:
        rows = slice(3 * SHARD_ROWS, 4 * SHARD_ROWS)
        assert shard.batch.column(HASH_COLUMN).to_pylist() == data["hashes"][rows]
        assert shard.batch.select(NAMES).to_pylist() == data["rows"][rows]
    finally:
        shard.release()


def test_a_cold_first_batchs_parts_go_out_in_one_wave_not_ten_at_a_time(s3, data, tmp_path):
    """botocore's client opens 10 connections unless told otherwise, so the first batch's ranged
    reads (a footer and row groups of every shard: more than 10) went out in waves, a round trip
    each. The catalog's S3 client opens more, keeping what fsspec's configuration sets."""
    server, url, _ = s3
    server.hold_gets(".parquet", 0.2)
    catalog = cold_first_batch(server, url, data, tmp_path / "cache")  # clears the hold after
    assert server.most_in_flight > 10
    assert catalog.fs.config_kwargs["retries"] == PROBLEM_RETRIES["retries"]  # the configured ones kept


def _fill_all(url, version_id, root):
    """Another rank's fills: every shard of the version into the node's cache, published."""
    version = Catalog(url).version("rand", version_id)
    cache = ShardCache(root)
    for k in range(SHARDS):
        cache.open(version, k).release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks the other rank")
def test_a_partial_file_opened_just_after_its_shard_filled_is_not_left_behind(s3, data, tmp_path, monkeypatch):
    """A cold read looked at the cache, then another rank's fill published the shard and removed its
    `.partial`; the read's open made that file anew (sparse, the shard's size), saw the shard
    published and read from the cache, and the file stayed until the entry was evicted. Forced as
    27bedd4's test does: a forked process fills every shard just before the read opens its files."""
    import multiprocessing

    from dsinspect.loaders.read import cold

    _, url, _ = s3
    version = data["version"]
    root = tmp_path / "node"
    filled = []
    real_init = cold._Partial.__init__

    def fills_first(partial, cache, index):
        if not filled:
            filler = multiprocessing.get_context("fork").Process(target=_fill_all, args=(url, version.id, str(root)))
            filler.start()
            filler.join(120)
            assert filler.exitcode == 0
            filled.append(True)
        real_init(partial, cache, index)

    monkeypatch.setattr(cold._Partial, "__init__", fills_first)
    catalog, spec = spec_for(url)
    with Loader(spec, catalog=catalog, cache=ShardCache(root), fill=False) as loader:
        batch = next(iter(loader))
    assert filled, "the read never went cold"
    assert batch.table.column("id").to_pylist() == batch.indices.tolist()  # from the cache (id == row)
    assert sorted(p.name for p in root.iterdir() if p.suffix in (".partial", ".have", ".parts")) == []
    assert len(list(root.glob("*.json"))) == SHARDS

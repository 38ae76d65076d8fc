"""A small version from object storage without a round-trip tax (issue #35): its metadata in three
rounds, each small shard in one GET from byte 0 (the fill then asks for nothing more), connections
kept and reused across fills, and every byte still checked (a damaged object is named). Counted at a
real S3 server (moto on loopback) and at an HTTP front end that keeps connections alive
(benchmarks/shaped_link.py); no test here measures time."""

import json
import os
import sys
from contextlib import contextmanager

import numpy as np
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.moto_server.werkzeug_app")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

import fsspec  # noqa: E402
from s3_server import PROBLEM_RETRIES, s3_server  # noqa: E402
from shaped_link import ShapedLink  # noqa: E402
from test_remote import FIELDS, NAMES, random_rows  # noqa: E402

from dsinspect.errors import IntegrityError  # noqa: E402
from dsinspect.loaders import Catalog, Loader, RunSpec, WriteOptions  # noqa: E402
from dsinspect.loaders.read import fetch  # noqa: E402
from dsinspect.loaders.read.cache import ShardCache  # noqa: E402

SPARE, NEAR = getattr(fetch, "SPARE", 2 << 20), getattr(fetch, "NEAR", 256 << 10)

SHARDS, SHARD_ROWS, ROW_GROUP_ROWS = 4, 96, 12  # shards of ~40 KB in 8 row groups: far below SPARE


@pytest.fixture(scope="module")
def s3():
    with s3_server(**PROBLEM_RETRIES) as served:
        yield served


@pytest.fixture(scope="module")
def version(s3):
    _, url, _ = s3
    rows = random_rows(SHARDS * SHARD_ROWS, seed=5, blob=200)
    v = Catalog(url).write_version("small", rows, FIELDS, key="id", tags=["v1"],
                                   options=WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=ROW_GROUP_ROWS))
    assert all(s.index_sha256 for s in v.manifest.shards) and all(s.bytes < SPARE for s in v.manifest.shards)
    return v, rows


@pytest.fixture
def fresh_node(tmp_path, monkeypatch):
    """An empty node: no shards, no copies of manifests and indexes."""
    monkeypatch.setenv("DSINSPECT_CACHE", str(tmp_path / "node"))
    return tmp_path / "node"


@contextmanager
def through(link: ShapedLink):
    """s3fs in this process pointed at `link` instead of the server (and back afterwards)."""
    import s3fs

    saved = dict(fsspec.config.conf["s3"])
    fsspec.config.conf["s3"] = {**saved, "endpoint_url": f"http://127.0.0.1:{link.port}"}
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        fsspec.config.conf["s3"] = saved
        s3fs.S3FileSystem.clear_instance_cache()


def epoch(url, node, **loader):
    catalog = Catalog(url)
    spec = RunSpec.create(catalog, "small@v1", seed=3, batch_size=16, shuffle="global")
    with Loader(spec, catalog=catalog, cache=ShardCache(node / "shards", backoff=0.0), **loader) as reader:
        return [b for b in reader]


def check(batches, rows):
    assert sorted(i for b in batches for i in b.indices.tolist()) == list(range(len(rows)))
    for b in batches:
        assert b.rows() == [{k: rows[i][k] for k in NAMES} for i in b.indices]


def shard_gets(server, v):
    return {s: [r for r in server.requests("GET", path=v.shard_path(s))] for s in range(SHARDS)}


# -- the plan (pure) ------------------------------------------------------------------------------

def test_near_ranges_merge_and_a_nearly_covered_file_is_read_whole_from_byte_0():
    assert fetch.read_plan([]) == []
    assert fetch.read_plan([(5_000, 6_000), (1_000, 2_000)]) == [(0, 6_000)]  # all but 4 KB: whole, from 0
    far = SPARE + NEAR + 1
    spans = [(far, far + 10), (far + 10 + NEAR, far + 20 + NEAR), (10 * far, 10 * far + 10)]
    assert fetch.read_plan(spans) == [(far, far + 20 + NEAR), (10 * far, 10 * far + 10)]  # near: merged; far: apart
    assert fetch.read_plan([(far, far + 10), (far + 20, far + 30)]) == [(far, far + 30)]  # one read, not from 0


# -- requests and rounds, counted at the server ---------------------------------------------------

def test_a_small_versions_epoch_reads_each_shard_in_one_get_after_three_rounds_of_metadata(s3, version, fresh_node):
    server, url, _ = s3
    v, rows = version
    server.reset_counts()
    check(epoch(url, fresh_node), rows)
    gets = shard_gets(server, v)
    for s, entry in enumerate(v.manifest.shards):  # one GET of every byte, then nothing: the fill took what it brought
        assert [(r.start, r.nbytes) for r in gets[s]] == [(0, entry.bytes)], (s, gets[s])
    layout = v.catalog.layout
    metadata = [r.path for r in server.requests("GET") if "/shards/" not in r.path or r.path.endswith(".index.json")]
    assert sorted(metadata) == sorted(server.path(p) for p in [
        layout.tags_file("small"), layout.manifest("small", v.id),
        *(layout.shard_index("small", e.sha256) for e in v.manifest.shards)])
    assert len(server.requests()) == 2 + 2 * SHARDS  # tag, manifest, then per shard its index and its bytes


def test_metadata_comes_in_three_rounds_with_every_index_in_flight_together(s3, version, fresh_node):
    server, url, _ = s3
    v, rows = version
    server.reset_counts()
    server.hold_gets(".index.json", 0.3)  # a long round trip: requests sent together overlap
    try:
        check(epoch(url, fresh_node, prefetch=0), rows)
    finally:
        server.clear_faults()
    assert server.most_in_flight == SHARDS
    assert len(server.requests()) == 2 + 2 * SHARDS


# -- connections, counted at an HTTP front end that keeps them alive ------------------------------

def test_an_epoch_reuses_its_connections_across_fills(s3, version, fresh_node):
    server, url, _ = s3
    v, rows = version
    with ShapedLink(("127.0.0.1", server.port), http=True) as link, through(link):
        server.reset_counts()
        check(epoch(url, fresh_node), rows)
        connections, requests = link.stats.connections, link.stats.requests
    assert requests == len(server.requests()) == 2 + 2 * SHARDS
    # the metadata's rounds one after another on one connection; then at most one per shard in flight
    assert connections <= 1 + SHARDS, (connections, requests)


def test_the_front_end_keeps_a_clients_connection_across_requests(s3, version):
    server, _, _ = s3
    v, _ = version
    with ShapedLink(("127.0.0.1", server.port), http=True) as link, through(link):
        fs = fsspec.filesystem("s3")
        path = v.shard_path(0)
        server.reset_counts()
        whole = fs.cat_file(path)
        assert [fs.cat_file(path, start=a, end=a + 100) for a in (0, 1_000, 5_000)] == \
            [whole[a:a + 100] for a in (0, 1_000, 5_000)]
        assert fs.cat_file(path, start=0) == whole  # open-ended: no Content-Length trouble
        assert link.stats.requests == len(server.requests()) >= 5
        assert link.stats.connections == 1  # one after another: one connection


# -- integrity: every byte checked, a damaged object named ----------------------------------------

def test_a_byte_damaged_once_in_the_whole_read_is_fetched_again_alone_and_never_used(s3, version, fresh_node):
    server, url, _ = s3
    v, rows = version
    entry = v.manifest.shards[1]
    server.reset_counts()
    server.corrupt(v.shard_path(1), times=1, position=entry.bytes // 3)  # damaged in the first read only
    try:
        check(epoch(url, fresh_node), rows)
    finally:
        server.clear_faults()
    gets = shard_gets(server, v)[1]
    assert (gets[0].start, gets[0].nbytes) == (0, entry.bytes)  # read whole first
    again = gets[1:]  # then only the damaged part, alone (its neighbours came from the whole read)
    assert len(again) == 1 and again[0].start <= entry.bytes // 3 < again[0].start + again[0].nbytes < entry.bytes


@pytest.mark.parametrize("where", ["first batch", "fill"])
def test_a_damaged_object_is_named_whichever_read_meets_the_damage(s3, version, fresh_node, where):
    """A byte of shard 2 damaged in storage: in a row group the first batch reads, or in one only
    the fill takes from the bytes the whole read brought along. The epoch stops before any batch
    holding it, naming the shard and the bytes, after one more try from storage."""
    server, url, _ = s3
    v, rows = version
    catalog = Catalog(url)
    spec = RunSpec.create(catalog, "small@v1", seed=3, batch_size=16, shuffle="global")
    index = v.shard_index(2)
    lo, hi = int(v.shard_starts[2]), int(v.shard_starts[3])
    first_rows = [i - lo for i in spec_first_rows(spec) if lo <= i < hi]
    needed = set(np.unique(index.parts_of(np.array(first_rows, dtype=np.int64))).tolist()) if first_rows else set()
    parts = [p for p in range(index.parts - 1) if (p in needed) == (where == "first batch")]
    part = parts[0]
    start, end = index.span(part)
    server.reset_counts()
    server.corrupt(v.shard_path(2), position=(start + end) // 2)
    seen = []
    try:
        with pytest.raises(IntegrityError) as e:
            with Loader(spec, catalog=catalog, cache=ShardCache(fresh_node / "shards", backoff=0.0)) as reader:
                for batch in reader:
                    seen.append(batch)
    finally:
        server.clear_faults()
    message = str(e.value)
    assert v.shard_url(2) in message and f"bytes {start}..{end}" in message and "after a re-fetch" in message
    damaged = int(v.shard_starts[2]) + int(index.row_starts[part])
    assert all(damaged not in b.indices.tolist() for b in seen)
    assert (shard_gets(server, v)[2][0].start, shard_gets(server, v)[2][0].nbytes) == (0, v.manifest.shards[2].bytes)


def spec_first_rows(spec):
    from dsinspect.loaders import batch_indices
    return batch_indices(spec, 0, 0).tolist()


def test_the_front_end_passes_answers_that_are_not_ranges(s3, version):
    """HEADs (no body), errors and listings through the keep-alive front end, on one connection."""
    server, _, _ = s3
    with ShapedLink(("127.0.0.1", server.port), http=True) as link, through(link):
        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        assert not fs.exists(f"{server.bucket}/no/such/object")
        with pytest.raises(FileNotFoundError):
            fs.cat_file(f"{server.bucket}/no/such/object")
        assert fs.ls(server.bucket, detail=False)
        assert json.loads(json.dumps(link.stats.requests)) >= 3 and link.stats.connections == 1

"""close() during a fill (issue #35): a Loader closed while its fill of a shard waits on a slow link
returns before the fill ends, and the fill stops cleanly: no entry, no converted file left, the
parts it checked kept in the shard's `.partial` file for the next reader. A fresh process then
reads the epoch through that cache, every row checked against its stored hash, fetching nothing
the abandoned fill had brought. A real S3 server (moto on loopback) answering late."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.moto_server.werkzeug_app")

from s3_server import PROBLEM_RETRIES, s3_server  # noqa: E402
from test_remote import FIELDS, random_rows  # noqa: E402  (incompressible rows)

from dsinspect.loaders import Catalog, Loader, RunSpec, WriteOptions  # noqa: E402
from dsinspect.loaders.read.cache import ShardCache  # noqa: E402

HOLD = 3.0  # seconds the server holds each GET of a shard: a fill is under way at least this long
PATIENCE = 120.0  # generous bounds for what must happen eventually (never what the test measures)
FILL_THREADS = ("dsinspect-fetch", "dsinspect-run", "dsinspect-convert")

FRESH_READER = textwrap.dedent("""
    import json, sys
    from dsinspect.loaders import Catalog, Loader, RunSpec
    from dsinspect.loaders.format.canonical import row_hashes
    from dsinspect.loaders.read.cache import ShardCache
    url, spec_json, root, names = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    catalog, cache = Catalog(url), ShardCache(root)
    seen, bad = [], 0
    with Loader(RunSpec.from_json(json.loads(spec_json)), catalog=catalog, cache=cache) as loader:
        for batch in loader:
            seen += batch.indices.tolist()
            bad += row_hashes(batch.table.select(names), names) != batch.row_hashes
        loader.close(wait=True)
        stats = loader.stats()
    version = catalog.resolve("big")
    for s in range(len(version.manifest.shards)):  # every block of every cached shard checks out
        shard = cache.open(version, s)
        shard.check_all()
        shard.release()
    print("RESULT " + json.dumps({"seen": seen, "bad": bad, "stats": stats}))
""")


@pytest.fixture(scope="module")
def s3():
    with s3_server(**PROBLEM_RETRIES) as served:
        yield served


def fill_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(FILL_THREADS)]


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"not within {PATIENCE} s: {what}"
        time.sleep(0.02)


def test_close_during_a_fill_returns_before_it_ends_and_leaves_the_cache_to_the_next_reader(s3, tmp_path):
    server, url, _ = s3
    catalog = Catalog(url)
    rows = random_rows(3200, seed=35, blob=1500)  # one shard of ~5 MB: three runs of a fill; 200 batches
    version = catalog.write_version("big", rows, FIELDS, key="id",
                                    options=WriteOptions(shard_rows=len(rows), row_group_rows=50))
    spec = RunSpec.create(catalog, "big", seed=5, batch_size=16, shuffle="global")
    sha = version.manifest.shards[0].sha256
    root = tmp_path / "cache"
    cache = ShardCache(root)

    server.hold_gets("/shards/", HOLD)
    try:
        loader = Loader(spec, catalog=catalog, cache=cache)
        next(iter(loader))  # cold: the first batch's parts (held too); fills start from the next batch on
        assert not cache.holds(sha)
        loader.warm(range(1, 4))  # the fill is under way: its ranged reads wait at the server
        wait_until(lambda: server._middleware.in_flight >= 1, "a fill's read is at the server")
        started = time.monotonic()
        loader.close()
        took = time.monotonic() - started
        published = (root / f"{sha}.json").exists()
        # the fill's own progress: its reads were still held (HOLD s) when close() returned
        assert not published, "close() waited for the fill to end"
        assert took < HOLD, f"close() took {took:.2f} s"
        wait_until(lambda: not fill_threads(), "the abandoned fill stopped")
    finally:
        server.clear_faults()

    # abandoned cleanly: no entry and nothing half-converted; what it checked is kept for the next fill
    assert not cache.holds(sha) and not (root / f"{sha}.arrow").exists()
    assert not [p.name for p in root.iterdir() if p.name.startswith((".convert-", ".sidecar-"))]
    assert (root / f"{sha}.partial").exists() and (root / f"{sha}.have").stat().st_size > 0

    server.reset_counts()
    names = [f.name for f in FIELDS]
    args = [url, json.dumps(spec.to_json()), str(root), json.dumps(names)]
    done = subprocess.run([sys.executable, "-c", FRESH_READER, *args], capture_output=True, text=True,
                          timeout=PATIENCE, env=os.environ.copy())
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert sorted(result["seen"]) == list(range(len(rows))) and result["bad"] == 0
    assert cache.holds(sha) and result["stats"]["verify_failures"] == 0
    # the parts the abandoned fill had brought were used, each checked, not fetched again
    fetched = sum(r.nbytes for r in server.requests("GET") if r.path.endswith(".parquet"))
    assert fetched < version.manifest.shards[0].bytes // 2, fetched

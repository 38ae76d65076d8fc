"""The remote read benchmark (issue #18), built up in steps: moto's S3 server on loopback, behind
the shaped link of shaped_link.py, read with s3fs.

  python benchmarks/bench_remote.py [--mib 64] [--rate-mbit 400]          # the link itself
  python benchmarks/bench_remote.py --first-batch [--rows 10000]         # dsinspect's cold first batch
  python benchmarks/bench_remote.py --epoch [--rate-mbit 200]            # a cold epoch: dsinspect, peers, baseline
  python benchmarks/bench_remote.py --epoch --resume --rate-mbit 200      # a resume on a fresh node, to its first batch
  python benchmarks/bench_remote.py --bounded --rtt-ms 20                # a cache of 25 %: fetches vs Belady, LRU
  python benchmarks/bench_remote.py --small --rtt-ms 20 [--repeats 3]    # 4 and 40 MB versions: requests, connections

The link: for the server alone and for each link (RTT 0, 20, 80 ms at the given rate, and RTT 0
unlimited), one whole-object GET and the object as 8 ranged GETs in flight at once, each the median
of 3: whether the link, not the server or the proxy, is what limits a reader, and what one stream
gets at each RTT against streams in parallel. Written to results/remote-link-<date>.json.

The first batch: a version of `--rows` token rows (1024 int32 each, as bench_read.py) written into
the server; for each RTT, fresh processes (median of 5) open the catalog, plan a global shuffle and
read the first batch of 32 at 0 workers on an empty cache: the time from `Catalog(url)` (which
imports s3fs and makes its client, ~0.35 s here, before any request) and from after it. Beside it:
the requests the server answered until then, the bytes they carried, and the floor the issue sets
(3 RTTs plus those bytes at the link's rate), against the time after the client is made.
Written to results/remote-first-batch-<date>.json.

The cold epoch: bench_read.py's token set (100,000 rows of 1024 int32; written there if missing)
uploaded in each reader's own format: dsinspect's catalog (zstd Parquet), LitData's chunks and
Mosaic's MDS shards (both uncompressed), and a plain fsspec + pyarrow baseline on dsinspect's
Parquet (every shard fetched with one `cat`, s3fs keeping them all in flight, decoded, then served
from memory). For each RTT and reader, a fresh process on a fresh node (empty caches) reads one
epoch, shuffled, batch 32, 0 workers: samples/s, the bytes the server sent as a fraction of the
link's rate, the time to the first batch, requests, the CPU seconds of the reader and of the
server with the link (one process), the reader's peak RSS and the disk its caches hold at the end.
Written to results/remote-epoch-<date>.json. With --resume, each reader instead resumes at step
RESUME_STEP (a third of the epoch) in a fresh process on a fresh node and reads one batch: its
time to that batch is the cold resume. The peers' states come from a process that read that far
(straight from the server); dsinspect's is made without reading. results/remote-resume-<date>.json.

The bounded cache: 40,000 token rows in 40 shards, a cache bound of 25 % of them as cached, a window
shuffle (2 shards) over 3 epochs through the link, in a fresh process per eviction policy: the
cache's own (by the known order) and LRU; shards filled and bytes fetched, against Belady's optimum
and LRU simulated for the same order. Beside them LitData on the same rows in its own 40 chunks,
its max_cache_size 25 % of them, its own shuffle: chunk bytes fetched per epoch of its data.
Written to results/remote-bounded-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from result_file import new_result

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' S3 server (moto behind a request log)

from shaped_link import ShapedLink  # noqa: E402

REPEATS = 3
PARALLEL = 8
FIRST_BATCH_REPEATS = 5
# One fresh process: open the catalog, plan, read the first batch cold; prints its time.
FIRST_BATCH_CHILD = r"""
import sys, tempfile, time
from dsinspect.loaders import Catalog, Loader, RunSpec
from dsinspect.loaders.read.cache import ShardCache
t = time.perf_counter()
catalog = Catalog(sys.argv[1])  # imports s3fs and makes its client: no request yet
opened = time.perf_counter()
spec = RunSpec.create(catalog, "tokens", seed=7, batch_size=32, shuffle="global")
with Loader(spec, catalog=catalog, cache=ShardCache(tempfile.mkdtemp()), prefetch=0) as loader:
    next(iter(loader))
    now = time.perf_counter()
    print("RESULT", round((now - t) * 1e3, 1), round((now - opened) * 1e3, 1), flush=True)
    import os
    os._exit(0)  # the background fill would go on fetching: the first batch is what is measured
"""


# One fresh process: a whole cold epoch of one reader. argv: the reader, a JSON of where things are,
# and optionally a mode: "state STEP FILE" reads STEP batches and writes the reader's state to FILE;
# "resume STEP FILE" restores that state (dsinspect: its state at STEP, made without reading) and
# reads one batch. Prints the samples, seconds, first batch ms, CPU s, peak RSS MB and disk MB.
EPOCH_CHILD = r"""
import json, os, sys, tempfile, time
import numpy as np
reader, where = sys.argv[1], json.loads(sys.argv[2])
mode, step, state_file = (sys.argv[3], int(sys.argv[4]), sys.argv[5]) if len(sys.argv) > 3 else ("epoch", 0, None)
limit = step if mode == "state" else 1 if mode == "resume" else None
t = time.perf_counter()
samples, first, batches = 0, None, 0
disk = [os.environ["DSINSPECT_CACHE"]]


def took(n):
    global samples, first, batches
    samples, batches = samples + n, batches + 1
    first = first or time.perf_counter()
    return limit is not None and batches >= limit


def saved():
    with open(state_file) as f:
        return json.load(f)


def save(state):
    with open(state_file, "w") as f:
        json.dump(state, f, default=int)


if reader in ("dsinspect", "baseline"):
    from dsinspect.loaders import Catalog, Loader, RunSpec, epoch_order
    from dsinspect.loaders.order.state import LoaderState
    from dsinspect.loaders.read.cache import ShardCache
    catalog = Catalog(where["catalog"])  # imports s3fs and makes its client: no request yet
    opened = time.perf_counter()
    spec = RunSpec.create(catalog, where["address"], seed=7, batch_size=32, shuffle="global")
    if reader == "dsinspect":
        disk.append(tempfile.mkdtemp())
        with Loader(spec, catalog=catalog, cache=ShardCache(disk[-1]), prefetch=0) as loader:
            if mode == "resume":
                loader.load_state_dict(LoaderState.at(spec, step, 0).to_json())
            for batch in loader:
                batch.to_numpy()["tokens"]
                if took(len(batch)):
                    break
    else:  # every shard with one fsspec cat (s3fs keeps them all in flight), decoded, served from memory
        import io
        import pyarrow.parquet as pq
        version = catalog.resolve(where["address"])
        paths = [version.shard_path(s) for s in range(len(version.manifest.shards))]
        blobs = catalog.fs.cat(paths)
        tokens = np.concatenate([pq.read_table(io.BytesIO(blobs[p]), columns=["tokens"]).column("tokens")
                                 .combine_chunks().flatten().to_numpy().reshape(-1, 1024) for p in paths])
        order = epoch_order(spec, 0)
        for at in range(32 * step if mode == "resume" else 0, len(order) - 31, 32):
            tokens[order[at:at + 32]]
            if took(32):
                break
elif reader == "litdata":
    import litdata
    from litdata.streaming import downloader
    # its obstore client is built without allow_http, so a plain-http endpoint fails (BadScheme)
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
    opened = time.perf_counter()
    options = {"endpoint_url": where["endpoint"], "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing", "region_name": "us-east-1"}
    if state_file:  # its state names its cache directory: the same path, emptied (a fresh node)
        import shutil
        shutil.rmtree(state_file + ".cache", ignore_errors=True)
        os.makedirs(state_file + ".cache")
    disk.append(state_file + ".cache" if state_file else tempfile.mkdtemp())
    ds = litdata.StreamingDataset(where["litdata"], cache_dir=disk[-1], shuffle=True, seed=7,
                                  drop_last=True, storage_options=options)
    loader = litdata.StreamingDataLoader(ds, batch_size=32, num_workers=0, drop_last=True)
    if mode == "resume":
        loader.load_state_dict(saved())
    for batch in loader:
        if took(len(batch["tokens"])):
            break
    if mode == "state":
        save(loader.state_dict())
elif reader == "mosaic":
    sys.path.insert(0, where["benchmarks"])
    from bench_read import install_streaming_stubs
    install_streaming_stubs()
    os.environ["S3_ENDPOINT_URL"] = where["endpoint"]
    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    opened = time.perf_counter()
    disk.append(tempfile.mkdtemp())
    ds = StreamingDataset(remote=where["mosaic"], local=disk[-1], shuffle=True, shuffle_seed=7,
                          shuffle_algo="naive", batch_size=32)
    if mode == "resume":
        ds.load_state_dict(saved())
    loader = StreamingDataLoader(ds, batch_size=32, num_workers=0, drop_last=True)
    for batch in loader:
        if took(len(batch["tokens"])):
            break
    if mode == "state":
        save(loader.state_dict())
end = time.perf_counter()
cpu = time.process_time()  # this process's CPU seconds, all threads (from its start)
with open("/proc/self/status") as status:  # VmHWM: peak resident (ru_maxrss keeps the parent's across exec)
    rss_mb = int(next(x for x in status if x.startswith("VmHWM:")).split()[1]) / 1024
disk_mb = sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for root in disk for d, _, fs in os.walk(root)
              for f in fs) / 1e6  # blocks, not sizes: a sparse file counts what it holds
print("RESULT", samples, round(end - opened, 3), round((first - opened) * 1e3, 1), round(cpu, 2), round(rss_mb),
      round(disk_mb), flush=True)
"""
EPOCH_READERS = ("dsinspect", "baseline", "litdata", "mosaic")
RESUME_STEP = 1000  # of 3,125 in an epoch: a resume a third of the way in

# One fresh process: EPOCHS_BOUNDED epochs under a window shuffle through a bounded cache. argv: url,
# bound in bytes, policy ("order": the cache's own, by the known order; "lru": least recently used).
BOUNDED_CHILD = r"""
import sys, tempfile, time
from dsinspect.loaders import Catalog, Loader, RunSpec
from dsinspect.loaders.read.cache import ShardCache
url, bound, policy, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
catalog = Catalog(url)
spec = RunSpec.create(catalog, "tokens", seed=7, batch_size=32, shuffle="window", window_shards=2)
cache = ShardCache(tempfile.mkdtemp(), max_bytes=bound)
t = time.perf_counter()
with Loader(spec, catalog=catalog, cache=cache) as loader:
    if policy == "lru":
        cache.evict_by(None)
    batches = sum(1 for _ in range(epochs) for _ in loader)
    fills = loader.stats()["cache_misses"]
print("RESULT", batches, fills, round(time.perf_counter() - t, 2), flush=True)
"""
EPOCHS_BOUNDED = 3
# The same for LitData: its own chunks (1,000 rows each, as dsinspect's shards), its shuffle (chunk
# order, then rows within a window of chunks), max_cache_size = the bound. argv: its URL, bound, epochs,
# the endpoint.
LIT_BOUNDED_CHILD = r"""
import sys, tempfile, time
import litdata
from litdata.streaming import downloader
downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
url, bound, epochs, endpoint = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
options = {"endpoint_url": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
           "region_name": "us-east-1"}
ds = litdata.StreamingDataset(url, cache_dir=tempfile.mkdtemp(), shuffle=True, seed=7, drop_last=True,
                              storage_options=options, max_cache_size=bound)
loader = litdata.StreamingDataLoader(ds, batch_size=32, num_workers=0, drop_last=True)
t = time.perf_counter()
batches = sum(1 for _ in range(epochs) for _ in loader)
print("RESULT", batches, 0, round(time.perf_counter() - t, 2), flush=True)
"""


def _lit_rows(span):  # litdata.optimize's worker (module level: picklable)
    import numpy as np
    path, start, stop = span
    rows = np.load(path, mmap_mode="r")
    for i in range(start, stop):
        yield {"tokens": np.array(rows[i])}


def _fresh_node() -> dict[str, str]:
    """The environment of a process on a node that has read nothing: an empty DSINSPECT_CACHE (no
    shards, no copies of manifests and indexes)."""
    import tempfile
    return {"DSINSPECT_CACHE": tempfile.mkdtemp(prefix="bench-remote-node-")}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(fs, path: str, size: int) -> dict:
    """MB/s of one whole GET and of PARALLEL ranged GETs at once (medians of REPEATS)."""
    step = -(-size // PARALLEL)
    ranges = [(a, min(size, a + step)) for a in range(0, size, step)]

    def whole():
        assert len(fs.cat_file(path)) == size

    def ranged():
        with ThreadPoolExecutor(PARALLEL) as pool:
            got = list(pool.map(lambda r: len(fs.cat_file(path, start=r[0], end=r[1])), ranges))
        assert sum(got) == size

    one = statistics.median(_timed(whole) for _ in range(REPEATS))
    many = statistics.median(_timed(ranged) for _ in range(REPEATS))
    return {"one_stream_mb_s": round(size / one / 1e6, 1), f"{PARALLEL}_streams_mb_s": round(size / many / 1e6, 1)}


def _git() -> str:
    import subprocess
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


def first_batch(args) -> int:
    import subprocess

    rate = args.rate_mbit * 1e6 / 8
    out_rows = []
    with _tokens_on_server(args.rows) as (server, env, url, _):
        for rtt in (0.0, 0.020, 0.080):
            with ShapedLink(("127.0.0.1", server.port), rtt=rtt, rate=rate) as link:
                child_env = {**env, "FSSPEC_S3": json.dumps({**json.loads(env["FSSPEC_S3"]),
                                                              "endpoint_url": f"http://127.0.0.1:{link.port}"})}
                times, after_open, asked, carried = [], [], [], []
                for _ in range(FIRST_BATCH_REPEATS):
                    server.reset_counts()
                    done = subprocess.run([sys.executable, "-c", FIRST_BATCH_CHILD, url], capture_output=True,
                                          text=True, env={**os.environ, **child_env, **_fresh_node()}, timeout=300)
                    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
                    if not line:
                        raise RuntimeError(done.stderr[-2000:])
                    times.append(float(line[0].split()[1]))
                    after_open.append(float(line[0].split()[2]))
                    asked.append(len(server.requests()))  # the child ends at its first batch (a fill may have begun)
                    carried.append(sum(r.nbytes for r in server.requests("GET")))
            ms, ms_open = statistics.median(times), statistics.median(after_open)
            floor = (3 * rtt + statistics.median(carried) / rate) * 1e3
            row = {"rtt_ms": rtt * 1e3, "rate_mb_s": round(rate / 1e6, 1), "first_batch_ms": ms,
                   "first_batch_ms_all": times, "after_open_ms": ms_open, "after_open_ms_all": after_open,
                   "requests": statistics.median(asked),
                   "bytes": statistics.median(carried), "floor_ms": round(floor, 1),
                   "load": round(os.getloadavg()[0], 2)}
            out_rows.append(row)
            print(f"RTT {rtt * 1e3:>3.0f} ms: first batch {ms:>7.1f} ms, {ms_open:>7.1f} ms after the client is made "
                  f"(medians of {FIRST_BATCH_REPEATS}), {row['requests']:.0f} requests, {row['bytes'] / 1e6:.2f} MB; "
                  f"floor (3 RTTs + bytes at the link's rate) {floor:.1f} ms: {ms_open / floor:.1f}x  "
                  f"[load {row['load']}]", flush=True)
    out = new_result("remote-first-batch")
    meta = {"rows": args.rows, "repeats": FIRST_BATCH_REPEATS, "git": _git()}
    out.write_text(json.dumps({**meta, "results": out_rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


def _token_rows(rows_n: int):
    import numpy as np
    return np.random.default_rng(20250101).integers(0, 50_257, (rows_n, 1024), dtype=np.int32)


@contextmanager
def _tokens_on_server(rows_n: int, **options):
    """(server, its environment, the catalog URL, the data's bytes) with `rows_n` token rows written
    as version "tokens" (1024 int32 each, as bench_read.py)."""
    import fsspec
    import pyarrow as pa
    from s3_server import S3Server, s3_environment

    from dsinspect.loaders import Catalog, Field

    rows = _token_rows(rows_n)
    table = pa.table({"tokens": pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), 1024)})
    with S3Server() as server, s3_environment(server) as env:
        fsspec.filesystem("s3", **json.loads(env["FSSPEC_S3"])).mkdir(server.bucket)
        url = server.url("catalog")
        from dsinspect.loaders import WriteOptions
        version = Catalog(url).write_version("tokens", table, [Field("tokens", table.schema.field(0).type, "tokens")],
                                             options=WriteOptions(**options))
        size = sum(s.bytes for s in version.manifest.shards)
        print(f"{rows_n:,} rows in {len(version.manifest.shards)} shards, {size / 1e6:.1f} MB", flush=True)
        yield server, env, url, size


def epoch(args) -> int:
    """bench_read.py's token set (written there if missing), uploaded in each reader's format."""
    import fsspec
    from bench_read import paths, prepare
    from s3_server import S3Server, s3_environment

    prepare("full", print, readers={"dsinspect", "litdata", "mosaic-streaming"})
    p = paths("full")
    ids = json.loads((p["catalog"] / "bench.json").read_text())
    rate = args.rate_mbit * 1e6 / 8
    out_rows = []
    with S3Server() as server, s3_environment(server) as env:
        fs = fsspec.filesystem("s3", **json.loads(env["FSSPEC_S3"]))
        fs.mkdir(server.bucket)
        where = {"catalog": server.url("catalog"), "address": f"tokens@{ids['tokens']}",
                 "litdata": server.url("litdata-tokens"), "mosaic": server.url("mds-tokens"),
                 "benchmarks": str(HERE)}
        uploads = (("dsinspect", p["catalog"], "catalog"), ("litdata", p["lit_tokens"] / "ds", "litdata-tokens"),
                   ("mosaic", p["mds_tokens"] / "ds", "mds-tokens"))
        for reader, local, remote in uploads:
            started = time.perf_counter()
            fs.put(str(local), f"{server.bucket}/{remote}", recursive=True)
            print(f"uploaded {reader}'s files in {time.perf_counter() - started:.1f} s", flush=True)
        version_bytes = None
        modes = {reader: () for reader in args.readers}
        if args.resume:  # the peers' states at RESUME_STEP, read straight from the server (no link)
            for reader in args.readers:
                modes[reader] = ("resume", str(RESUME_STEP), str(HERE / "results" / f".state-{reader}.json"))
                if reader in ("litdata", "mosaic"):
                    _epoch_of(server, reader, {**where, "endpoint": f"http://127.0.0.1:{server.port}"},
                              {**os.environ, **env}, 0.0, rate, ("state", *modes[reader][1:]))
        for rtt in args.rtts:
            with ShapedLink(("127.0.0.1", server.port), rtt=rtt, rate=rate) as link:
                endpoint = f"http://127.0.0.1:{link.port}"
                child_env = {**os.environ, **env,
                             "FSSPEC_S3": json.dumps({**json.loads(env["FSSPEC_S3"]), "endpoint_url": endpoint})}
                for reader in args.readers:
                    row = _epoch_of(server, reader, {**where, "endpoint": endpoint}, child_env, rtt, rate,
                                    modes[reader])
                    out_rows.append(row)
                    version_bytes = version_bytes or _version_bytes(server, ids["tokens"])
    for reader in args.readers:
        (HERE / "results" / f".state-{reader}.json").unlink(missing_ok=True)
        shutil.rmtree(HERE / "results" / f".state-{reader}.json.cache", ignore_errors=True)
    kind = "resume" if args.resume else "epoch"
    out = new_result(f"remote-{kind}")
    meta = {"rows": 100_000, "resume_step": RESUME_STEP if args.resume else None,
            "dsinspect_version_bytes": version_bytes, "rate_mbit": args.rate_mbit, "git": _git(),
            "load_at_end": os.getloadavg()}
    out.write_text(json.dumps({**meta, "results": out_rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


def _litdata_bounded(server, env: dict, endpoint: str) -> dict:
    """LitData on the same 40,000 rows in its own chunks of 1,000, max_cache_size 25 % of them,
    EPOCHS_BOUNDED epochs through the link: chunk bytes fetched per epoch of its data."""
    import subprocess
    import tempfile

    import fsspec
    import litdata
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="bench-remote-lit-"))
    np.save(work / "rows.npy", _token_rows(40_000))
    litdata.optimize(fn=_lit_rows, inputs=[(str(work / "rows.npy"), s, s + 1_000) for s in range(0, 40_000, 1_000)],
                     output_dir=str(work / "ds"), chunk_size=1_000, num_workers=1, verbose=False)
    fs = fsspec.filesystem("s3", **json.loads(env["FSSPEC_S3"]))
    fs.put(str(work / "ds"), f"{server.bucket}/lit-bounded", recursive=True)
    chunks = sorted((work / "ds").glob("*.bin"))
    size = sum(c.stat().st_size for c in chunks)
    bound = int(0.25 * size)
    server.reset_counts()
    done = subprocess.run([sys.executable, "-c", LIT_BOUNDED_CHILD, server.url("lit-bounded"), str(bound),
                           str(EPOCHS_BOUNDED), endpoint], capture_output=True, text=True,
                          env={**os.environ, **env, **_fresh_node()}, timeout=1800)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    if not line:
        raise RuntimeError(done.stderr[-3000:])
    _, batches, _, seconds = line[0].split()
    gets = [r for r in server.requests("GET") if r.path.endswith(".bin")]
    moved = sum(r.nbytes for r in gets)
    row = {"policy": "litdata", "fills": len(gets), "batches": int(batches), "seconds": float(seconds),
           "shard_bytes_fetched": moved, "per_epoch_of_data": round(moved / size / EPOCHS_BOUNDED, 3),
           "chunks": len(chunks), "bound_bytes": bound, "load": round(os.getloadavg()[0], 2)}
    print(f"litdata {len(chunks)} chunks, {size / 1e6:.0f} MB, max_cache_size {bound / 1e6:.0f} MB: {len(gets)} chunk "
          f"GETs, {moved / 1e6:.0f} MB: {row['per_epoch_of_data']:.2f}x the data per epoch, {row['seconds']} s  "
          f"[load {row['load']}]", flush=True)
    return row


def _version_bytes(server, version_id: str) -> int:
    from dsinspect.loaders import Catalog
    catalog = Catalog(server.url("catalog"))
    return sum(s.bytes for s in catalog.version("tokens", version_id).manifest.shards)


def _epoch_of(server, reader: str, where: dict, env: dict, rtt: float, rate: float, mode: tuple = ()) -> dict:
    """One reader's cold epoch in a fresh process on a fresh node, and what the server saw
    (`mode`: see EPOCH_CHILD)."""
    import subprocess

    server.reset_counts()
    served = time.process_time()  # the server and the link live in this process
    done = subprocess.run([sys.executable, "-c", EPOCH_CHILD, reader, json.dumps(where), *mode], capture_output=True,
                          text=True, env={**env, **_fresh_node()}, timeout=1800)
    served = time.process_time() - served
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    if not line:
        raise RuntimeError(f"{reader}: {done.stderr[-3000:]}")
    _, samples, seconds, first_ms, reader_cpu, rss_mb, disk_mb = line[0].split()
    samples, seconds, first_ms, reader_cpu = int(samples), float(seconds), float(first_ms), float(reader_cpu)
    moved = sum(r.nbytes for r in server.requests("GET"))
    row = {"reader": reader, "mode": mode[0] if mode else "epoch",
           "rtt_ms": rtt * 1e3, "rate_mb_s": round(rate / 1e6, 1), "samples": samples,
           "epoch_s": seconds, "samples_per_s": round(samples / seconds, 1), "bytes_moved": moved,
           "link_fraction": round(moved / seconds / rate, 3), "first_batch_ms": first_ms,
           "requests": len(server.requests()), "reader_cpu_s": reader_cpu, "server_and_link_cpu_s": round(served, 2),
           "peak_rss_mb": int(rss_mb), "disk_mb": int(disk_mb), "load": round(os.getloadavg()[0], 2)}
    print(f"RTT {rtt * 1e3:>3.0f} ms {reader:<10} {row['mode']:<6} {seconds:6.2f} s "
          f"{row['samples_per_s']:>8,.0f} samples/s  "
          f"{moved / 1e6:6.1f} MB moved, {row['link_fraction']:.0%} of the link  first batch {first_ms:7.1f} ms  "
          f"{row['requests']} requests  CPU s: reader {reader_cpu:.1f}, server+link {served:.1f}  "
          f"peak RSS {rss_mb} MB, disk {disk_mb} MB  [load {row['load']}]", flush=True)
    return row


def bounded(args) -> int:
    """A version of 40,000 token rows in 40 shards; a cache bound of 25 % of it (as cached); a window
    shuffle over EPOCHS_BOUNDED epochs: shards fetched by the cache's order-aware eviction and by LRU,
    against Belady's optimum and LRU simulated for the same order (order/future.py)."""
    import subprocess
    import tempfile

    from dsinspect.loaders import Catalog, RunSpec
    from dsinspect.loaders.order.future import cache_fetches, shard_uses
    from dsinspect.loaders.read.cache import ShardCache

    rate, rtt = args.rate_mbit * 1e6 / 8, args.rtts[0]
    rows = []
    with _tokens_on_server(40_000, shard_rows=1_000) as (server, env, url, size):
        catalog = Catalog(url)
        version = catalog.resolve("tokens")
        probe = ShardCache(tempfile.mkdtemp()).open(version, 0)
        cached = probe.nbytes  # every shard holds 1,000 rows of one size: the same cached bytes
        probe.release()
        shards = len(version.manifest.shards)
        bound = int(0.25 * shards * cached)
        spec = RunSpec.create(catalog, "tokens", seed=7, batch_size=32, shuffle="window", window_shards=2)
        steps = EPOCHS_BOUNDED * (version.num_rows // 32)
        uses = shard_uses(spec, 0, steps)
        simulated = {p: cache_fetches(*uses, [cached] * shards, bound, p)[1] for p in ("belady", "lru")}
        print(f"{shards} shards, {size / 1e6:.1f} MB stored, {cached / 1e6:.2f} MB each as cached; bound "
              f"{bound / 1e6:.1f} MB (25 %); {EPOCHS_BOUNDED} epochs: simulated fills, Belady {simulated['belady']}, "
              f"LRU {simulated['lru']}", flush=True)
        with ShapedLink(("127.0.0.1", server.port), rtt=rtt, rate=rate) as link:
            child_env = {**os.environ, **env, **_fresh_node(), "FSSPEC_S3": json.dumps(
                {**json.loads(env["FSSPEC_S3"]), "endpoint_url": f"http://127.0.0.1:{link.port}"})}
            for policy in ("order", "lru"):
                server.reset_counts()
                done = subprocess.run([sys.executable, "-c", BOUNDED_CHILD, url, str(bound), policy,
                                       str(EPOCHS_BOUNDED)], capture_output=True, text=True,
                                      env={**child_env, **_fresh_node()}, timeout=1800)
                line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
                if not line:
                    raise RuntimeError(done.stderr[-3000:])
                _, batches, fills, seconds = line[0].split()
                moved = sum(r.nbytes for r in server.requests("GET") if r.path.endswith(".parquet"))
                row = {"policy": policy, "fills": int(fills), "batches": int(batches), "seconds": float(seconds),
                       "shard_bytes_fetched": moved, "per_epoch_of_data": round(moved / size / EPOCHS_BOUNDED, 3),
                       "simulated_belady_fills": simulated["belady"], "simulated_lru_fills": simulated["lru"],
                       "load": round(os.getloadavg()[0], 2)}
                rows.append(row)
                print(f"{policy:<6} {row['fills']} fills ({row['fills'] / simulated['belady']:.2f}x Belady's, "
                      f"{row['fills'] / simulated['lru']:.2f}x LRU's simulated), {moved / 1e6:.0f} MB of shards: "
                      f"{row['per_epoch_of_data']:.2f}x the data per epoch, {row['seconds']} s  [load {row['load']}]",
                      flush=True)
            if "litdata" in args.readers:
                rows.append(_litdata_bounded(server, env, f"http://127.0.0.1:{link.port}"))
    out = new_result("remote-bounded")
    meta = {"rows": 40_000, "shards": shards, "bound_bytes": bound, "epochs": EPOCHS_BOUNDED, "rtt_ms": rtt * 1e3,
            "rate_mbit": args.rate_mbit, "git": _git()}
    out.write_text(json.dumps({**meta, "results": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the object read")
    parser.add_argument("--rate-mbit", type=float, default=400.0, help="the shaped link's bandwidth")
    parser.add_argument("--first-batch", action="store_true", help="dsinspect's cold first batch through the link")
    parser.add_argument("--epoch", action="store_true", help="a cold epoch through the link, with a baseline")
    parser.add_argument("--resume", action="store_true",
                        help="with --epoch: a resume at step RESUME_STEP on a fresh node, to its first batch")
    parser.add_argument("--bounded", action="store_true", help="a bounded cache's fetches against Belady and LRU")
    parser.add_argument("--small", action="store_true",
                        help="small versions (remote_small.py): first batch, epoch, requests, connections, RSS")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per measurement (--small)")
    parser.add_argument("--before", metavar="CHECKOUT",
                        help="--small: also run this checkout's dsinspect (reader dsinspect-before), e.g. a worktree")
    parser.add_argument("--readers", type=lambda v: v.split(","), default=list(EPOCH_READERS),
                        help=f"readers (--epoch; --bounded adds litdata when named), of {','.join(EPOCH_READERS)}")
    parser.add_argument("--rtt-ms", dest="rtts", type=lambda v: [float(x) / 1e3 for x in v.split(",")],
                        default=[0.0, 0.020, 0.080], help="round-trip times to measure (--epoch), e.g. 0,20,80")
    parser.add_argument("--rows", type=int, default=10_000,
                        help="token rows of the version (--first-batch)")
    args = parser.parse_args()
    if args.first_batch:
        return first_batch(args)
    if args.epoch:
        return epoch(args)
    if args.bounded:
        return bounded(args)
    if args.small:
        import remote_small
        if args.readers == list(EPOCH_READERS):
            args.readers = list(remote_small.READERS) + (["dsinspect-before"] if args.before else [])
        return remote_small.run(args)

    import fsspec
    from s3_server import S3Server, s3_environment

    size, rate = args.mib << 20, args.rate_mbit * 1e6 / 8
    links = [("server alone", None), ("link: RTT 0, unlimited", (0.0, None))]
    links += [(f"link: RTT {int(rtt * 1e3)} ms, {args.rate_mbit:g} Mbit/s", (rtt, rate)) for rtt in (0.0, 0.020, 0.080)]
    rows = []
    load_start = os.getloadavg()[0]
    with S3Server() as server, s3_environment(server) as env:
        options = json.loads(env["FSSPEC_S3"])
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir(server.bucket)
        path = f"{server.bucket}/blob"
        fs.pipe(path, os.urandom(size))
        for name, link in links:
            if link is None:
                figures = measure(fsspec.filesystem("s3", skip_instance_cache=True, **options), path, size)
            else:
                with ShapedLink(("127.0.0.1", server.port), rtt=link[0], rate=link[1]) as shaped:
                    fs_link = fsspec.filesystem("s3", skip_instance_cache=True,
                                                **{**options, "endpoint_url": f"http://127.0.0.1:{shaped.port}"})
                    figures = measure(fs_link, path, size)
            row = {"link": name, "rtt_ms": None if link is None else link[0] * 1e3,
                   "rate_mb_s": None if link is None or link[1] is None else round(link[1] / 1e6, 1),
                   **figures, "load": round(os.getloadavg()[0], 2)}
            rows.append(row)
            many = row[f"{PARALLEL}_streams_mb_s"]
            share = "" if not row["rate_mb_s"] else \
                f"  ({row['one_stream_mb_s'] / row['rate_mb_s']:.0%} / {many / row['rate_mb_s']:.0%} of the link)"
            print(f"{name:<32} one stream {row['one_stream_mb_s']:>7.1f} MB/s   {PARALLEL} streams "
                  f"{many:>7.1f} MB/s{share}  [load {row['load']}]", flush=True)
    out = new_result("remote-link")
    out.write_text(json.dumps({"object_bytes": size, "repeats": REPEATS, "parallel": PARALLEL,
                               "load_start": load_start, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A bounded cache and the shuffles that can live with it (issue #35), in one run.

  python benchmarks/bench_bounded_shuffle.py [--rtt-ms 20] [--rate-mbit 400] [--repeats 2] [--global-seconds 180]

moto's S3 server on loopback behind a shaped link (bench_remote.py's server and link), a version of
40,000 token rows (1024 int32 each, 4 KiB) in 40 shards of 1,000, and a cache bound of 25 % of the
version as cached. In a fresh process on a fresh node each, one epoch (batch 32, 0 workers) under
shuffle=global, window (window_shards: the largest that fits with the next window read ahead),
sliding (window_shards: the largest that fits with its read-ahead) and LitData on the same rows in
its own 40 chunks with max_cache_size 25 % of them, and dsinspect's cold epoch under a global shuffle
with no bound (what the engine reads at without one): the shard (chunk) bytes fetched over the
version's (chunk) bytes, requests, samples/s. A global shuffle streams most of the version row
group by row group and does not finish in minutes: it stops after --global-seconds, and its
fetched bytes per epoch are extrapolated from the fraction of the epoch it read.
Beside them the shuffle quality of each order, computed from the order itself (order/quality.py):
spread (mean |id[t+1] - id[t]| / (N/3); 1.0 uniform) and the fraction of the epoch's sample pairs
resident together at some point; for LitData from its own code (a StreamingDataset of the same
chunk layout holding ids, iterated), for Mosaic's py1e and py1br from mosaicml-streaming's own
functions (their block size set to the bound's 10,000 samples; Mosaic refuses a bound below its
working set, so it is not read). Medians of --repeats; the 1-minute load average beside each.
Written to results/bounded-shuffle-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from result_file import new_result

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' S3 server (moto behind a request log)

from bench_remote import _fresh_node, _git, _lit_rows, _token_rows, _tokens_on_server  # noqa: E402
from shaped_link import ShapedLink  # noqa: E402

ROWS, SHARD_ROWS, BATCH, SEED, FRACTION = 40_000, 1_000, 32, 7, 0.25

# One epoch of dsinspect in a fresh process. argv: catalog URL, bound, shuffle, window_shards, seconds
# (stop after: the fraction of the epoch read is reported).
DSINSPECT_CHILD = r"""
import logging, sys, tempfile, time
t0 = time.perf_counter()
from dsinspect.loaders import Catalog, Loader, RunSpec, steps_in_epoch
from dsinspect.loaders.read.cache import ShardCache
url, bound, shuffle, k, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("dsinspect.reader").addHandler(Keep(logging.WARNING))
catalog = Catalog(url)
spec = RunSpec.create(catalog, "tokens", seed=7, batch_size=32, shuffle=shuffle, window_shards=k)
cache = ShardCache(tempfile.mkdtemp(), max_bytes=bound or None)
t = time.perf_counter()
samples = 0
with Loader(spec, catalog=catalog, cache=cache) as loader:
    steps = steps_in_epoch(spec, 0)
    for batch in loader:
        samples += len(batch.indices)
        if time.perf_counter() - t > limit:
            break
    seconds = time.perf_counter() - t
    fills = loader.stats()["cache_misses"]
for w in warnings:
    print("WARNING", w, flush=True)
print("RESULT", samples, steps * 32, round(seconds, 3), fills, flush=True)
"""

# One epoch of LitData in a fresh process: its chunks, its shuffle, max_cache_size = the bound.
# argv: its URL, bound, the endpoint.
LIT_CHILD = r"""
import sys, tempfile, time
import litdata
from litdata.streaming import downloader
downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
url, bound, endpoint = sys.argv[1], int(sys.argv[2]), sys.argv[3]
options = {"endpoint_url": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
           "region_name": "us-east-1"}
t = time.perf_counter()
ds = litdata.StreamingDataset(url, cache_dir=tempfile.mkdtemp(), shuffle=True, seed=7, drop_last=True,
                              storage_options=options, max_cache_size=bound)
loader = litdata.StreamingDataLoader(ds, batch_size=32, num_workers=0, drop_last=True)
samples = sum(len(b["tokens"]) for b in loader)
seconds = time.perf_counter() - t
print("RESULT", samples, samples, round(seconds, 3), 0, flush=True)
"""


def _ids_rows(span):  # litdata.optimize's worker for the id-only twin of the layout (module level: picklable)
    start, stop = span
    for i in range(start, stop):
        yield {"id": i}


def litdata_order() -> list[int]:
    """LitData's epoch-0 order, from its own code: the same chunk layout (40 chunks of 1,000) holding
    each row's id, iterated with the benchmark's seed, shuffle on, 0 workers, drop_last."""
    import litdata

    work = Path(tempfile.mkdtemp(prefix="bench-bounded-ids-"))
    litdata.optimize(fn=_ids_rows, inputs=[(s, s + SHARD_ROWS) for s in range(0, ROWS, SHARD_ROWS)],
                     output_dir=str(work / "ids"), chunk_size=SHARD_ROWS, num_workers=1, verbose=False)
    ds = litdata.StreamingDataset(str(work / "ids"), shuffle=True, seed=SEED, drop_last=True)
    return [int(x["id"]) for x in ds]


def mosaic_orders(block: int) -> dict[str, list[int]]:
    """Mosaic's py1e and py1br orders for the layout, from mosaicml-streaming's own files (loaded
    alone: `import streaming` pulls in transformers and torchvision); {} when it is not installed."""
    import importlib.util
    import types

    spec = importlib.util.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        return {}
    root = Path(list(spec.submodule_search_locations)[0]) / "base" / "shuffle"
    for name in ("streaming", "streaming.base", "streaming.base.shuffle"):
        sys.modules.setdefault(name, types.ModuleType(name))
    out = {}
    import numpy as np
    for algo in ("py1s", "py1e", "py1br"):
        mspec = importlib.util.spec_from_file_location(f"streaming.base.shuffle.{algo}", root / f"{algo}.py")
        module = importlib.util.module_from_spec(mspec)
        sys.modules[mspec.name] = module
        mspec.loader.exec_module(module)
        if algo != "py1s":
            fn = getattr(module, f"get_shuffle_{algo}")
            out[f"mosaic {algo} (block {block:,})"] = fn(np.array([SHARD_ROWS] * (ROWS // SHARD_ROWS)), 1, SEED, 0,
                                                         block).tolist()
    return out


def run_child(code: str, argv: list[str], env: dict, server) -> tuple[list[str], list[str]]:
    server.reset_counts()
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env={**env, **_fresh_node()}, timeout=3600)
    result = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    if not result:
        raise RuntimeError(done.stderr[-3000:])
    return result[0].split()[1:], [x[len("WARNING "):] for x in done.stdout.splitlines() if x.startswith("WARNING")]


def measure(label: str, code: str, argv: list[str], env: dict, server, data_bytes: int, suffix: str) -> dict:
    (samples, epoch_samples, seconds, fills), warnings = run_child(code, argv, env, server)
    samples, epoch_samples, seconds = int(samples), int(epoch_samples), float(seconds)
    gets = [r for r in server.requests("GET") if r.path.endswith(suffix)]
    fetched = sum(r.nbytes for r in gets)
    done = samples / epoch_samples
    row = {"reader": label, "samples": samples, "epoch_fraction": round(done, 4), "seconds": seconds,
           "samples_per_s": round(samples / seconds, 1), "fills": int(fills), "data_gets": len(gets),
           "requests": len(server.requests()), "fetched_bytes": fetched,
           "fetched_per_epoch": round(fetched / data_bytes / done, 3), "warnings": warnings,
           "load": round(os.getloadavg()[0], 2)}
    print(f"  {label:<28} {samples:>6,} samples ({done:6.1%} of the epoch) in {seconds:7.1f} s: "
          f"{row['samples_per_s']:>8,.0f} samples/s  fetched {row['fetched_per_epoch']:6.2f}x the data per epoch"
          f"{' (extrapolated)' if done < 1 else ''}  {len(gets):,} data GETs, {row['requests']:,} requests  "
          f"[load {row['load']}]", flush=True)
    for w in warnings:
        print(f"    warning: {w}", flush=True)
    return row


def median_row(rows: list[dict]) -> dict:
    out = dict(rows[0])
    for key in ("seconds", "samples_per_s", "fetched_per_epoch", "requests", "data_gets", "load"):
        out[key] = statistics.median(r[key] for r in rows)
    out["repeats"] = [{k: r[k] for k in ("seconds", "samples_per_s", "fetched_per_epoch", "requests")} for r in rows]
    return out


def lit_upload(server, env: dict) -> tuple[str, int]:
    """LitData's chunks of the same rows (1,000 a chunk), uploaded: (URL, chunk bytes)."""
    import fsspec
    import litdata
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="bench-bounded-lit-"))
    np.save(work / "rows.npy", _token_rows(ROWS))
    litdata.optimize(fn=_lit_rows, inputs=[(str(work / "rows.npy"), s, s + SHARD_ROWS)
                                           for s in range(0, ROWS, SHARD_ROWS)],
                     output_dir=str(work / "ds"), chunk_size=SHARD_ROWS, num_workers=1, verbose=False)
    fsspec.filesystem("s3", **json.loads(env["FSSPEC_S3"])).put(str(work / "ds"), f"{server.bucket}/lit-bounded",
                                                                recursive=True)
    return server.url("lit-bounded"), sum(c.stat().st_size for c in (work / "ds").glob("*.bin"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--rate-mbit", type=float, default=400.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--global-seconds", type=float, default=180.0, help="where the global shuffle's run stops")
    parser.add_argument("--peers", default="/tmp/bench_peers", help="where litdata is installed (prepended)")
    args = parser.parse_args()
    if args.peers and Path(args.peers).is_dir():
        sys.path.insert(0, args.peers)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (args.peers, os.environ.get("PYTHONPATH")) if p)

    import tempfile as _tempfile

    import numpy as np

    from dsinspect.loaders import Catalog, RunSpec, epoch_order
    from dsinspect.loaders.order.quality import shuffle_quality
    from dsinspect.loaders.read.cache import ShardCache

    rate, rtt = args.rate_mbit * 1e6 / 8, args.rtt_ms / 1e3
    print(f"load at start {os.getloadavg()[0]:.2f}; RTT {args.rtt_ms:.0f} ms, {args.rate_mbit:.0f} Mbit/s", flush=True)
    results: dict = {}
    with _tokens_on_server(ROWS, shard_rows=SHARD_ROWS) as (server, env, url, size):
        version = Catalog(url).resolve("tokens")
        probe = ShardCache(_tempfile.mkdtemp()).open(version, 0)
        cached = probe.nbytes  # every shard holds 1,000 rows of one size
        probe.release()
        shards = len(version.manifest.shards)
        bound = int(FRACTION * shards * cached)
        ratio = cached / version.manifest.shards[0].bytes  # as the reader judges after its first fill
        fits = int(bound // max(int(e.bytes * ratio) for e in version.manifest.shards))
        window_k, sliding_q = max(1, fits // 2), max(2, fits - 2)
        print(f"{shards} shards, {size / 1e6:.1f} MB stored, {cached / 1e6:.2f} MB each as cached; bound "
              f"{bound / 1e6:.1f} MB ({FRACTION:.0%}, {fits} shards): window_shards={window_k} (window), "
              f"{sliding_q} (sliding)", flush=True)
        lit_url, lit_bytes = lit_upload(server, env)
        lit_bound = int(FRACTION * lit_bytes)
        runs = [("dsinspect global", "global", 4), (f"dsinspect window k={window_k}", "window", window_k),
                (f"dsinspect sliding q={sliding_q}", "sliding", sliding_q)]
        unbounded = "dsinspect global, no bound"  # the engine's own cold epoch: what a bound costs beside it
        with ShapedLink(("127.0.0.1", server.port), rtt=rtt, rate=rate) as link:
            endpoint = f"http://127.0.0.1:{link.port}"
            child_env = {**os.environ, **env, "FSSPEC_S3": json.dumps(
                {**json.loads(env["FSSPEC_S3"]), "endpoint_url": endpoint})}
            measured: dict[str, list[dict]] = {}
            for repeat in range(args.repeats):
                print(f"repeat {repeat + 1} of {args.repeats}", flush=True)
                for label, shuffle, k in [*runs, (unbounded, "global", 4)]:
                    if label == "dsinspect global" and repeat:
                        continue  # minutes of streaming: once
                    limit = args.global_seconds if label == "dsinspect global" else 3600
                    measured.setdefault(label, []).append(measure(label, DSINSPECT_CHILD, [
                        url, str(0 if label == unbounded else bound), shuffle, str(k), str(limit)], child_env, server,
                        size, ".parquet"))
                measured.setdefault("litdata", []).append(measure(
                    "litdata", LIT_CHILD, [lit_url, str(lit_bound), endpoint], child_env, server, lit_bytes, ".bin"))
        results["reads"] = {label: median_row(rows) for label, rows in measured.items()}

        orders = {label: epoch_order(RunSpec.create(Catalog(url), "tokens", seed=SEED, batch_size=BATCH,
                                                    shuffle=shuffle, window_shards=k), 0)
                  for label, shuffle, k in runs}
    try:
        orders["litdata"] = np.asarray(litdata_order())
    except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
        print(f"litdata's order: not computed ({e.__class__.__name__}: {e})")
    try:
        mosaic = mosaic_orders(sliding_q * SHARD_ROWS + SHARD_ROWS * 2)
        orders.update({k: np.asarray(v) for k, v in mosaic.items()})
        if not mosaic:
            print("mosaicml-streaming is not installed: py1e / py1br not computed")
    except Exception as e:  # noqa: BLE001
        print(f"mosaic's orders: not computed ({e.__class__.__name__}: {e})")
    rows_of = [SHARD_ROWS] * (ROWS // SHARD_ROWS)
    results["quality"] = {}
    print("\nshuffle quality (epoch 0): spread (1.0 = uniform), pairs that can meet in a batch, most shards resident")
    for label, order in orders.items():
        q = shuffle_quality(order, rows_of)
        results["quality"][label] = {"spread": round(q.spread, 3), "pairs_meet": round(q.pairs_meet, 3),
                                     "most_resident": q.most_resident, "samples": int(len(order))}
        print(f"  {label:<32} spread {q.spread:5.3f}  pairs {q.pairs_meet:5.3f}  resident {q.most_resident:>3}")

    reads = results["reads"]
    slide = reads[f"dsinspect sliding q={sliding_q}"]
    best_peer = reads["litdata"]
    print("\nratios (same run, medians):")
    print(f"  sliding fetched per epoch {slide['fetched_per_epoch']:.2f}x the version (target <= 1.10x)")
    print(f"  sliding samples/s / litdata's: {slide['samples_per_s'] / best_peer['samples_per_s']:.2f}x (target >= 1)")
    for label, row in reads.items():
        print(f"  {label:<28} {row['samples_per_s'] / slide['samples_per_s']:6.2f}x sliding's samples/s, "
              f"{row['fetched_per_epoch'] / slide['fetched_per_epoch']:6.2f}x its bytes per epoch")
    print(f"load at end {os.getloadavg()[0]:.2f}")
    out = new_result("bounded-shuffle")
    out.parent.mkdir(exist_ok=True)
    meta = {"rows": ROWS, "shards": ROWS // SHARD_ROWS, "bound_bytes": bound, "version_bytes": size,
            "litdata_bytes": lit_bytes, "rtt_ms": args.rtt_ms, "rate_mbit": args.rate_mbit, "repeats": args.repeats,
            "git": _git(), "load_at_end": os.getloadavg()}
    out.write_text(json.dumps({**meta, **results}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Small versions from S3 (issue #35), for `bench_remote.py --small`: bench_read's quick data (10,000
token rows: dsinspect 26 MB of zstd Parquet, LitData 41 MB; 2,000 64x64 JPEGs: 2.6 / 3.8 MB) on
moto's server behind the shaped link as an HTTP front end that keeps connections alive
(shaped_link.py, http=True: a new connection costs its handshake's round trip). Per reader,
workload and DataLoader workers (0, 2), fresh processes on fresh nodes, median of `--repeats`: the
first batch and the cold epoch (from before the reader's first object is made, libraries imported),
the requests the server answered, the TCP connections the front end accepted, and the reading
process's peak RSS (VmHWM; its workers' are not in it). Readers: dsinspect (Loader at 0 workers,
TorchLoader at 2), LitData (StreamingDataset + StreamingDataLoader), and the plain fsspec + pyarrow
baseline (every shard in one `cat`, decoded, served from memory; 0 workers). Mosaic when importable.
Written to results/remote-small-<date>.json.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from result_file import new_result

HERE = Path(__file__).resolve().parent

# One fresh process: one reader's cold epoch. argv: reader, workload, workers, JSON of where things are.
# Prints first-batch s, epoch s, samples, peak RSS MB.
CHILD = r"""
import json, os, sys, tempfile, time
import numpy as np
reader, workload, workers, where = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
column = "tokens" if workload == "tokens" else "image"
if reader in ("dsinspect", "baseline"):
    import s3fs  # noqa: F401 - the client library, imported before the clock as LitData's is
    from dsinspect.loaders import Catalog, Loader, RunSpec, epoch_order
    if workers:
        from dsinspect.loaders.pytorch import TorchBatches, TorchLoader
elif reader == "litdata":
    import litdata
    from litdata.streaming import downloader
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
import torch  # every reader's batches are arrays; torch imported before the clock for all
sys.path.insert(0, where["benchmarks"])
from bench_read import decode_many  # after dsinspect: bench_read puts this checkout first on sys.path
samples, first = 0, None


def took(n):
    global samples, first
    samples += n
    first = first or time.perf_counter()


def decode_images(batch):
    return torch.from_numpy(decode_many(batch.table.column("image").to_pylist()))


def lit_collate(items):
    if workload == "tokens":
        return torch.stack([torch.as_tensor(np.asarray(x["tokens"])) for x in items])
    return torch.from_numpy(decode_many([x["image"] for x in items]))


t = time.perf_counter()
if reader == "dsinspect":
    catalog = Catalog(where["catalog"])
    spec = RunSpec.create(catalog, where["address"], seed=7, batch_size=32, shuffle="global")
    if workers == 0:
        transform = (lambda b: decode_many(b.table.column("image").to_pylist())) if workload == "images" else None
        with Loader(spec, catalog=catalog, columns=[column], transform=transform) as loader:
            for batch in loader:
                batch.to_numpy()["tokens"] if workload == "tokens" else batch.transformed
                took(len(batch))
    else:
        ds = (TorchBatches(spec, catalog, columns=["tokens"], dense=["tokens"]) if workload == "tokens"
              else TorchBatches(spec, catalog, columns=["image"], transform=decode_images))
        for batch in TorchLoader(ds, num_workers=workers):
            took(len(batch["tokens"] if workload == "tokens" else batch["transformed"]))
elif reader == "baseline":
    import io
    import pyarrow.parquet as pq
    catalog = Catalog(where["catalog"])
    spec = RunSpec.create(catalog, where["address"], seed=7, batch_size=32, shuffle="global")
    version = catalog.resolve(where["address"])
    paths = [version.shard_path(s) for s in range(len(version.manifest.shards))]
    blobs = catalog.fs.cat(paths)
    table = [pq.read_table(io.BytesIO(blobs[p]), columns=[column]).column(column) for p in paths]
    if workload == "tokens":
        rows = np.concatenate([c.combine_chunks().flatten().to_numpy().reshape(-1, 1024) for c in table])
    else:
        rows = [x for c in table for x in c.to_pylist()]
    order = epoch_order(spec, 0)
    for at in range(0, len(order) - 31, 32):
        picked = order[at:at + 32]
        rows[picked] if workload == "tokens" else decode_many([rows[i] for i in picked])
        took(32)
elif reader == "litdata":
    options = {"endpoint_url": where["endpoint"], "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing", "region_name": "us-east-1"}
    ds = litdata.StreamingDataset(where["litdata"], cache_dir=tempfile.mkdtemp(), shuffle=True, seed=7,
                                  drop_last=True, storage_options=options)
    loader = litdata.StreamingDataLoader(ds, batch_size=32, num_workers=workers, drop_last=True,
                                         collate_fn=lit_collate)
    for batch in loader:
        took(len(batch))
end = time.perf_counter()
with open("/proc/self/status") as status:
    rss_mb = int(next(x for x in status if x.startswith("VmHWM:")).split()[1]) / 1024
print("RESULT", round(first - t, 3), round(end - t, 3), samples, round(rss_mb), flush=True)
"""

READERS = ("dsinspect", "litdata", "baseline")
WORKLOADS = ("images", "tokens")


def run(args) -> int:
    """Upload each reader's files once, then every (workload, workers, reader) `args.repeats` times
    through one link; a table of medians with ratios to the best peer, and the JSON."""
    import fsspec
    from bench_read import paths, prepare
    from s3_server import S3Server, s3_environment
    from shaped_link import ShapedLink

    p = paths("quick")
    prepare("quick", lambda m: print(m, flush=True), readers={"dsinspect", "litdata"})
    ids = json.loads((p["catalog"] / "bench.json").read_text())
    rate, rtt = args.rate_mbit * 1e6 / 8, args.rtts[0] if args.rtts else 0.020
    rows, load_start = [], os.getloadavg()[0]
    with S3Server() as server, s3_environment(server) as env:
        fs = fsspec.filesystem("s3", **json.loads(env["FSSPEC_S3"]))
        fs.mkdir(server.bucket)
        fs.put(str(p["catalog"]), f"{server.bucket}/catalog", recursive=True)
        for w in WORKLOADS:
            fs.put(str(p[f"lit_{w}"] / "ds"), f"{server.bucket}/litdata-{w}", recursive=True)
        with ShapedLink(("127.0.0.1", server.port), rtt=rtt, rate=rate, http=True) as link:
            endpoint = f"http://127.0.0.1:{link.port}"
            child_env = {**os.environ, **env,
                         "FSSPEC_S3": json.dumps({**json.loads(env["FSSPEC_S3"]), "endpoint_url": endpoint})}
            for workload in WORKLOADS:
                where = {"catalog": server.url("catalog"), "address": f"{workload}@{ids[workload]}",
                         "litdata": server.url(f"litdata-{workload}"), "endpoint": endpoint,
                         "benchmarks": str(HERE)}
                for workers in (0, 2):
                    for reader in args.readers:
                        if reader == "baseline" and workers:
                            continue  # an in-memory baseline: its workers would each download everything
                        tree = args.before if reader == "dsinspect-before" else None
                        rows.append(_measure(server, link, reader, workload, workers, where, child_env, args.repeats,
                                             tree))
    _print(rows)
    from bench_remote import _git  # the run's commit, as the other remote benchmarks record it
    out = new_result("remote-small")
    meta = {"rtt_ms": rtt * 1e3, "rate_mbit": args.rate_mbit, "repeats": args.repeats, "git": _git(),
            "load_start": load_start, "load_end": os.getloadavg()[0]}
    out.write_text(json.dumps({**meta, "results": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


def _measure(server, link, reader: str, workload: str, workers: int, where: dict, env: dict, repeats: int,
             tree: str | None = None) -> dict:
    """`tree`: a checkout whose dsinspect the child runs instead (the code before, in the same run)."""
    runs = []
    if tree:
        env = {**env, "PYTHONPATH": os.pathsep.join([tree, env.get("PYTHONPATH", "")])}
    for _ in range(repeats):
        server.reset_counts()
        before = link.stats.connections
        argv = [reader.removesuffix("-before"), workload, str(workers), json.dumps(where)]
        done = subprocess.run([sys.executable, "-c", CHILD, *argv],
                              capture_output=True, text=True, timeout=900,
                              env={**env, "DSINSPECT_CACHE": tempfile.mkdtemp(prefix="bench-small-node-")})
        line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
        if not line:
            raise RuntimeError(f"{reader} {workload} {workers}: {done.stderr[-3000:]}")
        first, epoch, samples, rss = line[0].split()[1:]
        runs.append({"first_batch_s": float(first), "epoch_s": float(epoch), "samples": int(samples),
                     "rss_mb": int(rss), "requests": len(server.requests()),
                     "bytes": sum(r.nbytes for r in server.requests("GET")),
                     "connections": link.stats.connections - before, "load": round(os.getloadavg()[0], 2)})
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    row = {"reader": reader, "workload": workload, "workers": workers, **med,
           "samples_per_s": round(med["samples"] / med["epoch_s"], 1), "runs": runs}
    print(f"{workload:<6} w{workers} {reader:<9} first batch {row['first_batch_s']:6.3f} s  epoch "
          f"{row['epoch_s']:6.3f} s  {row['samples_per_s']:>8,.0f} samples/s  {row['requests']:>4.0f} requests "
          f"{row['connections']:>4.0f} connections  {row['bytes'] / 1e6:5.1f} MB  RSS {row['rss_mb']:.0f} MB  "
          f"[load {row['load']}]", flush=True)
    return row


def _print(rows: list[dict]) -> None:
    """Per (workload, workers): dsinspect against the best peer of the same run."""
    for workload in WORKLOADS:
        for workers in (0, 2):
            here = [r for r in rows if r["workload"] == workload and r["workers"] == workers]
            ours = next((r for r in here if r["reader"] == "dsinspect"), None)
            peers = [r for r in here if not r["reader"].startswith("dsinspect")]
            if ours is None or not peers:
                continue
            fastest = min(peers, key=lambda r: r["first_batch_s"])
            best = max(peers, key=lambda r: r["samples_per_s"])
            print(f"{workload:<6} w{workers}: first batch {ours['first_batch_s']:.3f} s vs {fastest['reader']} "
                  f"{fastest['first_batch_s']:.3f} s ({ours['first_batch_s'] / fastest['first_batch_s']:.2f}x); "
                  f"epoch {ours['samples_per_s'] / best['samples_per_s']:.2f}x {best['reader']}'s rate; "
                  f"requests/connections {ours['requests']:.0f}/{ours['connections']:.0f} vs "
                  + ", ".join(f"{r['reader']} {r['requests']:.0f}/{r['connections']:.0f}"
                              for r in here if r is not ours),
                  flush=True)

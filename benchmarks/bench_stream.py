"""Appending LLM rollouts to a stream while a learner follows it (issue #34): commits/s and rollouts/s with
W concurrent writer processes, and the latency from a commit to a follower seeing it, against a baseline
of the same writers writing Parquet files into a folder (temp file + rename) and a follower listing it.

Each rollout: an id, 128 prompt tokens, 1,024 response tokens (int32), 1,024 sampler log-probs
(float32; `--no-logprobs` leaves them out) and a reward. Each writer appends COMMITS commits of ROWS
rollouts; the follower polls every 5 ms and stamps when it first sees each commit (same machine, so
one clock). Every figure comes from fresh processes started by this one; the load average is printed.

    python benchmarks/bench_stream.py [--writers 8] [--commits 20] [--rows 64] [--no-logprobs]
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

CHILD = r"""
import json, os, sys, time, zlib
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
root, mode, role, name, commits, rows, logprobs = sys.argv[1:8]
commits, rows, logprobs = int(commits), int(rows), logprobs == "1"
fields = [("rollout_id", pa.string()), ("prompt", pa.list_(pa.int32())), ("response", pa.list_(pa.int32())),
          ("reward", pa.float32())] + ([("sampler_logprobs", pa.list_(pa.float32()))] if logprobs else [])
schema = pa.schema(fields)
def batch(a):
    rng = np.random.default_rng([zlib.crc32(name.encode()), a])  # str hash() differs per process
    cols = [pa.array([f"{name}-{a}-{r}" for r in range(rows)]),
            pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * 128),
                                     pa.array(rng.integers(0, 100_000, rows * 128, dtype=np.int32))),
            pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * 1024),
                                     pa.array(rng.integers(0, 100_000, rows * 1024, dtype=np.int32))),
            pa.array(rng.random(rows, dtype=np.float32))]
    if logprobs:
        cols.append(pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * 1024),
                                             pa.array(-rng.random(rows * 1024, dtype=np.float32))))
    return pa.RecordBatch.from_arrays(cols, schema=schema)
if mode == "stream":
    from dsinspect.loaders import Catalog, Field
    from dsinspect.loaders.stream import open_stream
    roles = {"rollout_id": "scalar", "prompt": "tokens", "response": "tokens", "reward": "scalar",
             "sampler_logprobs": "array"}
    catalog = Catalog(root + "/catalog")
    stream = open_stream(catalog, "rollouts", [Field(n, t, roles[n], False) for n, t in fields], key="rollout_id")
else:
    folder = root + "/folder"
    os.makedirs(folder, exist_ok=True)
if role == "write":
    batches = [batch(a) for a in range(commits)]  # made before the clock: the writer's cost, not the data's
    print(json.dumps({"ready": time.time()}), flush=True)
    sys.stdin.readline()  # go
    t = time.time()
    for a, b in enumerate(batches):
        if mode == "stream":
            stream.append(b, writer=name)
        else:
            tmp = f"{folder}/.tmp-{name}-{a}.parquet"
            pq.write_table(pa.Table.from_batches([b]), tmp, compression="zstd")
            os.replace(tmp, f"{folder}/{name}-{a:06d}.parquet")
    print(json.dumps({"start": t, "end": time.time()}), flush=True)
else:  # follow until `commits` commits (all writers') are seen
    seen, seq, known = {}, 0, set()
    while len(seen) < commits:
        if mode == "stream":
            for c in stream.commits(seq):
                seen[c.seq] = time.time()
                seq = c.seq + 1
        else:
            for n in os.listdir(folder):
                if not n.startswith(".") and n not in known:
                    known.add(n)
                    seen[n] = time.time()
        time.sleep(0.005)
    if mode == "stream":
        made = {c.seq: c.created_at for c in stream.commits(0)}
        import datetime as dt
        lag = [seen[s] - dt.datetime.fromisoformat(made[s]).timestamp() for s in seen]
    else:
        lag = [seen[n] - os.stat(f"{folder}/{n}").st_mtime for n in seen]
    print(json.dumps({"lags": lag}), flush=True)
"""


def run(mode: str, args: argparse.Namespace) -> dict:
    root = tempfile.mkdtemp(prefix=f"bench-stream-{mode}-")
    total = args.writers * args.commits
    lp = "0" if args.no_logprobs else "1"
    base = [sys.executable, "-c", CHILD, root, mode]
    if mode == "stream":  # the stream exists before the writers race to open it
        subprocess.run([*base, "write", "setup", "0", "1", lp], input="\n", text=True, check=True, capture_output=True)
    follower = subprocess.Popen([*base, "follow", "f", str(total), str(args.rows), lp], stdout=subprocess.PIPE,
                                text=True)
    writers = [subprocess.Popen([*base, "write", f"w{i}", str(args.commits), str(args.rows), lp],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(args.writers)]
    for w in writers:
        json.loads(w.stdout.readline())  # ready: imports done, data made
    load = os.getloadavg()[0]
    for w in writers:
        w.stdin.write("\n")
        w.stdin.flush()
    spans = [json.loads(w.stdout.readline()) for w in writers]
    for w in writers:
        w.wait()
    lags = json.loads(follower.communicate(timeout=600)[0].splitlines()[-1])["lags"]
    seconds = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    size = sum(f.stat().st_size for f in Path(root).rglob("*.parquet"))
    return {"mode": mode, "seconds": seconds, "commits_per_s": total / seconds,
            "rollouts_per_s": total * args.rows / seconds, "mb_per_s": size / seconds / 1e6,
            "lag_median_ms": statistics.median(lags) * 1e3,
            "lag_p95_ms": sorted(lags)[int(0.95 * (len(lags) - 1))] * 1e3,
            "load_at_start": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--commits", type=int, default=20, help="commits per writer")
    parser.add_argument("--rows", type=int, default=64, help="rollouts per commit")
    parser.add_argument("--no-logprobs", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores); "
          f"{args.writers} writers x {args.commits} commits x {args.rows} "
          f"rollouts of 1,024 tokens{'' if args.no_logprobs else ' + log-probs'}", flush=True)
    rows = [run(mode, args) for mode in ("folder", "stream")]
    print(f"\n{'':<8}{'s':>7}{'commits/s':>11}{'rollouts/s':>12}{'MB/s':>8}{'lag p50 ms':>12}{'lag p95 ms':>12}"
          f"{'load':>6}")
    for r in rows:
        print(f"{r['mode']:<8}{r['seconds']:>7.2f}{r['commits_per_s']:>11.1f}{r['rollouts_per_s']:>12,.0f}"
              f"{r['mb_per_s']:>8.1f}{r['lag_median_ms']:>12.1f}{r['lag_p95_ms']:>12.1f}{r['load_at_start']:>6.2f}")
    print(f"stream / folder rollouts/s: {rows[1]['rollouts_per_s'] / rows[0]['rollouts_per_s']:.2f}; "
          f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""A learner reading a stream of LLM rollouts (issue #34): its read rate against the row path over the same
rows and a folder of Parquet files, and the latency from a commit to the learner having it in a batch.

Rows: COMMITS commits of 64 rollouts, each an id, a policy version, 128 prompt tokens, 1,024 response
tokens (int32), 1,024 sampler log-probs (float32) and a reward (~8.6 KB a rollout); written once,
outside the clock. Read rates, each in a fresh child process (imports before the clock), best of
--repeat:

- learner: `StreamLearner` (batch 64, one rank), every step to the end of the stream; with its run
  record, and without;
- row path: a `Loader` over the stream's snapshot (the same shards), batch 64, stored order, 0 workers:
  cold (empty node cache: the first epoch converts each shard into it) and warm (the second epoch);
- folder: the same rows as one Parquet file per commit in a folder, listed, each read whole in name
  order and sliced into batches of 64 (no checks).

Latency: a writer process appends a commit of 64 rollouts every --interval seconds while a learner in
this process takes batches of 64 (one commit a step); per batch, the time from the commit's own stamp
(`created_at`, same machine) to the batch in the learner's hands. Beside it, the same writer writing
files into a folder (temp file + rename) and a follower listing it every 5 ms.

    python benchmarks/bench_learner.py [--commits 200] [--repeat 3] [--latency-commits 40] [--interval 0.05]
                                       [--dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = 64

MAKE = r"""
import numpy as np, pyarrow as pa
def rollouts(seed, rows, version=0):
    rng = np.random.default_rng(seed)
    def lists(n, values):
        return pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32) * n), values)
    return pa.table({"rollout_id": pa.array([f"{seed}-{r}" for r in range(rows)]),
                     "policy_version": pa.array(np.full(rows, version, np.int64)),
                     "prompt": lists(128, pa.array(rng.integers(0, 100_000, rows * 128, dtype=np.int32))),
                     "response": lists(1024, pa.array(rng.integers(0, 100_000, rows * 1024, dtype=np.int32))),
                     "sampler_logprobs": lists(1024, pa.array(-rng.random(rows * 1024, dtype=np.float32))),
                     "reward": pa.array(rng.random(rows))})
FIELDS = None
def fields():
    from dsinspect.loaders import Field
    return [Field("rollout_id", pa.string(), "scalar", False),
            Field("policy_version", pa.int64(), "scalar", False, options={"rollout": "policy_version"}),
            Field("prompt", pa.list_(pa.int32()), "tokens"), Field("response", pa.list_(pa.int32()), "tokens"),
            Field("sampler_logprobs", pa.list_(pa.float32()), "array"), Field("reward", pa.float64(), "scalar")]
"""

READ = MAKE + r"""
import json, sys, time
root, how = sys.argv[1], sys.argv[2]
import pyarrow.parquet as pq
from dsinspect.loaders import Catalog, Loader, RunSpec
from dsinspect.loaders.stream import StreamLearner, open_stream
catalog = Catalog(root + "/catalog")
rows = steps = 0
if how.startswith("learner"):
    record = root + "/record-" + str(time.time_ns()) if how == "learner-record" else None
    head = open_stream(catalog, "rollouts").head()
    learner = StreamLearner(catalog, "rollouts", 64, record_dir=record)
    start = time.perf_counter()
    for _ in range(head):
        rows += len(learner.next_batch(0))
    learner.close()
elif how.startswith("rows"):
    spec = RunSpec.create(catalog, "rollouts@stream", batch_size=64, shuffle="none")
    loader = Loader(spec, 0, catalog)
    if how == "rows-warm":
        for _ in loader:
            pass
        loader = Loader(spec.replace(), 0, catalog)
    start = time.perf_counter()
    for batch in loader:
        rows += batch.num_rows if hasattr(batch, "num_rows") else len(batch)
else:
    start = time.perf_counter()
    import os
    for name in sorted(os.listdir(root + "/folder")):
        table = pq.read_table(root + "/folder/" + name)
        for offset in range(0, table.num_rows, 64):
            rows += table.slice(offset, 64).num_rows
elapsed = time.perf_counter() - start
print(json.dumps({"rows": rows, "seconds": elapsed}))
"""

WRITE = MAKE + r"""
import os, sys, time
import pyarrow.parquet as pq
root, mode, commits, interval = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
if mode == "stream":
    from dsinspect.loaders import Catalog
    from dsinspect.loaders.stream import open_stream
    stream = open_stream(Catalog(root + "/catalog"), "live", fields(), key="rollout_id")
for c in range(commits):
    table = rollouts(10_000 + c, 64)
    time.sleep(interval)
    if mode == "stream":
        stream.append(table, writer="w")
    else:
        tmp = f"{root}/live/.{c:08d}.tmp"
        pq.write_table(table, tmp)
        os.rename(tmp, f"{root}/live/{c:08d}.parquet")
        print(c, time.time(), flush=True)
"""


def child(code: str, *args: object) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def build(root: Path, commits: int) -> None:
    """The stream (and its snapshot) and the folder: the same rows, outside the clock."""
    env: dict = {}
    exec(MAKE, env)
    import pyarrow.parquet as pq

    from dsinspect.loaders import Catalog
    from dsinspect.loaders.stream import open_stream, snapshot

    stream = open_stream(Catalog(str(root / "catalog")), "rollouts", env["fields"](), key="rollout_id")
    (root / "folder").mkdir()
    for c in range(commits):
        table = env["rollouts"](c, ROWS)
        stream.append(table, writer=f"w{c % 8}")
        pq.write_table(table, root / "folder" / f"{c:08d}.parquet")
    snapshot(stream, tags=["stream"])


def read_rates(root: Path, repeat: int) -> dict:
    results = {}
    for how in ("learner", "learner-record", "rows-cold", "rows-warm", "folder"):
        best = None
        for _ in range(repeat):
            if how == "rows-cold":
                shutil.rmtree(os.environ["DSINSPECT_CACHE"], ignore_errors=True)
            got = child(READ, root, how)
            best = got if best is None or got["seconds"] < best["seconds"] else best
        results[how] = {**best, "rollouts_per_s": best["rows"] / best["seconds"]}
    return results


def learner_latency(root: Path, commits: int, interval: float) -> dict:
    from datetime import datetime

    from dsinspect.loaders import Catalog
    from dsinspect.loaders.stream import StreamLearner, open_stream

    env: dict = {}
    exec(MAKE, env)
    catalog = Catalog(str(root / "catalog"))
    open_stream(catalog, "live", env["fields"](), key="rollout_id")
    writer = subprocess.Popen([sys.executable, "-c", WRITE, str(root), "stream", str(commits), str(interval)])
    learner = StreamLearner(catalog, "live", ROWS, timeout=60)
    waits = []
    for _ in range(commits):
        batch = learner.next_batch(0)
        seen = time.time()
        made = learner.rows.commit(batch.positions[-1][0]).created_at
        waits.append(seen - datetime.fromisoformat(made).timestamp())
    writer.wait()
    (root / "live").mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITE, str(root), "folder", str(commits), str(interval)],
                              stdout=subprocess.PIPE, text=True)
    seen_at, folder = {}, []
    while len(seen_at) < commits:
        for name in os.listdir(root / "live"):
            if name.endswith(".parquet") and name not in seen_at:
                seen_at[name] = time.time()
        time.sleep(0.005)
    for line in writer.stdout:
        c, made = line.split()
        folder.append(seen_at[f"{int(c):08d}.parquet"] - float(made))
    writer.wait()
    return {"learner": _spread(waits), "folder": _spread(folder)}


def _spread(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"p50_ms": 1000 * statistics.median(ordered), "p95_ms": 1000 * ordered[int(0.95 * (len(ordered) - 1))],
            "max_ms": 1000 * ordered[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-commits", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--dir")
    parser.add_argument("--json")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-learner-"))
    os.environ["DSINSPECT_CACHE"] = str(root / "node-cache")
    load = [os.getloadavg()[0]]
    build(root, args.commits)
    rates = read_rates(root, args.repeat)
    latency = learner_latency(root, args.latency_commits, args.interval)
    load.append(os.getloadavg()[0])
    size = sum(p.stat().st_size for p in (root / "folder").iterdir())
    print(f"{args.commits} commits of {ROWS} rollouts ({size / 2**20:.0f} MiB of Parquet), best of {args.repeat}; "
          f"load {load[0]:.2f} -> {load[1]:.2f}")
    base = rates["folder"]["rollouts_per_s"]
    for how, r in rates.items():
        mib = size * r["rows"] / (args.commits * ROWS) / r["seconds"] / 2**20
        print(f"  {how:<15} {r['rollouts_per_s']:>10,.0f} rollouts/s {mib:>7,.0f} MiB/s  "
              f"{r['rollouts_per_s'] / base:5.2f}x folder  "
              f"{r['rollouts_per_s'] / rates['rows-warm']['rollouts_per_s']:5.2f}x row path warm")
    for how, s in latency.items():
        print(f"  commit -> {how:<8} p50 {s['p50_ms']:6.1f} ms  p95 {s['p95_ms']:6.1f} ms  max {s['max_ms']:6.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"rates": rates, "latency": latency, "load": load,
                                               "commits": args.commits, "bytes": size}, indent=2))
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Appending LLM rollouts to a stream while a learner follows it (issue #34): commits/s and rollouts/s with
W concurrent writer processes, and the latency from a commit to a follower seeing it, against a baseline
of the same writers writing the same rows as Parquet files into a folder (temp file + rename) and a
follower listing it.

Each rollout: an id, 128 prompt tokens, 1,024 response tokens (int32), 1,024 sampler log-probs
(float32; `--no-logprobs` leaves them out) and a reward. Each writer appends COMMITS commits of ROWS
rollouts (`--rows 64,256`: each size in turn); the follower polls every 5 ms and stamps when it first
sees each commit (same machine, so one clock). Every figure comes from fresh processes started by this
one, the modes alternating (`--repeat`): `folder`; with `--synced-folder` also `synced`, its files
fsynced before their rename (a folder's writes are otherwise still in the page cache when a run ends:
the kernel writes them back 30 s later, outside the clock); `stream`; with `--before SRC` also
`before`, an older dsinspect's stream in the same run (the same rows, the same conditions). Beside the
rates: the writers' CPU time per commit (user + system, their own processes: what the rate would be on
idle cores), the cores the follower used and the cores everything else used meanwhile (other processes
and the kernel's I/O threads, from /proc/stat), the 1-minute load average as each run started (it
counts the previous run's writers too) and at the end.

    python benchmarks/bench_stream.py [--writers 8] [--commits 20] [--rows 64,256] [--repeat 1] [--no-logprobs]
                                      [--synced-folder] [--before SRC] [--dir DIR] [--json FILE]
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

GOAL = 10_000  # rollouts/s of 1,024 tokens with 8 writers on the 2-core machine (issue #34)

CHILD = r"""
import json, os, resource, sys, time, zlib
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
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def system():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime
streaming = mode not in ("folder", "synced")  # "stream", or "before": an older dsinspect on PYTHONPATH
if streaming:
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
    t, c, k = time.time(), cpu(), system()
    for a, b in enumerate(batches):
        if streaming:
            stream.append(b, writer=name)
        else:
            tmp = f"{folder}/.tmp-{name}-{a}.parquet"
            pq.write_table(pa.Table.from_batches([b]), tmp, compression="zstd")
            if mode == "synced":  # on disk before its name appears, as a stream's shards are before their commit
                fd = os.open(tmp, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            os.replace(tmp, f"{folder}/{name}-{a:06d}.parquet")
    print(json.dumps({"start": t, "end": time.time(), "cpu": cpu() - c, "system": system() - k}), flush=True)
else:  # follow until `commits` commits (all writers') are seen
    seen, seq, known = {}, 0, set()
    while len(seen) < commits:
        if streaming:
            for c in stream.commits(seq):
                seen[c.seq] = time.time()
                seq = c.seq + 1
        else:
            for n in os.listdir(folder):
                if not n.startswith(".") and n not in known:
                    known.add(n)
                    seen[n] = time.time()
        time.sleep(0.005)
    if streaming:
        made = {c.seq: c.created_at for c in stream.commits(0)}
        import datetime as dt
        lag = [seen[s] - dt.datetime.fromisoformat(made[s]).timestamp() for s in seen]
    else:
        lag = [seen[n] - os.stat(f"{folder}/{n}").st_mtime for n in seen]
    print(json.dumps({"lags": lag, "cpu": cpu()}), flush=True)
"""


def run(mode: str, rows: int, args: argparse.Namespace) -> dict:
    """One measurement in fresh processes: W writers and a follower, in a temp folder removed after."""
    root = tempfile.mkdtemp(prefix=f"bench-stream-{mode}-", dir=args.dir)
    try:
        return _measure(root, mode, rows, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _measure(root: str, mode: str, rows: int, args: argparse.Namespace) -> dict:
    total = args.writers * args.commits
    lp = "0" if args.no_logprobs else "1"
    base = [sys.executable, "-c", CHILD, root, mode]
    env = {**os.environ, "PYTHONPATH": args.before} if mode == "before" else None
    if mode not in ("folder", "synced"):  # the stream exists before the writers race to open it
        subprocess.run([*base, "write", "setup", "0", "1", lp], input="\n", text=True, check=True, capture_output=True,
                       env=env)
    follower = subprocess.Popen([*base, "follow", "f", str(total), str(rows), lp], stdout=subprocess.PIPE, text=True,
                                env=env)
    writers = [subprocess.Popen([*base, "write", f"w{i}", str(args.commits), str(rows), lp], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(args.writers)]
    for w in writers:
        json.loads(w.stdout.readline())  # ready: imports done, data made
    load, busy, follower_cpu = os.getloadavg()[0], _busy_seconds(), _process_cpu(follower.pid)
    for w in writers:
        w.stdin.write("\n")
        w.stdin.flush()
    spans = [json.loads(w.stdout.readline()) for w in writers]
    busy, follower_cpu = _busy_seconds() - busy, _process_cpu(follower.pid) - follower_cpu  # a zombie still has it
    for w in writers:
        w.wait()
    followed = json.loads(follower.communicate(timeout=600)[0].splitlines()[-1])
    lags = followed["lags"]
    seconds = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    size = sum(f.stat().st_size for f in Path(root).rglob("*.parquet"))
    return {"mode": mode, "rows": rows, "seconds": seconds, "commits_per_s": total / seconds,
            "rollouts_per_s": total * rows / seconds, "mb_per_s": size / seconds / 1e6,
            "lag_median_ms": statistics.median(lags) * 1e3,
            "lag_p95_ms": sorted(lags)[int(0.95 * (len(lags) - 1))] * 1e3,
            "cpu_ms_per_commit": sum(s["cpu"] for s in spans) / total * 1e3,
            "system_ms_per_commit": sum(s["system"] for s in spans) / total * 1e3,
            "follower_cores": follower_cpu / seconds,
            "other_cores": max(0.0, busy - follower_cpu - sum(s["cpu"] for s in spans)) / seconds,
            "load_at_start": load}


def create_cost(directory: str | None, n: int = 200) -> float:
    """CPU seconds to create (and close) one empty file in a new folder under `directory`: an append
    creates three (shard, index, commit), a file in the folder one. It depends on the file system's
    state, not only its kind: on the 2-core machine ~0.25 ms under /tmp, ~0.01 ms under /var/tmp."""
    root = tempfile.mkdtemp(prefix="bench-stream-probe-", dir=directory)
    try:
        start = time.process_time()
        for i in range(n):
            os.close(os.open(f"{root}/{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return (time.process_time() - start) / n
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _busy_seconds() -> float:
    """CPU seconds the machine spent busy since boot, all processes and the kernel (/proc/stat)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _median(runs: list[dict]) -> dict:
    """The run of median rollouts/s (a real run's figures, not a mix of several)."""
    return sorted(runs, key=lambda r: r["rollouts_per_s"])[(len(runs) - 1) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--commits", type=int, default=20, help="commits per writer (at each commit size)")
    parser.add_argument("--rows", default="64,256", help="rollouts per commit: one size or several, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode, alternating; the median is shown")
    parser.add_argument("--no-logprobs", action="store_true")
    parser.add_argument("--before", metavar="SRC", help="a folder holding an older dsinspect package (`git archive "
                        "REV dsinspect | tar -x -C SRC`): its stream measured too, as mode `before`, in the same run")
    parser.add_argument("--synced-folder", action="store_true", help="also the folder baseline with each file "
                        "fsynced before its rename (mode `synced`): what a stream's durability costs a folder")
    parser.add_argument("--dir", help="where the catalog and the folder are made (default: the temp directory)")
    parser.add_argument("--json", metavar="FILE", help="also write every run's figures here")
    args = parser.parse_args()
    sizes = [int(x) for x in args.rows.split(",")]
    modes = ["folder"] + (["synced"] if args.synced_folder else []) + ["stream"] + (["before"] if args.before else [])
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores); "
          f"{args.writers} writers x {args.commits} commits of {args.rows} rollouts of 1,024 tokens"
          f"{'' if args.no_logprobs else ' + log-probs'}, {args.repeat} run(s) of {', '.join(modes)}; in "
          f"{args.dir or tempfile.gettempdir()}, where creating a file costs {create_cost(args.dir) * 1e6:.0f} us CPU",
          flush=True)
    runs = []
    for rows in sizes:
        for k in range(args.repeat):
            runs += [run(mode, rows, args) for mode in (modes if k % 2 == 0 else modes[::-1])]
    print(f"\n{'':<8}{'rows':>5}{'s':>7}{'commits/s':>11}{'rollouts/s':>12}{'MB/s':>8}{'lag p50 ms':>12}"
          f"{'lag p95 ms':>12}{'CPU ms/commit':>15}{'follower':>9}{'others':>8}{'load':>6}")
    for rows in sizes:
        _report(rows, {mode: [r for r in runs if r["mode"] == mode and r["rows"] == rows] for mode in modes})
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "create_cost_s": create_cost(args.dir),
                                               "runs": runs}, indent=1) + "\n")


def _report(rows: int, by_mode: dict[str, list[dict]]) -> None:
    """One commit size: each mode's median run, then the ratios and every run's rate."""
    shown = {mode: _median(rs) for mode, rs in by_mode.items()}
    for r in shown.values():
        print(f"{r['mode']:<8}{rows:>5}{r['seconds']:>7.2f}{r['commits_per_s']:>11.1f}{r['rollouts_per_s']:>12,.0f}"
              f"{r['mb_per_s']:>8.1f}{r['lag_median_ms']:>12.1f}{r['lag_p95_ms']:>12.1f}"
              f"{r['cpu_ms_per_commit']:>15.2f}{r['follower_cores']:>9.2f}{r['other_cores']:>8.2f}"
              f"{r['load_at_start']:>6.2f}")
    folder, rate = shown["folder"]["rollouts_per_s"], shown["stream"]["rollouts_per_s"]
    idle = os.cpu_count() * rows / shown["stream"]["cpu_ms_per_commit"] * 1e3
    others = "".join(f"; {m} / folder {shown[m]['rollouts_per_s'] / folder:.2f}" for m in ("synced", "before")
                     if m in shown)
    print(f"  {rows} a commit: stream / folder rollouts/s {rate / folder:.2f}{others}; goal {GOAL:,}/s "
          f"{'met' if rate >= GOAL else 'not met'}; on idle cores the writers' CPU allows {idle:,.0f}/s")
    for mode, rs in by_mode.items():
        every = ", ".join(f"{r['rollouts_per_s']:,.0f} (others {r['other_cores']:.2f})" for r in rs)
        print(f"    {mode} runs: {every}")


if __name__ == "__main__":
    main()

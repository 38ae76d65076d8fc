"""How fast `check_log` checks a whole run: 8 ranks x 12,500 steps (10^5 log lines, batch 32),
against a plain read of the same rows and against the old per-line check measured in the same run.
Not a timed test; numbers depend on the machine. Prints, and writes results/check-log-<date>.json:

  (1) check_log of every line, rehash=True (every field re-hashed) and rehash=False (stored hash
      column only): seconds and lines/s, each on a fresh Catalog handle (nothing held in-process;
      the OS page cache is warm, as it is after the job or a first check);
  (2) a plain read of the same batches: a Loader per rank reading its steps in order (the first
      --read-steps of each rank, extrapolated to the whole run; the read also proves the synthetic
      record is what a Loader would log: its batches' fingerprints equal the record's lines);
  (3) the old per-line check (`check_line` through a RowReader per spec, as check_log did before
      audit/hashes.py: plan one batch, read its rows' row groups, re-hash) on --sample consecutive
      lines from the middle of the run, extrapolated to 10^5 lines; and the ratios.

The record is written directly (RunRecorder.begin, then record() per line with the fingerprint of
the planned batch's stored row hashes and per-sample digests): what Loaders with record_dir write,
in ~2 s instead of a 10^5-batch read. The dataset (100,000 rows: int64 id, 64 int32 tokens, a
float; ~30 MiB in 8 shards of 12,500 rows, row groups of 2,048) lives in a temp dir, removed at the
end. The load average is printed before and after. Run: python benchmarks/bench_check_log.py
(~2 min on 2 cores, most of it the old per-line sample)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

TMP = tempfile.mkdtemp(prefix="dsinspect-bench-checklog-")
os.environ["DSINSPECT_CACHE"] = os.path.join(TMP, "cache")  # never the user's shard cache

from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions  # noqa: E402
from dsinspect.loaders.audit.divergence import check_line  # noqa: E402
from dsinspect.loaders.audit.logcheck import check_log  # noqa: E402
from dsinspect.loaders.audit.rows import RowReader  # noqa: E402
from dsinspect.loaders.format.manifest import HASH_COLUMN  # noqa: E402
from dsinspect.loaders.order.plan import plan_steps  # noqa: E402
from dsinspect.loaders.records.recorder import RunRecorder  # noqa: E402
from dsinspect.loaders.records.runlog import batch_fingerprint, read_fingerprints  # noqa: E402

ROWS, SHARD_ROWS, GROUP_ROWS, TOKENS = 100_000, 12_500, 2_048, 64
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens"),
          Field("score", pa.float32(), "scalar")]
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def table(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    tokens = pa.ListArray.from_arrays(pa.array(np.arange(0, TOKENS * n + 1, TOKENS, dtype=np.int32)),
                                      pa.array(rng.integers(0, 50_000, TOKENS * n, dtype=np.int32)))
    return pa.table({"id": pa.array(np.arange(start, start + n, dtype=np.int64)), "tokens": tokens,
                     "score": pa.array(rng.random(n, dtype=np.float32))})


def write_record(cat: Catalog, spec: RunSpec, record: str, steps: int) -> None:
    """What each rank's Loader would log for steps 0..steps-1, from the plans and stored hashes."""
    version = cat.resolve("bench")
    stored = np.concatenate([np.frombuffer(b"".join(t.column(HASH_COLUMN).to_pylist()), np.uint8).reshape(-1, 16)
                             for _, t in version.iter_tables([HASH_COLUMN])])
    for rank in range(spec.world_size):
        recorder = RunRecorder(record, rank, flush_every=4096, samples=True)
        recorder.begin(spec)
        for first in range(0, steps, 1024):
            for plan in plan_steps(spec, range(first, min(steps, first + 1024)), rank):
                hashes = stored[plan.indices]
                recorder.record(plan.step, plan.epoch, batch_fingerprint(hashes), len(hashes), row_hashes=hashes)
        recorder.close()


def timed(fn):
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def commit() -> str:
    """dsinspect's git commit, with "+modified" when its files differ from it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "dsinspect"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+modified" if dirty else "")


def plain_read(cat: Catalog, spec: RunSpec, record: str, steps: int) -> tuple[float, float]:
    """Seconds (wall, CPU) for every rank's Loader to read its first `steps` batches; checks them
    against the record."""
    logged = {(line["step"], line["rank"]): line["fingerprint"] for line in read_fingerprints(record)
              if line["step"] < steps}
    total = cpu = 0.0
    for rank in range(spec.world_size):
        with Loader(spec, rank=rank, catalog=Catalog(cat.url)) as loader:
            seen = 0
            t, c = time.perf_counter(), time.process_time()
            while seen < steps:  # each `for` over a loader yields the rest of one epoch
                for batch in loader:
                    assert batch.fingerprint == logged[(batch.step, rank)], (batch.step, rank)
                    seen += 1
                    if seen == steps:
                        break
            total += time.perf_counter() - t
            cpu += time.process_time() - c
    return total, cpu


def old_per_line(cat: Catalog, spec: RunSpec, record: str, sample: int, rehash: bool) -> tuple[float, float]:
    """Seconds (wall, CPU) for the per-line check of `sample` consecutive lines from the middle of the run."""
    lines = sorted(read_fingerprints(record), key=lambda e: (e["step"], e["rank"]))
    middle = len(lines) // 2
    chosen = lines[middle:middle + sample]
    reader = RowReader(Catalog(cat.url), spec)  # as check_log kept one per spec: its last 64 row groups
    t, c = time.perf_counter(), time.process_time()
    for line in chosen:
        assert check_line(spec, reader, line, None, rehash) is None
    return time.perf_counter() - t, time.process_time() - c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12_500)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--read-steps", type=int, default=2_500, help="steps per rank of the plain read")
    parser.add_argument("--sample", type=int, default=800, help="lines of the old per-line check")
    parser.add_argument("--out", default=os.path.join(RESULTS, f"check-log-{datetime.date.today()}.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    print(f"# bench_check_log  python {platform.python_version()}  {platform.machine()}  cpus {os.cpu_count()}  "
          f"load {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    rng = np.random.default_rng(0)
    cat = Catalog(os.path.join(TMP, "cat"))
    with cat.writer("bench", FIELDS, key="id", options=WriteOptions(shard_rows=SHARD_ROWS,
                                                                    row_group_rows=GROUP_ROWS)) as w:
        for start in range(0, ROWS, 25_000):
            w.write(table(start, 25_000, rng))
    version = w.version
    spec = RunSpec.create(cat, "bench", seed=1, batch_size=32, world_size=args.ranks, shuffle="global")
    record = os.path.join(TMP, "run")
    t_record, _ = timed(lambda: write_record(cat, spec, record, args.steps))
    lines = args.steps * args.ranks
    mib = version.manifest.num_bytes / 2**20
    print(f"dataset {version.num_rows:,} rows, {len(version.manifest.shards)} shards, {mib:.1f} MiB; "
          f"record of {lines:,} lines written in {t_record:.1f} s")

    figures: dict[str, dict[str, float]] = {}
    print("\n(1) check_log of the whole run")
    for rehash in (True, False):
        calls: list[tuple[int, int]] = []
        cpu = time.process_time()
        t, result = timed(lambda: check_log(record, record, catalog=Catalog(cat.url), rehash=rehash,  # noqa: B023
                                            on_progress=lambda done, total: calls.append((done, total))))  # noqa: B023
        assert result.ok and result.checked == lines, result.to_json()
        assert calls[-1] == (lines, lines)
        cpu = time.process_time() - cpu
        figures[f"check_rehash_{rehash}"] = {"seconds": t, "cpu_seconds": cpu, "lines_per_s": lines / t,
                                             "progress_calls": len(calls)}
        print(f"  rehash={str(rehash):5s}  {t:7.2f} s (cpu {cpu:6.2f} s)   {lines / t:10,.0f} lines/s   "
              f"({len(calls)} progress calls)")

    print(f"\n(2) plain read: a Loader per rank, its first {args.read_steps:,} steps, extrapolated to {lines:,} lines")
    t_read, cpu_read = plain_read(cat, spec, record, args.read_steps)
    read_lines = args.read_steps * args.ranks
    read_all, read_all_cpu = t_read / read_lines * lines, cpu_read / read_lines * lines
    figures["plain_read"] = {"seconds_measured": t_read, "cpu_seconds_measured": cpu_read, "lines_measured": read_lines,
                             "seconds_extrapolated": read_all, "cpu_seconds_extrapolated": read_all_cpu,
                             "lines_per_s": read_lines / t_read}
    print(f"  {t_read:7.2f} s (cpu {cpu_read:6.2f} s) for {read_lines:,} batches   {read_lines / t_read:10,.0f} lines/s"
          f"   -> {read_all:7.2f} s (cpu {read_all_cpu:6.2f} s) for {lines:,}")

    print(f"\n(3) the old per-line check, {args.sample} consecutive lines, extrapolated to {lines:,} lines")
    for rehash in (True, False):
        t_old, cpu_old = old_per_line(cat, spec, record, args.sample, rehash)
        per_line, cpu_per_line = t_old / args.sample, cpu_old / args.sample
        new = figures[f"check_rehash_{rehash}"]
        figures[f"old_rehash_{rehash}"] = {
            "seconds_measured": t_old, "cpu_seconds_measured": cpu_old, "lines_measured": args.sample,
            "ms_per_line": per_line * 1e3, "cpu_ms_per_line": cpu_per_line * 1e3,
            "seconds_extrapolated": per_line * lines, "lines_per_s": 1 / per_line,
            "speedup_of_new": per_line * lines / new["seconds"],
            "cpu_speedup_of_new": cpu_per_line * lines / new["cpu_seconds"]}
        print(f"  rehash={str(rehash):5s}  {per_line * 1e3:6.2f} ms/line (cpu {cpu_per_line * 1e3:5.2f})   "
              f"{1 / per_line:8,.0f} lines/s   -> {per_line * lines / 60:6.1f} min for {lines:,}")

    print("\nratios (wall; cpu)")
    for rehash in (True, False):
        new, old = figures[f"check_rehash_{rehash}"], figures[f"old_rehash_{rehash}"]
        print(f"  rehash={str(rehash):5s}  check / plain read {new['seconds'] / read_all:5.2f}; "
              f"{new['cpu_seconds'] / read_all_cpu:5.2f}   old per-line / check {old['speedup_of_new']:6.1f}; "
              f"{old['cpu_speedup_of_new']:6.1f}")
    load_after = os.getloadavg()
    print(f"\nload {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    out = {"meta": {"date": str(datetime.date.today()), "python": platform.python_version(),
                    "machine": platform.machine(), "cpus": os.cpu_count(), "loadavg_before": load_before,
                    "loadavg_after": load_after, "rows": ROWS, "shard_rows": SHARD_ROWS, "row_group_rows": GROUP_ROWS,
                    "dataset_mib": mib, "ranks": args.ranks, "steps": args.steps, "batch_size": 32, "lines": lines,
                    "shuffle": "global", "record_seconds": t_record, "dsinspect_commit": commit()},
           "results": figures}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(0)

"""Replay costs the same at any step, and a diff costs what changed, not what is stored.
Not a timed test; numbers depend on the machine. Prints:

  (a) replay (plan + read the batch's rows + re-hash them) at step 10 vs step 10**7 of a
      global-shuffle run (8 ranks x 32) over a 10**6-row version, and the ratio;
  (b) diff of that version against a 1%-changed version (derive_version: 10**4 rows updated), with
      the changes clustered (one shard rewritten) and scattered (every shard rewritten), against
      reading both versions in full, and the ratios; a diff lists 100 changed rows but counts the
      changed fields of all 10**4 (the `fields` column); "all listed" lists and details every one.

The dataset (10**6 small rows: int64 key, 8 int32 tokens, a float) is written into a temp dir,
removed at the end. Run: python benchmarks/bench_replay_diff.py   (about a minute on 2 cores)
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

TMP = tempfile.mkdtemp(prefix="dsinspect-bench-")
os.environ["DSINSPECT_CACHE"] = os.path.join(TMP, "cache")  # never the user's shard cache

from dsinspect.loaders import Catalog, Field, RunSpec, WriteOptions, derive_version  # noqa: E402
from dsinspect.loaders.audit.replay import replay  # noqa: E402
from dsinspect.loaders.diff.compare import diff  # noqa: E402

ROWS = 1_000_000
SHARD_ROWS = 50_000
CHANGED = ROWS // 100
FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens"),
          Field("score", pa.float32(), "scalar")]


def table(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    tokens = pa.ListArray.from_arrays(pa.array(np.arange(0, 8 * n + 1, 8, dtype=np.int32)),
                                      pa.array(rng.integers(0, 50_000, 8 * n, dtype=np.int32)))
    return pa.table({"id": pa.array(np.arange(start, start + n, dtype=np.int64)), "tokens": tokens,
                     "score": pa.array(rng.random(n, dtype=np.float32))})


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def read_fully(version) -> int:
    return sum(t.num_rows for _, t in version.iter_tables())


def main() -> None:
    print(f"# bench_replay_diff  python {platform.python_version()}  {platform.machine()}  cpus {os.cpu_count()}")
    rng = np.random.default_rng(0)
    cat = Catalog(os.path.join(TMP, "cat"))
    t = time.perf_counter()
    with cat.writer("bench", FIELDS, key="id", options=WriteOptions(shard_rows=SHARD_ROWS, row_group_rows=8192)) as w:
        for start in range(0, ROWS, 100_000):
            w.write(table(start, 100_000, rng))
    v1 = w.version
    print(f"wrote {v1.num_rows:,} rows in {len(v1.manifest.shards)} shards ({v1.manifest.num_bytes / 2**20:.1f} MiB) "
          f"in {time.perf_counter() - t:.1f} s")

    # (a) replay at step 10 and at step 10**7: the same work (plan by arithmetic, read 32 rows)
    spec = RunSpec.create(cat, "bench", seed=1, batch_size=32, world_size=8, shuffle="global")
    for step in (10, 10**7):
        replay(spec, step, 0, cat)  # warm the OS page cache alike for both
    near, far = [], []
    for i in range(15):
        near.append(timed(lambda: replay(spec, 10 + i, i % 8, cat)))  # noqa: B023 (run at once)
        far.append(timed(lambda: replay(spec, 10**7 + i, i % 8, cat)))  # noqa: B023 (run at once)
    r_near, r_far = statistics.median(near), statistics.median(far)
    epoch = replay(spec, 10**7, 0, cat).epoch
    print("\n(a) replay of one rank's batch (32 rows), median of 15")
    print(f"  step 10          {r_near * 1e3:8.1f} ms   (epoch 0)")
    print(f"  step 10**7       {r_far * 1e3:8.1f} ms   (epoch {epoch:,})")
    print(f"  ratio far/near   {r_far / r_near:8.2f}")

    # (b) diff against a 1%-changed version, clustered and scattered, vs reading both in full
    def update_for(keys):
        return {int(k): {"score": -1.0} for k in keys}

    t = time.perf_counter()
    clustered = derive_version(v1, update=update_for(range(300_000, 300_000 + CHANGED)), message="clustered 1%")
    scattered = derive_version(v1, update=update_for(rng.choice(ROWS, CHANGED, replace=False)), message="scattered 1%")
    print(f"\nderived two versions with {CHANGED:,} rows changed in {time.perf_counter() - t:.1f} s")
    print("\n(b) diff vs reading both versions fully (all columns), median of 5")
    for label, v2 in (("clustered", clustered), ("scattered", scattered)):
        fresh = Catalog(cat.url)  # no footers or manifests held over from the last run
        a, b = fresh.version("bench", v1.id), fresh.version("bench", v2.id)
        result = diff(a, b, limit=100)
        assert result.rows.counts["changed"] == CHANGED, result.rows.counts
        assert result.rows.fields == {"score": CHANGED}, result.rows.fields  # exact, though 100 are listed
        diffs, alls, reads = [], [], []
        for _ in range(5):  # interleaved, so a busy spell on the machine lands on all alike
            diffs.append(timed(lambda: diff(Catalog(cat.url).version("bench", v1.id),
                                            Catalog(cat.url).version("bench", v2.id),  # noqa: B023 (run at once)
                                            limit=100)))
            alls.append(timed(lambda: diff(Catalog(cat.url).version("bench", v1.id),
                                           Catalog(cat.url).version("bench", v2.id),  # noqa: B023 (run at once)
                                           limit=None)))
            reads.append(timed(lambda: (
                read_fully(Catalog(cat.url).version("bench", v1.id)),
                read_fully(Catalog(cat.url).version("bench", v2.id)))))  # noqa: B023 (run at once)
        d, every, full = statistics.median(diffs), statistics.median(alls), statistics.median(reads)
        shared = len(result.shards.shared)
        print(f"  {label:9s}  shards shared {shared:2d}/{len(v1.manifest.shards)}  "
              f"rows read {result.rows.rows_read:>9,}  fields {result.rows.fields}  "
              f"diff {d:6.2f} s   (all {CHANGED:,} listed {every:6.2f} s)   read both {full:6.2f} s   "
              f"ratio {d / full:5.2f}")


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(0)

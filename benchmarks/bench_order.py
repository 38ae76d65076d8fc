"""How the cost of finding and resuming a batch grows with how far into the run it lies: it should
not. Prints two tables (not a timed test; numbers depend on the machine):

  (a) plan_batch (what batch_indices and replay call) at step 10 .. 10**9 on a 10**8-row spec in
      10**4 shards, for global and window shuffles and a two-source mixture; pure, no data.
  (b) Loader resume (load_state_dict + the first batch) at 1%, 50% and 99% of an epoch on a real
      catalog of 200k rows x 256 int32 tokens written into a temp dir.

Run: python benchmarks/bench_order.py   (about 15 s on 2 cores; the temp catalog and cache are removed)
"""

from __future__ import annotations

import datetime as dt
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

from dsinspect.loaders import Catalog, Field, Loader, LoaderState, RunSpec, WriteOptions  # noqa: E402
from dsinspect.loaders.order.plan import plan_batch, steps_in_epoch  # noqa: E402
from dsinspect.loaders.order.spec import Source  # noqa: E402

STEPS = [10, 10**3, 10**5, 10**7, 10**9]
REPEATS = 101


def interleaved_medians(fn, points: list, repeats: int) -> list[float]:
    """Median seconds of fn(point, i) per point, the points taken in turn within each repeat, so
    a busy spell on the machine lands on every point alike instead of on one."""
    times: dict = {p: [] for p in points}
    for i in range(repeats):
        for p in points:
            t0 = time.perf_counter()
            fn(p, i)
            times[p].append(time.perf_counter() - t0)
    return [statistics.median(times[p]) for p in points]


# -- (a) pure planning -----------------------------------------------------------------------------

def pure_specs(seed: int) -> dict[str, RunSpec]:
    one = (Source("big", "b" * 64, (10_000,) * 10_000),)
    mix = (Source("web", "w" * 64, (10_000,) * 6_000, 0.7), Source("code", "c" * 64, (10_000,) * 4_000, 0.3))
    common = dict(seed=seed, batch_size=32, world_size=64)
    return {"global": RunSpec(one, shuffle="global", **common),
            "window (16 shards)": RunSpec(one, shuffle="window", window_shards=16, **common),
            "mixture 0.7/0.3, global": RunSpec(mix, shuffle="global", mixture_block=1024, **common),
            "global, 1 shard of 1e8": RunSpec((Source("big", "b" * 64, (10**8,)),), shuffle="global", **common)}


def bench_pure() -> None:
    print(f"(a) plan_batch cost by step (median of {REPEATS} calls, microseconds): 10**8 rows in 10**4 shards, "
          "64 ranks x 32, rank 63")
    print("    cold: another seed for every call (nothing cached: shard layout, mixture block), so it also averages")
    print("    over keys, whose cycle-walk counts differ; warm: one spec, steps s and s+1 in turn, so one key per")
    print("    step: its walk count shows (up to about +-40%), compare the cold rows for the trend")
    names = list(pure_specs(0))
    cold = {(step, i): pure_specs(1000 + i * len(STEPS) + j) for j, step in enumerate(STEPS) for i in range(REPEATS)}
    warm = pure_specs(0)
    print(f"    {'spec':<24} {'':<5}" + "".join(f"{f'step {s:.0e}':>12}" for s in STEPS) + f"{'1e9 / 10':>10}")
    for name in names:
        for mode in ("cold", "warm"):
            if mode == "cold":
                cells = interleaved_medians(
                    lambda step, i: plan_batch(cold[step, i][name], step, 63),  # noqa: B023 (run at once)
                    STEPS, REPEATS)
            else:
                for step in STEPS:
                    plan_batch(warm[name], step, 63)  # fill the caches of this epoch and block
                    plan_batch(warm[name], step + 1, 63)
                cells = interleaved_medians(
                    lambda step, i: plan_batch(warm[name], step + i % 2, 63),  # noqa: B023 (run at once)
                    STEPS, REPEATS)
            cells = [c * 1e6 for c in cells]
            print(f"    {name if mode == 'cold' else '':<24} {mode:<5}" + "".join(f"{c:>12.0f}" for c in cells)
                  + f"{cells[-1] / cells[0]:>9.2f}x")


# -- (b) loader resume ---------------------------------------------------------------------------------

ROWS, TOKENS = 200_000, 256


def write_catalog() -> tuple[Catalog, str, float]:
    cat = Catalog(os.path.join(TMP, "catalog"))
    rng = np.random.default_rng(0)
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens")]
    t0 = time.perf_counter()
    with cat.writer("tokens", fields, options=WriteOptions(shard_rows=10_000)) as w:
        for start in range(0, ROWS, 20_000):
            tok = rng.integers(0, 50_000, size=(20_000, TOKENS), dtype=np.int32)
            offsets = pa.array(np.arange(0, tok.size + 1, TOKENS, dtype=np.int32))
            w.write(pa.table({"id": pa.array(np.arange(start, start + 20_000), pa.int64()),
                              "tokens": pa.ListArray.from_arrays(offsets, pa.array(tok.ravel()))}))
    return cat, w.version.id, time.perf_counter() - t0


def resume_time(spec: RunSpec, cat: Catalog, state: dict, rank: int) -> float:
    with Loader(spec, rank, cat, prefetch=0) as loader:
        t0 = time.perf_counter()
        loader.load_state_dict(state)
        batch = next(iter(loader))
        elapsed = time.perf_counter() - t0
    assert len(batch) == spec.batch_size and batch.step == LoaderState.from_json(state).step
    return elapsed


def bench_resume() -> None:
    cat, version, seconds = write_catalog()
    print(f"\n(b) Loader resume: {ROWS:,} rows x {TOKENS} int32 tokens in {ROWS // 10_000} shards "
          f"(written in {seconds:.1f} s); 8 ranks x 32, rank 3, prefetch 0; median of 11, ms")
    for shuffle in ("global", "window"):
        spec = RunSpec.create(cat, f"tokens@{version[:12]}", seed=1, batch_size=32, world_size=8,
                              shuffle=shuffle, window_shards=4)
        per_epoch = steps_in_epoch(spec, 0)
        steps = {frac: per_epoch + int(frac * per_epoch) for frac in (0.01, 0.5, 0.99)}  # inside epoch 1
        t0 = time.perf_counter()
        with Loader(spec, 3, cat, prefetch=0) as loader:  # untimed: fills the node-local shard cache
            for step in steps.values():
                loader.batch_at(step)
        print(f"    {shuffle}: {per_epoch} steps per epoch; first reads (shard cache fill), untimed: "
              f"{time.perf_counter() - t0:.1f} s")
        states = {frac: LoaderState.at(spec, step, 3).to_json() for frac, step in steps.items()}
        medians = interleaved_medians(
            lambda frac, i: resume_time(spec, cat, states[frac], 3), list(steps), 11)  # noqa: B023 (run at once)
        for (frac, step), seconds in zip(steps.items(), medians):
            print(f"      {frac:>4.0%} of epoch 1 (step {step:>5}): {seconds * 1e3:7.2f} ms  "
                  f"({seconds / medians[0]:4.2f}x the 1% figure)")


def main() -> None:
    cores = os.cpu_count()
    print(f"dsinspect order/resume benchmark  {dt.datetime.now().isoformat(timespec='seconds')}  "
          f"{platform.machine()}, {cores} cores, Python {platform.python_version()}, numpy {np.__version__}\n")
    t0 = time.perf_counter()
    try:
        bench_pure()
        bench_resume()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())

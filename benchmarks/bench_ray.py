"""Ray Data: dsinspect's reader and writer against Ray's own Parquet reader and writer, on the same
rows, in one run on a local Ray instance. Not a test: prints a table, writes
`benchmarks/results/ray-<date>.json`.

  python benchmarks/bench_ray.py                # 200,000 rows of 1,024 int32 tokens (~800 MB)
  python benchmarks/bench_ray.py --rows 20000   # a smoke run

- read: a full pass over the version (`iter_batches`, pyarrow batches of 1,024 rows), tokens and id:
  `read_version` (each shard fetched, sha256-checked, read) against `ray.data.read_parquet` over the
  same shard files (nothing checked);
- write: the rows, from `ray.data.from_arrow`, through a `map_batches` that adds one to every token
  (a stand-in for tokenising): `write_version` (staging pieces, then shards: the rows written twice,
  one commit, an id independent of the workers) against `write_parquet` to a folder.
Both with 1 and 2 CPUs' worth of tasks (`concurrency`). Rows/s and ratios to Ray's own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from result_file import new_result

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
SEQ = 1024


def rows_table(n: int) -> pa.Table:
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 50_000, (n, SEQ), dtype=np.int32)
    return pa.table({"id": pa.array(np.arange(n), pa.int64()),
                     "tokens": pa.FixedSizeListArray.from_arrays(pa.array(tokens.ravel()), SEQ)})


def full_pass(ds) -> int:
    return sum(b.num_rows for b in ds.iter_batches(batch_size=1024, batch_format="pyarrow"))


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def bump(batch: pa.Table) -> pa.Table:
    """The write pipeline's work: one added to every token (a stand-in for tokenising)."""
    flat = batch["tokens"].combine_chunks().flatten()
    return batch.set_column(1, "tokens", pa.FixedSizeListArray.from_arrays(pc.add(flat, 1), SEQ))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    import ray

    from dsinspect.loaders import Catalog, Field, WriteOptions
    from dsinspect.loaders.raydata import read_version, write_version

    work = Path(tempfile.mkdtemp(prefix="dsinspect-bench-ray-"))
    os.environ["DSINSPECT_CACHE"] = str(work / "cache")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "DSINSPECT_CACHE": str(work / "cache")}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        table = rows_table(args.rows)
        fields = [Field("id", pa.int64(), "scalar"), Field("tokens", table.schema.field("tokens").type, "tokens")]
        catalog = Catalog(str(work / "catalog"))
        version = catalog.write_version("t", table, fields, options=WriteOptions(shard_rows=max(1, args.rows // 16)))
        files = [version.catalog.fs._strip_protocol(version.shard_path(s)) for s in range(len(version.manifest.shards))]
        result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "rows": args.rows,
                  "load_before": os.getloadavg(), "read": {}, "write": {}}
        full_pass(ray.data.range(10))  # Ray's workers started before anything is timed
        for concurrency in (1, 2):
            ours, n1 = timed(full_pass, read_version(version, concurrency=concurrency))
            theirs, n2 = timed(full_pass, ray.data.read_parquet(files, concurrency=concurrency))
            assert n1 == n2 == args.rows, (n1, n2)
            result["read"][concurrency] = {"dsinspect": args.rows / ours, "ray_read_parquet": args.rows / theirs}
            ds = ray.data.from_arrow(table).repartition(8).map_batches(bump, batch_format="pyarrow",
                                                                       concurrency=concurrency)
            ours, written = timed(write_version, ds, Catalog(str(work / f"written-{concurrency}")), "t",
                                  concurrency=concurrency)
            theirs, _ = timed(ds.write_parquet, str(work / f"parquet-{concurrency}"), concurrency=concurrency)
            result["write"][concurrency] = {"dsinspect": args.rows / ours, "ray_write_parquet": args.rows / theirs,
                                            "version": written.id}
        result["load_after"] = os.getloadavg()
        same = len({w["version"] for w in result["write"].values()}) == 1
        print(f"rows {args.rows:,} x {SEQ} int32; load {result['load_before'][0]:.2f} -> "
              f"{result['load_after'][0]:.2f}; version ids equal over concurrency: {same}")
        for kind, peer in (("read", "ray_read_parquet"), ("write", "ray_write_parquet")):
            for concurrency, r in result[kind].items():
                print(f"  {kind:5s} concurrency {concurrency}: dsinspect {r['dsinspect']:9,.0f} rows/s, "
                      f"Ray's own {r[peer]:9,.0f} rows/s ({r['dsinspect'] / r[peer]:.2f}x)")
        path = new_result("ray")
        path.write_text(json.dumps(result, indent=2))
        print(f"wrote {path.relative_to(REPO)}")
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

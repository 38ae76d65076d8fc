"""Query latency over a 10^6-row version: `dsinspect query` (DuckDB over the shards and the derived
values' sidecars, shut in) against DuckDB reading the same Parquet files itself and pyarrow compute
over them, in one run, on the same data. Not a test: prints a table, writes
`benchmarks/results/query-<date>.json`.

  python benchmarks/bench_query.py            # 10^6 rows (~1 min to write the data the first time)
  python benchmarks/bench_query.py --rows 100000

The version: `id`, `label` (7 values), `lang` (5 values), `text` (20-200 characters), `tokens`
(0-512 int32, mean ~256; ~1 GB). Figures:
- derive: making every shard's sidecar (token counts, text lengths), once per version (`dsinspect
  query`'s first run), per 10^6 rows;
- cold: a fresh process's first answer with the sidecars already made (imports, the catalog, DuckDB,
  the view; the page cache warm: the machine cannot drop it);
- warm: the same query again in that process (median of 5);
- stats: `dsinspect stats`' statistics of every column (nulls, distinct values, histograms) in that
  process;
- peers, warm: DuckDB's own `read_parquet` over the shards with the token count computed from the
  tokens (`len(tokens)`: no sidecar), and pyarrow compute (read the columns, filter).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from result_file import new_result

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
ROOT = Path(os.environ.get("DSINSPECT_BENCH_DIR", "/tmp/dsinspect-bench"))
WHERE = "label = 3 AND lang = 'ja' AND tokens_len BETWEEN 100 AND 140"
QUERIES = {  # name -> (where over the view, the same in DuckDB's own SQL over the files)
    "filter": (WHERE, "label = 3 AND lang = 'ja' AND len(tokens) BETWEEN 100 AND 140"),
    "order": ("text_chars > 190", None),
    "group": (None, None),
}
REPEATS = 5


def write_version(rows: int) -> tuple[str, str]:
    from dsinspect.loaders import Catalog, Field, WriteOptions

    url = str(ROOT / f"query-catalog-{rows}")
    catalog = Catalog(url)
    if "q" in catalog.datasets():
        return url, catalog.resolve("q").address
    rng = np.random.default_rng(11)
    chunk = 100_000
    fields = [Field("id", pa.int64(), "scalar"), Field("label", pa.int8(), "scalar"),
              Field("lang", pa.string(), "scalar"), Field("text", pa.string(), "text"),
              Field("tokens", pa.list_(pa.int32()), "tokens")]
    writer = catalog.writer("q", fields, options=WriteOptions(shard_rows=100_000))
    words = np.array(["arrow", "duck", "parquet", "token", "image", "batch", "shard", "rank"])
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        lengths = rng.integers(0, 513, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        text = [" ".join(words[rng.integers(0, 8, k)]) for k in rng.integers(3, 30, n)]
        writer.write(pa.table({
            "id": pa.array(np.arange(start, start + n), pa.int64()),
            "label": pa.array(rng.integers(0, 7, n), pa.int8()),
            "lang": pa.array(np.array(["en", "ja", "ko", "de", "fr"])[rng.integers(0, 5, n)]),
            "text": pa.array(text),
            "tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 50_000, offsets[-1],
                                                                                           dtype=np.int32)))}))
    return url, writer.commit().address


def child(url: str, address: str) -> dict:
    """A fresh process: the first answer (cold), then the same query again (warm)."""
    started = time.perf_counter()
    from dsinspect.inspect.query import VersionQuery
    from dsinspect.loaders import Catalog

    version = Catalog(url).resolve(address)
    out = {}
    with VersionQuery(version) as q:
        opened = time.perf_counter()
        first = q.where(WHERE, limit=50, count=True)
        out["cold_s"] = time.perf_counter() - started
        out["open_s"] = opened - started
        out["matches"] = first.total
        for name, (where, _) in QUERIES.items():
            times = []
            for _ in range(REPEATS):
                t = time.perf_counter()
                if name == "group":
                    q.sql("SELECT lang, count(*), avg(tokens_len) FROM v GROUP BY lang")
                elif name == "order":
                    q.where(where, order_by="text_chars DESC", limit=50, count=True)
                else:
                    q.where(where, limit=50, count=True)
                times.append(time.perf_counter() - t)
            out[f"warm_{name}_s"] = statistics.median(times)
        from dsinspect.inspect.stats import version_stats
        t = time.perf_counter()
        version_stats(q)
        out["stats_s"] = time.perf_counter() - t  # every column: nulls, distinct, values, histograms
    return out


def peers(url: str, address: str, expected: int) -> dict:
    import duckdb

    from dsinspect.loaders import Catalog

    version = Catalog(url).resolve(address)
    files = [version.shard_path(s) for s in range(len(version.manifest.shards))]
    con = duckdb.connect()
    sql = (f"SELECT id FROM read_parquet({files!r}) WHERE {QUERIES['filter'][1]} ORDER BY id LIMIT 50")
    count = f"SELECT count(*) FROM read_parquet({files!r}) WHERE {QUERIES['filter'][1]}"
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        con.execute(sql).fetchall()
        n = con.execute(count).fetchone()[0]
        times.append(time.perf_counter() - t)
    assert n == expected, (n, expected)
    arrow = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        got = 0
        for f in files:
            table = pq.read_table(f, columns=["label", "lang", "tokens"])
            length = pc.list_value_length(table["tokens"])
            mask = pc.and_(pc.and_(pc.equal(table["label"], 3), pc.equal(table["lang"], "ja")),
                           pc.and_(pc.greater_equal(length, 100), pc.less_equal(length, 140)))
            got += pc.sum(mask).as_py() or 0
        arrow.append(time.perf_counter() - t)
    assert got == expected, (got, expected)
    return {"duckdb_read_parquet_s": statistics.median(times), "pyarrow_compute_s": statistics.median(arrow)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    ROOT.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    url, address = write_version(args.rows)
    print(f"data: {address} at {url} ({time.perf_counter() - t:.1f} s)")
    for sidecar in Path(url).rglob("derived"):  # derive anew: the figure of a first query
        subprocess.run(["rm", "-rf", str(sidecar)], check=True)
    load = os.getloadavg()
    run = [sys.executable, __file__, "--child", url, address]
    first = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    again = json.loads(subprocess.run(run, capture_output=True, text=True, check=True).stdout)
    peer = peers(url, address, again["matches"])
    per_million = 1e6 / args.rows
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "rows": args.rows,
              "load_before": load, "load_after": os.getloadavg(), "derive_per_1e6_s": (first["cold_s"]) * per_million,
              "first_query_with_derive": first, "fresh_process": again, **peer}
    print(f"rows {args.rows:,}; load {load[0]:.2f} -> {result['load_after'][0]:.2f}; matches {again['matches']:,}")
    print(f"first query of the version (derived values made): {first['cold_s']:.2f} s")
    print(f"a fresh process, sidecars made: first answer {again['cold_s']:.3f} s (opening {again['open_s']:.3f} s)")
    for name in QUERIES:
        print(f"  warm {name:6s}: {again[f'warm_{name}_s'] * 1000:7.1f} ms")
    print(f"  statistics of every column (dsinspect stats, sidecars made): {again['stats_s']:.2f} s")
    base = again["warm_filter_s"]
    print(f"peers, same filter + count, warm: DuckDB read_parquet {peer['duckdb_read_parquet_s'] * 1000:.1f} ms "
          f"({peer['duckdb_read_parquet_s'] / base:.1f}x dsinspect's time), pyarrow compute "
          f"{peer['pyarrow_compute_s'] * 1000:.1f} ms ({peer['pyarrow_compute_s'] / base:.1f}x)")
    out = new_result("query")
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()

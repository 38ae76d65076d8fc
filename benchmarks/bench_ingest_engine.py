"""Ingest engines compared: inline (this process) against the process pool with 1 and 2 workers, over
source kinds (JSONL, Parquet, WebDataset tars of binary members), total sizes and numbers of parts. Finds where
the pool starts to pay for its spawned workers (each imports dsinspect and pyarrow) on this machine; the `auto` engine's
thresholds (`dsinspect/loaders/ingest/engine_choice.py`) come from these figures. Not a test.

For every (kind, size, parts) the engines run in turn, `--repeats` times, each into a fresh catalog
(best wall time kept; CPU time of this process and its children alongside). The version ids of all
engines must be equal (checked). Prints a table with pool/inline ratios (< 1: the pool is faster)
and what `auto` picks; writes benchmarks/results/ingest-engine-<date>.json.

Run: python benchmarks/bench_ingest_engine.py            (~12 min on 2 shared cores)
     python benchmarks/bench_ingest_engine.py --quick    (small sizes only, ~1 min)
     python benchmarks/bench_ingest_engine.py --kinds webdataset --sizes 16,64,256   (~3 min)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq
from result_file import new_result

from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.engine_choice import choose_engine
from dsinspect.loaders.store.catalog import Catalog

MB = 1 << 20
ENGINES = [("inline", None), ("pool", 1), ("pool", 2)]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def write_jsonl(directory: Path, total_mb: int, parts: int) -> Path:
    """`parts` files of ~total/parts MB: an id, ~400 bytes of text, 128 token ids, a float."""
    directory.mkdir(parents=True)
    rng = random.Random(0)
    per, n = total_mb * MB // parts, 0
    for p in range(parts):
        with open(directory / f"part-{p:03d}.jsonl", "w") as f:
            size = 0
            while size < per:
                row = {"id": n, "text": " ".join(rng.choice(WORDS) for _ in range(64)),
                       "input_ids": [rng.randrange(50_000) for _ in range(128)], "score": n / 7}
                line = json.dumps(row) + "\n"
                f.write(line)
                size, n = size + len(line), n + 1
    return directory


def write_parquet(jsonl: Path, directory: Path) -> Path:
    """The same rows as Parquet files (zstd), one per JSONL file."""
    directory.mkdir(parents=True)
    for src in sorted(jsonl.glob("*.jsonl")):
        pq.write_table(pajson.read_json(src), directory / (src.stem + ".parquet"), compression="zstd")
    return directory


def write_webdataset(directory: Path, total_mb: int, parts: int) -> Path:
    """`parts` tars of ~total/parts MB: samples of 48 KiB of random bytes (`.bin`) and a `.json`."""
    import io
    import tarfile

    directory.mkdir(parents=True)
    rng = random.Random(0)
    per, n = total_mb * MB // parts, 0
    for p in range(parts):
        with tarfile.open(directory / f"shard-{p:03d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            size = 0
            while size < per:
                for ext, data in (("bin", rng.randbytes(48 << 10)), ("json", json.dumps({"n": n}).encode())):
                    info = tarfile.TarInfo(f"{n:09d}.{ext}")
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, io.BytesIO(data))
                    size += len(data) + 1024
                n += 1
    return directory


def measure(source: Path, engine: str, workers: int | None, root: Path) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (this process and its children) and the version id of one ingest."""
    catalog = root / f"catalog-{engine}-{workers}"
    shutil.rmtree(catalog, ignore_errors=True)
    before = _cpu()
    started = time.perf_counter()
    result = run_ingest(Catalog(str(catalog)), str(source), "bench", engine=engine, workers=workers)
    wall = time.perf_counter() - started
    cpu = _cpu() - before
    shutil.rmtree(catalog, ignore_errors=True)
    return wall, cpu, result.version.id


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_case(source: Path, repeats: int, root: Path) -> dict:
    best: dict[str, tuple[float, float]] = {}
    ids = set()
    for _ in range(repeats):
        for engine, workers in ENGINES:  # interleaved, so a busy spell lands on every engine alike
            wall, cpu, vid = measure(source, engine, workers, root)
            name = engine if workers is None else f"{engine}{workers}"
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
            ids.add(vid)
    if len(ids) != 1:
        raise SystemExit(f"{source}: engines gave different version ids: {sorted(ids)}")
    return {name: {"wall": round(w, 3), "cpu": round(c, 3)} for name, (w, c) in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16,64,160", help="total source sizes in MB (comma-separated)")
    ap.add_argument("--parts", default="2,8", help="numbers of parts (comma-separated)")
    ap.add_argument("--kinds", default="jsonl,parquet", help="of jsonl, parquet, webdataset")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="sizes 2,8 MB only")
    args = ap.parse_args()
    sizes = [2, 8] if args.quick else [int(s) for s in args.sizes.split(",")]
    parts_list = [int(p) for p in args.parts.split(",")]
    kinds = args.kinds.split(",")
    root = Path(tempfile.mkdtemp(prefix="dsinspect-bench-ingest-"))
    load_before = os.getloadavg()
    rows = []
    print(f"{'kind':<8} {'MB':>5} {'parts':>5} {'inline s':>9} {'pool1 s':>8} {'pool2 s':>8} "
          f"{'pool1/in':>8} {'pool2/in':>8}  auto")
    try:
        for size in sizes:
            for parts in parts_list:
                sources = {}
                if {"jsonl", "parquet"} & set(kinds):
                    jsonl = sources["jsonl"] = write_jsonl(root / f"src-{size}-{parts}" / "jsonl", size, parts)
                if "parquet" in kinds:
                    sources["parquet"] = write_parquet(jsonl, root / f"src-{size}-{parts}" / "parquet")
                if "webdataset" in kinds:
                    sources["webdataset"] = write_webdataset(root / f"src-{size}-{parts}" / "wds", size, parts)
                for kind in kinds:
                    src = sources[kind]
                    part_bytes = [f.stat().st_size for f in sorted(src.iterdir())]
                    times = run_case(src, args.repeats, root)
                    auto = choose_engine(kind, part_bytes, cpus=os.cpu_count() or 1)
                    r1 = times["pool1"]["wall"] / times["inline"]["wall"]
                    r2 = times["pool2"]["wall"] / times["inline"]["wall"]
                    print(f"{kind:<8} {sum(part_bytes) / MB:>5.1f} {parts:>5} {times['inline']['wall']:>9.2f} "
                          f"{times['pool1']['wall']:>8.2f} {times['pool2']['wall']:>8.2f} "
                          f"{r1:>8.2f} {r2:>8.2f}  {auto}",
                          flush=True)
                    rows.append({"kind": kind, "bytes": sum(part_bytes), "parts": parts, "times": times,
                                 "pool1_over_inline": round(r1, 3), "pool2_over_inline": round(r2, 3), "auto": auto})
                shutil.rmtree(root / f"src-{size}-{parts}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "cpus": os.cpu_count(),
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "python": sys.version.split()[0],
            "pyarrow": pa.__version__, "repeats": args.repeats}
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} (on {os.cpu_count()} CPUs)")
    tail = ("-quick" if args.quick else "") + ("" if args.kinds == "jsonl,parquet"
                                               else "-" + args.kinds.replace(",", "-"))
    out = new_result("ingest-engine", tail)
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

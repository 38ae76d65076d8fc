"""Ingest of tokenized pretraining corpora: MB/s of `dsinspect ingest` of a >= 1 GB token file, inline and with
the process pool, against a plain np.memmap copy of the same file (what moving the tokens costs at the
least); CPU seconds (this process and its children: what a busy machine cannot hide) and peak RSS of each
ingest; the load average before and after. Not a test.

Each format is a writer in `WRITERS` (format -> function writing a corpus of about N bytes of tokens in
that format's layout with numpy, returning the source to ingest and the token files in it); add one to
measure another format, e.g. `--formats megatron,olmo`. Every measurement runs in a fresh process (its
VmHWM is the ingest's peak RSS; a pool's workers are reported apart as the largest child's), the source's
files read once before, so the page cache is warm for all. Inline and pool must give the same version id
(checked). Prints a table and, with --json PATH, writes the figures.

Run: python benchmarks/bench_ingest_tokens.py                 (1 GiB Megatron .bin, ~3 min on 2 cores)
     python benchmarks/bench_ingest_tokens.py --gib 0.1       (a smoke run, ~20 s)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

MB = 1_000_000
GIB = 1 << 30
BLOCK = 64 << 20  # bytes written or copied at once
VOCAB = 50_257  # GPT-2's: uint16 tokens


class Corpus(NamedTuple):
    source: Path  # what `dsinspect ingest` is given
    streams: list[Path]  # the token files in it (what the memmap baseline copies)


def document_lengths(tokens: int, rng: np.random.Generator) -> np.ndarray:
    """Document lengths adding up to `tokens`: log-normal around ~1,100 tokens, 1 to 32,768 each."""
    lengths = np.clip(rng.lognormal(6.5, 1.0, tokens // 500 + 16), 1, 32_768).astype(np.int64)
    lengths = lengths[:int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    lengths[-1] -= int(lengths.sum()) - tokens
    return lengths[lengths > 0]


def write_tokens(path: Path, count: int, dtype: str, rng: np.random.Generator) -> None:
    """`count` random token ids below VOCAB, written a block at a time."""
    item = np.dtype(dtype).itemsize
    with open(path, "wb") as f:
        for start in range(0, count, BLOCK // item):
            f.write(rng.integers(0, VOCAB, min(BLOCK // item, count - start)).astype(dtype).tobytes())


def write_megatron(directory: Path, size: int, rng: np.random.Generator) -> Corpus:
    """A Megatron-core indexed dataset as tools/preprocess_data.py writes it with IndexedDatasetBuilder:
    uint16 tokens, one sequence a document; the .idx laid out as its _IndexWriter writes it."""
    directory.mkdir(parents=True)
    lengths = document_lengths(size // 2, rng)
    write_tokens(directory / "corpus.bin", int(lengths.sum()), "<u2", rng)
    pointers = (np.cumsum(lengths) - lengths) * 2
    with open(directory / "corpus.idx", "wb") as f:
        f.write(struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, len(lengths), len(lengths) + 1))
        f.write(lengths.astype("<i4").tobytes() + pointers.astype("<i8").tobytes())
        f.write(np.arange(len(lengths) + 1, dtype="<i8").tobytes())
    return Corpus(directory, [directory / "corpus.bin"])


WRITERS: dict[str, Callable[[Path, int, np.random.Generator], Corpus]] = {"megatron": write_megatron}


def memmap_copy(streams: list[Path], out: Path) -> dict:
    """Wall seconds of copying the token files through np.memmap, a block at a time (page cache warm)."""
    started = time.perf_counter()
    for path in streams:
        source = np.memmap(path, np.uint8, "r")
        target = np.memmap(out, np.uint8, "w+", shape=source.shape)
        for at in range(0, len(source), BLOCK):
            target[at:at + BLOCK] = source[at:at + BLOCK]
        target.flush()
        del source, target
        out.unlink()
    return {"wall": time.perf_counter() - started}


def measure_ingest(source: Path, catalog: Path, engine: str, workers: int) -> dict:
    """One ingest in this (fresh) process: wall and CPU seconds, its peak RSS, its largest child's."""
    from dsinspect.loaders.ingest import run_ingest
    from dsinspect.loaders.store.catalog import Catalog

    started = time.perf_counter()
    result = run_ingest(Catalog(str(catalog)), str(source), "bench", engine=engine, workers=workers)
    wall = time.perf_counter() - started
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = int([line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]) * 1024
    return {"wall": wall, "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, "id": result.version.id,
            "parts": result.parts, "rows": result.rows, "peak_rss": peak, "child_peak_rss": kids.ru_maxrss * 1024}


def in_fresh_process(source: Path, catalog: Path, engine: str, workers: int) -> dict:
    shutil.rmtree(catalog, ignore_errors=True)
    done = subprocess.run([sys.executable, __file__, "--measure", str(source), str(catalog), engine, str(workers)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{engine} ingest of {source} failed:\n{done.stderr[-3000:]}")
    shutil.rmtree(catalog, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm(streams: list[Path]) -> None:
    for path in streams:
        with open(path, "rb") as f:
            while f.read(BLOCK):
                pass


def run_format(fmt: str, size: int, root: Path, repeats: int, workers: int) -> dict:
    corpus = WRITERS[fmt](root / fmt, size, np.random.default_rng(0))
    size = sum(p.stat().st_size for p in corpus.streams)
    best: dict[str, dict] = {}
    for _ in range(repeats):  # interleaved, so a busy spell lands on every reader alike
        warm(corpus.streams)
        runs = {"memmap copy": memmap_copy(corpus.streams, root / "copy.tmp"),
                "inline": in_fresh_process(corpus.source, root / "catalog", "inline", 1),
                f"pool {workers}": in_fresh_process(corpus.source, root / "catalog", "pool", workers)}
        for name, run in runs.items():
            if name not in best or run["wall"] < best[name]["wall"]:
                best[name] = run
    ids = {run["id"] for run in best.values() if "id" in run}
    if len(ids) != 1:
        raise SystemExit(f"{fmt}: inline and pool gave different version ids: {sorted(ids)}")
    for run in best.values():
        run["mb_per_s"] = size / MB / run["wall"]
        run["over_memmap"] = run["wall"] / best["memmap copy"]["wall"]
    shutil.rmtree(root / fmt)
    return {"format": fmt, "bytes": size, "runs": best}


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        source, catalog, engine, workers = sys.argv[2:6]
        print(json.dumps(measure_ingest(Path(source), Path(catalog), engine, int(workers))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default="megatron", help=f"of {', '.join(WRITERS)} (comma-separated)")
    ap.add_argument("--gib", type=float, default=1.0, help="GiB of tokens per corpus")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pool workers")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the figures there")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dsinspect-bench-tokens-"))
    load_before = os.getloadavg()
    results = []
    print(f"{'format':<10} {'GB':>5} {'reader':<12} {'wall s':>7} {'CPU s':>7} {'MB/s':>7} {'× memmap':>9} "
          f"{'peak RSS':>9} {'worker RSS':>10}")
    try:
        for fmt in args.formats.split(","):
            result = run_format(fmt, int(args.gib * GIB), root, args.repeats, args.workers)
            for name, run in result["runs"].items():
                rss = f"{run['peak_rss'] / MB:>7.0f}MB" if "peak_rss" in run else ""
                kids = f"{run['child_peak_rss'] / MB:>8.0f}MB" if name.startswith("pool") else ""
                cpu = f"{run['cpu']:>7.1f}" if "cpu" in run else ""
                print(f"{fmt:<10} {result['bytes'] / 1e9:>5.2f} {name:<12} {run['wall']:>7.2f} {cpu:>7} "
                      f"{run['mb_per_s']:>7.0f} {run['over_memmap']:>9.1f} {rss:>9} {kids:>10}", flush=True)
            results.append(result)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min; on {os.cpu_count()} CPUs)")
    if args.json:
        meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "cpus": os.cpu_count(),
                "loadavg_before": load_before, "loadavg_after": load_after, "python": sys.version.split()[0],
                "repeats": args.repeats, "workers": args.workers}
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

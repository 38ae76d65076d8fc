"""Metadata at the scale of a pretraining corpus: a version of 10^5 shards and 10^10 rows (issue #35).
Not a test: times against targets and against a "before" revision, in the same run.

The version (`build`). Shards are content-addressed by sha256, so a manifest entry cannot point at
another shard's file; instead the entries are of two kinds:
- *real* shards, written by the project's writer (`VersionWriter.finish_shards`: Parquet, row hashes,
  the shard index), exactly the ones the measured reads touch: shard 0 (2,048 rows: the first batch
  of every rank of 64 under shuffle="none") and a 256-row block around each row rank 0 reads at
  step 0 under shuffle="global" (the permutation depends only on the seed and the row count, so
  those rows are known before the version exists); each holds its global indices as `id`;
- *absent* shards: every other entry, with a sha256 and an index sha256 derived from its position
  and the rows, bytes and token count of a 200 MB shard of 1,024-token rows; neither file exists.
  Anything that touches one fails (NotFoundError), so a start or first batch that succeeds did no
  per-shard I/O beyond the shards it read.
The manifest is `Manifest(fields, shards, key, meta)` published by `store.publish` (what a writer's
commit calls): the version id is the real content hash (29 MB of pretty JSON), checked on every read.
The format is what any version has; only the absent files make it cheap (~1 MB of real shards).

What is measured, each in a fresh process (libraries imported before the clock starts, except for
the CLI commands, timed from spawn to exit as a user sees them), for the working tree and for the
`--before` revision (a `git worktree`), alternately, median of `--repeats`:
`dsinspect ls`, `dsinspect info` (targets: info <= 1 s), `RunSpec.create`, a Loader's start and
its first batch (target: start <= 0.5 s and <= 200 MB peak RSS), verify's plan (everything
`verify --engine pool` does before it reads a shard byte: the stored manifest read again, ranges,
and one worker's start), and N ranks starting together on one node from moto's S3 on loopback
(GETs of the manifest: target 1 a node, through the node's metadata copies, store/node_copies.py).

Run: python benchmarks/bench_metadata.py                       (~4 min on 2 busy cores)
     python benchmarks/bench_metadata.py --repeats 5 --ranks 64 --wave 16
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from dsinspect.loaders.format.manifest import Field, Manifest, Shard
from dsinspect.loaders.format.shard_table import ShardTable
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.publish import publish
from dsinspect.loaders.store.writer import VersionWriter, WriteOptions

ROOT = Path(__file__).resolve().parent.parent
NAME = "frontier"
SHARDS = 100_000
ROWS = 10_000_000_000
FIRST_ROWS = 64 * 32        # shard 0: every rank's first batch under shuffle="none" (64 ranks x 32)
REAL_ROWS = 256             # each other real shard
TOKENS_A_ROW = 1024         # what an absent shard records
FIELDS = (Field("id", pa.int64(), "scalar", False), Field("tokens", pa.list_(pa.int32()), "tokens"))
BATCH = 32
WORLD = 64


# -- the version ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Frontier:
    catalog_url: str
    version_id: str
    real: tuple[int, ...]      # positions of the shards that exist
    rows: int
    shards: int


def global_first_batch(rows: int, seed: int, batch_size: int) -> np.ndarray:
    """The indices rank 0 reads at step 0 under a global shuffle of one source (plan.py's `_permute`)."""
    return Permutation(rows, key_of("global", seed, 0, 0))(np.arange(batch_size, dtype=np.int64))


def build(catalog_url: str, *, shards: int = SHARDS, rows: int = ROWS, seed: int = 0, batch_size: int = BATCH,
          tag: str = "v1") -> Frontier:
    """Write the version into the catalog at `catalog_url` (a few seconds; ~1 MB of real shards)."""
    starts, lengths, real = _layout(rows, shards, global_first_batch(rows, seed, batch_size))
    catalog = Catalog(catalog_url)
    writer = VersionWriter(catalog, NAME, FIELDS, key="id", options=WriteOptions(row_group_rows=128))
    for s in real:
        ids = np.arange(starts[s], starts[s] + lengths[s], dtype=np.int64)
        tokens = pa.ListArray.from_arrays(np.arange(len(ids) + 1, dtype=np.int32), pa.array(ids % 50_000, pa.int32()))
        writer.write(pa.table({"id": ids, "tokens": tokens}))
        writer.close_shard()
    entries = _entries(writer.finish_shards(), real, lengths)
    meta = {"dataset": NAME, "parent": None, "message": f"synthetic: {shards:,} shards, {rows:,} rows",
            "created_at": "2026-12-06T00:00:00+00:00"}
    version_id = publish(catalog.fs, catalog.layout, NAME, Manifest(FIELDS, entries, "id", meta), (tag,))
    return Frontier(catalog_url, version_id, tuple(real), rows, shards)


def _entries(written: list[Shard], real: list[int], lengths: np.ndarray) -> ShardTable:
    """Every shard entry as the manifest's columns (a `Shard` object each would cost seconds): the
    written shards at their positions, absent ones elsewhere."""
    def digest(what: str, position: int) -> str:
        return hashlib.sha256(f"frontier {what} {position}".encode()).hexdigest()
    shas = [digest("shard", s) for s in range(len(lengths))]
    indexes = [digest("index", s) for s in range(len(lengths))]
    nbytes, tokens = lengths * 2 * TOKENS_A_ROW, lengths * TOKENS_A_ROW
    for s, shard in zip(real, written):
        assert lengths[s] == shard.rows
        shas[s], indexes[s], nbytes[s] = shard.sha256, shard.index_sha256, shard.bytes
        tokens[s] = shard.token_count("tokens")
    return ShardTable("".join(shas), "".join(indexes), np.ones(len(lengths), bool), lengths.astype(np.int64),
                      nbytes.astype(np.int64), {"tokens": tokens.astype(np.int64)})


def _layout(rows: int, shards: int, needed: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Shard starts and lengths (summing to `rows`) and the positions of the real shards: shard 0,
    and the REAL_ROWS-aligned block around each needed index; absent shards fill the gaps, each gap
    getting its share of them by rows."""
    blocks = sorted({int(i) // REAL_ROWS * REAL_ROWS for i in needed if i >= FIRST_ROWS + REAL_ROWS})
    intervals = [(0, FIRST_ROWS)] + [(b, b + REAL_ROWS) for b in blocks]
    gaps = [(end, start) for (_, end), (start, _) in zip(intervals, intervals[1:] + [(rows, rows)])]
    sizes = np.array([b - a for a, b in gaps], np.float64)
    absent = shards - len(intervals)
    counts = np.maximum(1, np.floor(sizes / sizes.sum() * absent)).astype(np.int64)
    counts[np.argmax(sizes)] += absent - counts.sum()
    starts, lengths, real = [], [], []
    for (a, b), (g0, g1), n in zip(intervals, gaps, counts.tolist()):
        real.append(len(starts))
        starts.append(a)
        lengths.append(b - a)
        cuts = g0 + (g1 - g0) * np.arange(n + 1, dtype=np.int64) // n
        starts.extend(cuts[:-1].tolist())
        lengths.extend(np.diff(cuts).tolist())
    assert len(starts) == shards and sum(lengths) == rows
    return np.array(starts, np.int64), np.array(lengths, np.int64), real


# -- what a fresh process measures ----------------------------------------------------------------

# argv: catalog url, spec file, rank, mode ("start": Loader start and first batch; "create"; "plan")
CHILD = r"""
import json, sys, time
import dsinspect
from dsinspect.loaders import Catalog, Loader, RunSpec
url, spec_file, rank, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def peak_mb():  # this process's own high-water mark (ru_maxrss keeps the forking parent's across exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
out = {"tree": dsinspect.__file__, "rss_imported": peak_mb()}
w, c = time.perf_counter(), time.process_time()
if mode == "create":
    RunSpec.create(Catalog(url), "frontier@v1", seed=0, batch_size=32, world_size=64, shuffle="global")
elif mode == "plan":
    from dsinspect.loaders.store.verify import stored, verify_side_files
    from dsinspect.loaders.store.verify_parts import shard_ranges
    version = stored(Catalog(url).resolve("frontier@v1"))
    problems = verify_side_files(version)
    ranges = shard_ranges(len(version.manifest.shards), 8 * 4)
    total = version.manifest.num_bytes
    out["plan_s"] = time.perf_counter() - w
    w2 = time.perf_counter()
    Catalog(url, node_copies=False).version(version.name, version.id)  # one worker's start (each range's, before)
    out["task_start_s"] = time.perf_counter() - w2
    out["ranges"], out["bytes"] = len(ranges), total
else:
    spec = RunSpec.loads(open(spec_file).read())
    loader = Loader(spec, rank=rank, catalog=Catalog(url))
    out["start_s"], out["start_cpu_s"] = time.perf_counter() - w, time.process_time() - c
    out["rss_start"] = peak_mb()
    w1 = time.perf_counter()
    batch = next(iter(loader))
    out["first_batch_s"] = time.perf_counter() - w1
    out["rows"] = len(batch.indices)
    loader.close()
out["s"], out["cpu_s"], out["rss"] = time.perf_counter() - w, time.process_time() - c, peak_mb()
print(json.dumps(out))
"""


def run_child(tree: Path, cwd: str, args: list[str], env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=cwd, env={**tree_env(tree, cwd), **(env or {})},
                          capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"child failed ({tree}): {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["tree"].startswith(str(tree)):
        raise RuntimeError(f"the child imported {out['tree']}, not the tree {tree}")
    return out


# `python -m dsinspect ARGS`, writing its peak RSS (VmHWM, kB) to the file $PEAK_FILE as it exits
CLI = r"""
import atexit, os, runpy, sys
def peak():
    with open("/proc/self/status") as f, open(os.environ["PEAK_FILE"], "w") as out:
        out.write(next(line.split()[1] for line in f if line.startswith("VmHWM")))
atexit.register(peak)
sys.argv = ["dsinspect", *sys.argv[1:]]
runpy.run_module("dsinspect", run_name="__main__")
"""


def run_cli(tree: Path, cwd: str, argv: list[str]) -> dict:
    """A CLI command timed from spawn to exit: wall, CPU (user + system) and peak RSS of the process."""
    peak_file = Path(cwd) / "peak"
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CLI, *argv], cwd=cwd,
                            env={**tree_env(tree, cwd), "PEAK_FILE": str(peak_file)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{argv} failed ({tree}): {proc.stderr.read().decode()[-1000:]}")
    return {"s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss": int(peak_file.read_text()) / 1024}


def tree_env(tree: Path, cwd: str) -> dict[str, str]:
    """The tree first on the path (an editable install of the working tree must not shadow it);
    bytecode cached under `cwd` so every timed run is warm; a node cache of its own under `cwd`."""
    drop = ("DSINSPECT_CATALOG", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONPATH=str(tree), PYTHONPYCACHEPREFIX=str(Path(cwd) / "pycache"),
               DSINSPECT_CACHE=str(Path(cwd) / "cache" / tree.name))
    return env


# -- many ranks on one node, from S3 ---------------------------------------------------------------

def ranks_on_s3(trees: dict[str, Path], cwd: str, ranks: int, wave: int) -> dict:
    """`ranks` processes (at most `wave` at a time) start a Loader and read its first batch from moto's
    S3 on loopback sharing one node cache; the requests the server answered, per tree."""
    sys.path.insert(0, str(ROOT / "tests"))
    from s3_server import s3_server

    out = {}
    with s3_server() as (server, url, _):
        frontier = build(url)
        spec = _spec(url, frontier, shuffle="none")
        spec_file = Path(cwd) / "spec-s3.json"
        spec_file.write_text(spec.dumps())
        manifest_key = f"/catalog/datasets/{NAME}/versions/{frontier.version_id}.json"
        for name, tree in trees.items():
            node = Path(cwd) / f"node-{name}"
            server.reset_counts()
            started = time.perf_counter()
            results = []
            for first in range(0, ranks, wave):
                procs = [subprocess.Popen([sys.executable, "-c", CHILD, url, str(spec_file), str(r), "start"], cwd=cwd,
                                          env={**tree_env(tree, cwd), "DSINSPECT_CACHE": str(node)},
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                         for r in range(first, min(ranks, first + wave))]
                for p in procs:
                    stdout, stderr = p.communicate(timeout=900)
                    if p.returncode:
                        raise RuntimeError(f"rank failed ({name}): {stderr[-2000:]}")
                    results.append(json.loads(stdout.strip().splitlines()[-1]))
            gets = server.requests(method="GET")
            out[name] = {
                "wall_s": time.perf_counter() - started,
                "manifest_gets": sum(1 for r in gets if r.path.endswith(manifest_key)),
                "gets": len(gets), "get_mb": sum(r.nbytes for r in gets) / 1e6,
                "start_s": statistics.median(r["start_s"] for r in results),
                "rss": statistics.median(r["rss"] for r in results),
            }
    return out


def _spec(url: str, frontier: Frontier, shuffle: str):
    from dsinspect.loaders import RunSpec

    return RunSpec.create(Catalog(url), f"{NAME}@{frontier.version_id}", seed=0, batch_size=BATCH, world_size=WORLD,
                          shuffle=shuffle)


# -- the run ---------------------------------------------------------------------------------------

def main() -> None:
    args = _parse()
    with tempfile.TemporaryDirectory(prefix="bench-metadata-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(before), args.before],
                       check=True)
        try:
            trees = {"before": before, "now": ROOT}
            started = time.perf_counter()
            frontier = build(str(Path(tmp) / "catalog"), shards=args.shards, rows=args.rows)
            built = time.perf_counter() - started
            spec_file = Path(tmp) / "spec.json"
            spec_file.write_text(_spec(frontier.catalog_url, frontier, "global").dumps())
            load = [os.getloadavg()[0]]
            figures = _local_figures(trees, tmp, frontier, spec_file, args.repeats)
            load.append(os.getloadavg()[0])
            s3 = ranks_on_s3(trees, tmp, args.ranks, args.wave) if args.ranks else {}
            load.append(os.getloadavg()[0])
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
    _print(args, frontier, built, figures, s3, load)


def _local_figures(trees: dict[str, Path], cwd: str, frontier: Frontier, spec_file: Path, repeats: int) -> dict:
    """Median of `repeats` fresh processes per figure and tree, the trees taking turns."""
    url = frontier.catalog_url
    for tree in trees.values():  # untimed: compiles each tree's bytecode
        run_cli(tree, cwd, ["--catalog", url, "ls"])
    runs: dict[str, dict[str, list[dict]]] = {}
    for _ in range(repeats):
        for name, tree in trees.items():
            def add(what: str, result: dict, name: str = name) -> None:
                runs.setdefault(what, {}).setdefault(name, []).append(result)
            add("ls", run_cli(tree, cwd, ["--catalog", url, "ls"]))
            add("info", run_cli(tree, cwd, ["--catalog", url, "info", "frontier@v1"]))
            add("create", run_child(tree, cwd, [url, "-", "0", "create"]))
            add("start", run_child(tree, cwd, [url, str(spec_file), "0", "start"]))
            add("plan", run_child(tree, cwd, [url, "-", "0", "plan"]))
    return {what: {name: {k: statistics.median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], (int, float))}
                   for name, rs in by_tree.items()} for what, by_tree in runs.items()}


def _print(args, frontier: Frontier, built: float, figures: dict, s3: dict, load: list[float]) -> None:
    print(f"version: {frontier.shards:,} shards, {frontier.rows:,} rows, {len(frontier.real)} real "
          f"(built in {built:.1f} s); before = {args.before}; median of {args.repeats}; "
          f"load (1 min) {' / '.join(f'{x:.1f}' for x in load)} on {os.cpu_count()} cores")
    rows = [("dsinspect ls (spawn to exit)", "ls", "s", None), ("dsinspect info (spawn to exit)", "info", "s", 1.0),
            ("  info peak RSS, MB", "info", "rss", None),
            ("  info CPU (user+system)", "info", "cpu_s", 1.0),
            ("RunSpec.create", "create", "s", None), ("Loader start", "start", "start_s", 0.5),
            ("  start CPU", "start", "start_cpu_s", 0.5),
            ("  start peak RSS, MB", "start", "rss_start", 200), ("first batch", "start", "first_batch_s", None),
            ("  peak RSS after it, MB", "start", "rss", None),
            ("verify plan (stored manifest, ranges)", "plan", "plan_s", None),
            ("  one pool worker's start", "plan", "task_start_s", None)]
    print(f"{'figure':40} {'before':>10} {'now':>10} {'now/before':>11} {'target':>8}")
    for label, what, key, target in rows:
        b, n = figures[what]["before"].get(key), figures[what]["now"].get(key)
        verdict = "" if target is None else ("ok" if n <= target else "MISSED")
        print(f"{label:40} {b:10.3f} {n:10.3f} {n / b:11.3f} {'' if target is None else target:>8} {verdict}")
    for name, r in s3.items():
        print(f"S3, {args.ranks} ranks ({args.wave} at a time), {name}: manifest GETs {r['manifest_gets']} "
              f"(target 1), all GETs {r['gets']} ({r['get_mb']:.1f} MB), median start {r['start_s']:.2f} s, "
              f"median peak RSS {r['rss']:.0f} MB, {r['wall_s']:.1f} s in all")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="5e23fd5", help="the revision to compare with (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per figure and tree (median kept)")
    parser.add_argument("--shards", type=int, default=SHARDS)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--ranks", type=int, default=64, help="processes starting from S3 (0: skip)")
    parser.add_argument("--wave", type=int, default=16, help="of those, at most this many at a time")
    return parser.parse_args()


if __name__ == "__main__":
    main()

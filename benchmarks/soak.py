"""Reliability soak: kill-and-resume trials, concurrency rounds and fault-injected epochs in a loop,
for as long as asked, with the figures of docs/RELIABILITY.md. Not part of the test run.

    python benchmarks/soak.py --minutes 60 [--seed 7] [--trials-per-round 5] [--keep DIR]

Each round: `--trials-per-round` kill-and-resume trials (tests/kill_resume_worker.py, checked by
tests/test_kill_resume.py), the three concurrency scenarios of tests/test_concurrency.py, and, when
dsinspect/loaders/store/faults.py is there, one Loader epoch over a fault-injecting filesystem compared with
the clean epoch. A round's figures print as one JSON line; the totals print at the end. Any lost or
duplicated sample, wrong batch, lost tag update or unclear error stops the soak with the failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import test_concurrency as concurrency  # noqa: E402
import test_kill_resume as kill_resume  # noqa: E402

from dsinspect.errors import IntegrityError  # noqa: E402
from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions  # noqa: E402
from dsinspect.loaders.read.cache import ShardCache  # noqa: E402


def kill_resume_round(work: Path, catalog: Catalog, seed: int, first: int, trials: int, totals: Counter) -> dict:
    out = work / f"kr-{first}"
    kill_resume.run_harness(catalog, out, trials=trials, seed=seed, first=first)
    hashes = [h.hex() for h in kill_resume._hash_column(catalog.resolve(kill_resume.DATASET))]
    figures = kill_resume.Figures()
    for trial_dir in sorted(out.glob("trial-*")):
        kill_resume.check_trial(trial_dir, catalog, hashes, figures)
    assert figures.lost == 0 and figures.duplicated == 0
    shutil.rmtree(out)
    totals.update(figures.to_json())
    return figures.to_json()


def concurrency_round(work: Path, totals: Counter) -> dict:
    figures = {}
    for name, scenario in (("cache", concurrency.run_cache_readers), ("tags", concurrency.run_taggers),
                           ("publish", concurrency.run_publish_while_reading)):
        tmp = work / f"conc-{name}"
        tmp.mkdir()
        figures[name] = scenario(tmp)
        shutil.rmtree(tmp)
    totals.update({"cache_batches_exact": figures["cache"]["batches"], "cache_evictions": figures["cache"]["evictions"],
                   "tag_updates": figures["tags"]["tag_updates"], "tag_updates_lost": figures["tags"]["lost"],
                   "versions_published_while_read": figures["publish"]["versions_published"],
                   "reader_checks": figures["tags"]["reader_checks"] + figures["publish"]["reader_checks"]})
    return figures


FAULT_FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("blob", pa.binary(), "bytes")]


def fault_round(work: Path, seed: int, totals: Counter) -> dict | None:
    """One Loader epoch through a fresh cache over a faulty filesystem, equal to the clean epoch."""
    try:
        from dsinspect.loaders.store.faults import KINDS, FaultSpec, FaultStats, FaultyFileSystem
    except ImportError:
        return None
    root = work / f"faults-{seed}" / "catalog"
    Catalog(str(root)).write_version("fz", [{"id": i, "blob": bytes([i % 251]) * (i % 9)} for i in range(256)],
                                     FAULT_FIELDS, options=WriteOptions(shard_rows=4, row_group_rows=2))

    def epoch(catalog: Catalog, cache: Path) -> list:
        spec = RunSpec.create(catalog, "fz", seed=seed, batch_size=16, shuffle="global")
        with Loader(spec, catalog=catalog, cache=ShardCache(cache, retries=60, backoff=0.0)) as loader:
            return [(b.indices.tolist(), b.row_hashes, b.table.to_pylist()) for b in loader]

    clean = epoch(Catalog(str(root)), root.parent / "fault-cache-clean")
    stats = FaultStats()
    faulty = Catalog(str(root))
    faulty.fs = FaultyFileSystem(faulty.fs, FaultSpec(seed=seed, error=0.3, timeout=0.15, slow=0.15, truncate=0.015,
                                                      flip=0.015, delay=0.0002, match="*.parquet"), stats)
    try:
        got, refused = epoch(faulty, root.parent / "fault-cache"), 0  # a fresh cache: every shard fetched
        assert got == clean, "a fault-injected epoch differs from the clean one"
        survived = stats.total
    except IntegrityError as e:  # one shard damaged twice in a row: the documented clean refusal
        assert "/datasets/fz/shards/" in str(e)
        got, refused, survived = None, 1, 0
    shutil.rmtree(root.parent)
    totals.update({"faults_survived": survived, "fault_refusals": refused})
    return {"faults_survived": survived, "refused": refused, **{k: stats.faults[k] for k in KINDS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--trials-per-round", type=int, default=5)
    parser.add_argument("--keep", help="work directory to keep (default: a temp dir, removed)")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="dsinspect-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DSINSPECT_CACHE", str(work / "cache"))
    catalog = kill_resume.make_catalog(work / "catalog")
    totals: Counter = Counter()
    started = time.monotonic()
    deadline = started + args.minutes * 60
    rounds = 0
    try:
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            first = rounds * args.trials_per_round
            figures = {"round": rounds,
                       "kill_resume": kill_resume_round(work, catalog, args.seed, first, args.trials_per_round, totals),
                       "concurrency": concurrency_round(work, totals),
                       "faults": fault_round(work, args.seed * 1000 + rounds, totals),
                       "seconds": round(time.monotonic() - t0, 1)}
            rounds += 1
            print(json.dumps(figures), flush=True)
    finally:
        print(json.dumps({"totals": {"rounds": rounds, "minutes": round((time.monotonic() - started) / 60, 2),
                                     **dict(sorted(totals.items()))}}), flush=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

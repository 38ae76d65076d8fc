"""Verify a large version in parts: shard ranges re-hashed on an engine (pool, Ray), one report.

The report equals `verify_version`'s: the same shard reports in shard order, the same problems.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from typing import Callable

from dsinspect.loaders.compute.engines import run_tasks
from dsinspect.loaders.compute.tasks import TaskFailed
from dsinspect.loaders.format.manifest import Manifest
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.verify import (
    ShardReport,
    VerifyReport,
    stored,
    verify_shard,
    verify_side_files,
    verify_version,
)
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["verify_parallel", "shard_ranges"]

TASK = "dsinspect.loaders.store.verify_parts:verify_shards_task"
_RANGES_PER_WORKER = 4  # a few ranges per worker keep them busy when shard sizes differ


def shard_ranges(count: int, ranges: int) -> list[tuple[int, int]]:
    """`count` shards cut into at most `ranges` contiguous, nearly equal [first, stop) ranges."""
    ranges = max(1, min(ranges, count))
    bounds = [count * i // ranges for i in range(ranges + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def verify_shards_task(payload: dict) -> dict:
    """Task: verify shards [first, stop) of one version (any process, JSON in and out)."""
    catalog = Catalog(payload["catalog"], node_copies=False)  # what is stored (verify.stored)
    manifest = _stored_manifest(payload["catalog"], payload["dataset"], payload["version"])
    version = DatasetVersion(catalog, payload["dataset"], payload["version"], manifest)
    first, stop = payload["shards"]
    reports = [verify_shard(version, i) for i in range(first, stop)]
    return {"shards": [asdict(r) for r in reports], "bytes": int(version.manifest.shards.bytes[first:stop].sum())}


@functools.lru_cache(maxsize=1)
def _stored_manifest(catalog_url: str, dataset: str, version_id: str) -> Manifest:
    """The stored manifest, read once per process: a worker runs several ranges of one version (a
    10^5-shard manifest costs a parse each), and `verify_parallel` has read and checked it again
    from storage (`stored`) before any task starts. Shards and indexes are read afresh by each task."""
    return Catalog(catalog_url, node_copies=False).manifest(dataset, version_id)


def verify_parallel(version: DatasetVersion, engine: str = "pool", workers: int | None = None,
                    on_bytes: Callable[[int], None] | None = None) -> VerifyReport:
    """`verify_version`, with the shards split into ranges run on `engine` (inline: the serial path)."""
    if engine == "inline":
        return verify_version(version, on_bytes)
    version = stored(version)
    from dsinspect.loaders.compute.pool import default_workers

    ranges = shard_ranges(len(version.manifest.shards), (workers or default_workers()) * _RANGES_PER_WORKER)
    payloads = [{"catalog": version.catalog.url, "dataset": version.name, "version": version.id, "shards": list(r)}
                for r in ranges]
    report = VerifyReport(version.address, version.id, [], verify_side_files(version))

    def done(_: int, result: dict) -> None:
        if on_bytes:
            on_bytes(result["bytes"])

    try:
        results = run_tasks(engine, TASK, payloads, workers=workers, on_done=done)
    except TaskFailed as e:
        first, stop = ranges[e.index]
        from dsinspect.errors import UserError
        raise UserError(f"verify {version.address}: shards {first}..{stop - 1}: {e}") from None
    for result in results:
        report.shards.extend(ShardReport(**r) for r in result["shards"])
    return report

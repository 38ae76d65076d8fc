"""The `auto` engine: inline unless the process pool is faster for the input at hand.

A pool spawns its workers, and each imports dsinspect and pyarrow before converting anything (~1 s
of CPU per worker, measured). It pays only when enough work can run beside the largest part:
with one part, one CPU or one worker it never does. The bytes that can convert alongside the
largest part must reach a per-kind threshold, taken from `benchmarks/bench_ingest_engine.py` on a
2-core machine (figures in docs/INGEST.md). The engine never changes the version id.
"""

from __future__ import annotations

import os
from typing import Sequence

__all__ = ["AUTO", "choose_engine", "available_cpus", "POOL_MIN_BYTES"]

AUTO = "auto"
MiB = 1 << 20
# Bytes that must convert beside the largest part before the pool is faster than inline. Measured
# on 2 shared cores (bench_ingest_engine.py, two runs on 2026-12-01), the pool never won clearly:
# for JSONL in 8 parts pool-2/inline fell from ~2-4 at 4-16 MB to 1.0-1.2 at 160 MB, so parity lies
# near 300 MB. Parquet costs ~1.4x the CPU of JSONL per source byte (it is compressed); WebDataset
# tars ~1/8 (mostly copying bytes; the pool still lost 1.4x at 254 MB in 8 tars). Arrow, MDS and
# media folders, not measured, are taken to be like tars.
POOL_MIN_BYTES = {"jsonl": 256 * MiB, "parquet": 192 * MiB}
DEFAULT_POOL_MIN_BYTES = 1024 * MiB


def choose_engine(kind: str, part_bytes: Sequence[int], cpus: int, workers: int | None = None) -> str:
    """"inline" or "pool" for parts of these sizes (pure: the caller supplies the CPU count)."""
    if cpus < 2 or len(part_bytes) < 2 or workers == 1:
        return "inline"
    alongside = sum(part_bytes) - max(part_bytes)  # what a second worker could convert meanwhile
    return "pool" if alongside >= POOL_MIN_BYTES.get(kind, DEFAULT_POOL_MIN_BYTES) else "inline"


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1

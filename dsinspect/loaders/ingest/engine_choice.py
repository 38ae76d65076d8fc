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
# Bytes that must convert beside the largest part before the pool is faster than inline, from
# bench_ingest_engine.py on an idle 2-core machine (2026-12-01, load 1.2-1.6; figures in
# docs/INGEST.md): pool-2/inline for JSONL in 8 parts 0.96 at 32 MB, 0.61 at 128 MB, 0.66 at 384 MB;
# Parquet 0.80 at 48 MB in 2 parts, 1.00 in 8, 1.7-1.9 at 16 MB; WebDataset tars (mostly copying
# bytes) never faster up to 190 MB (1.04-1.20), so their bar is far out. Arrow, MDS and media
# folders, not measured, are taken to be like tars. On a shared machine the pool loses more.
# Token files (rows of tokens: Parquet writing and row hashing are ~90 % of the work) from
# bench_ingest_tokens.py (2026-12-06, idle): a 1.07 GB Megatron .bin in 17 parts, pool-2/inline 0.62,
# the pool paying from ~0.25 GB; the other token formats write the same rows.
POOL_MIN_BYTES = {"jsonl": 32 * MiB, "parquet": 40 * MiB,
                  **dict.fromkeys(("megatron", "olmo", "nanogpt", "litdata", "datatrove"), 256 * MiB)}
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

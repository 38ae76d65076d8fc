"""Small numpy helpers the read path needs without numpy's extras.

`ranges` lays many `arange`s end to end in one pass (a packed batch's segments and token positions).

`np.unique` imports `numpy.ma` on its first plain call (to ask whether the array is masked): ~30 ms
of a fresh process's first batch (a local cold first batch took ~100 ms). `distinct` does the same
for the 1-D integer arrays a reader splits by (steps, shards, parts, windows) with a sort.

The lowest layer (beside `errors`): numpy only."""

from __future__ import annotations

import numpy as np

__all__ = ["distinct", "ranges"]


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array (as `np.unique(values)`)."""
    ordered = np.sort(np.asarray(values).ravel())
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`starts[i], starts[i] + 1, ..., starts[i] + counts[i] - 1` for every i, concatenated (int64)."""
    starts, counts = np.asarray(starts, np.int64), np.asarray(counts, np.int64)
    total = int(counts.sum())
    ends = np.cumsum(counts)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - (ends - counts), counts)

"""How well an epoch's order is shuffled, in the two numbers issue #35 compares shuffles by.

`spread`: mean |id[t+1] - id[t]| / (N / 3), which is 1.0 for a uniform random order (two ids
drawn at random are N/3 apart on average) and near 0 for a stored order. `pairs_meet`: the
fraction of the epoch's sample pairs that can meet in a batch, i.e. whose shards are resident
together at some point: a shard is resident from its first sample in the order to its last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Quality", "shuffle_quality"]


@dataclass(frozen=True)
class Quality:
    spread: float
    pairs_meet: float
    most_resident: int  # the most shards resident at once (from first to last sample)


def shuffle_quality(order: np.ndarray, shard_rows: Sequence[int]) -> Quality:
    """The quality of one epoch's `order` (sample ids, each once) over shards of `shard_rows` rows."""
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    spread = float(np.abs(np.diff(order)).mean() / (n / 3)) if n > 1 else 0.0
    starts = np.concatenate([[0], np.cumsum(shard_rows)])
    shard = np.searchsorted(starts, order, side="right") - 1
    m = len(shard_rows)
    at = np.arange(n)
    first = np.full(m, n, np.int64)
    last = np.full(m, -1, np.int64)
    np.minimum.at(first, shard, at)
    np.maximum.at(last, shard, at)
    sizes = np.bincount(shard, minlength=m).astype(np.float64)
    used = sizes > 0
    first, last, sizes = first[used], last[used], sizes[used]
    overlap = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])  # a shard overlaps itself
    pairs = (sizes[:, None] * sizes[None, :] * overlap).sum() - (sizes ** 2).sum()  # ordered pairs of other shards
    together = pairs / 2 + (sizes * (sizes - 1) / 2).sum()
    edges = np.concatenate([np.stack([first, np.ones_like(first)], 1), np.stack([last + 1, -np.ones_like(last)], 1)])
    edges = edges[np.lexsort((edges[:, 1], edges[:, 0]))]  # an exit before an entry at the same position
    return Quality(spread, float(together / (n * (n - 1) / 2)) if n > 1 else 1.0, int(np.cumsum(edges[:, 1]).max()))

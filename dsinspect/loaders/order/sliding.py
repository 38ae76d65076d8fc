"""The sliding shuffle: shards pass through a resident set of q, and samples are shuffled across the
shards resident together (a bounded cache's shuffle, after mosaicml-streaming's py1e and py1br).

Shards (the empty ones left out) are taken in a keyed order; each is cut into q contiguous pieces of
its rows. Block j of the stream holds piece p of the (j - p)-th shard for every p < q: a shard enters at block i,
stays for q blocks and is never needed again; the first q and the last q blocks are merged, so
every block holds pieces of exactly q shards (fewer when the version has fewer). Samples are
permuted within each block. A reader therefore holds q shards (q + 1 across a block boundary),
each shard is read over a stretch of about q shards' samples, and it meets the 2q - 1 shards
whose stretches overlap its own. Everything is arithmetic over the shard sizes: a sample's
position needs its block's q pieces, and the block starts (O(shards)) are computed once an epoch.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dsinspect.arrays import distinct
from dsinspect.loaders.order.permutation import Permutation, key_of

__all__ = ["sliding_permute", "sliding_unpermute", "SlidingLayout", "sliding_layout"]


class SlidingLayout:
    """One source epoch's blocks: the shard order, rows per shard (in that order), and where each
    block starts in the epoch's stream of samples."""

    def __init__(self, shard_rows: tuple[int, ...], resident: int, key: int):
        rows = np.asarray(shard_rows, dtype=np.int64)
        held = np.flatnonzero(rows > 0)  # an empty shard would take a resident's place for nothing
        self.m = len(held)
        self.q = max(1, min(resident, self.m))
        self.order = held[Permutation(self.m, key)(np.arange(self.m))]  # order position -> shard
        self.rows = rows[self.order]
        self.shard_starts = np.concatenate([[0], np.cumsum(rows)])[:-1]  # of the shards, in manifest order
        self.blocks = self.m - self.q + 1
        sizes = np.zeros(self.m + self.q - 1, np.int64)  # per unmerged block j: pieces j - p, p
        for p in range(self.q):
            sizes[p:p + self.m] += self._cut(self.rows, p + 1) - self._cut(self.rows, p)
        merged = np.bincount(self._merged(np.arange(len(sizes))), weights=sizes, minlength=self.blocks)
        self.starts = np.concatenate([[0], np.cumsum(merged.astype(np.int64))])

    def _cut(self, n: np.ndarray | int, p: np.ndarray | int) -> np.ndarray:
        """Where piece p of a shard of n rows starts (piece q: its end)."""
        return np.asarray(n, np.int64) * p // self.q

    def _merged(self, j: np.ndarray) -> np.ndarray:
        return np.clip(j - (self.q - 1), 0, self.m - self.q)

    def segments(self, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Block `block`'s samples in their unshuffled order, as (shard, first row, rows) runs: one
        contiguous run of rows from each of its shards, in shard order."""
        q, m = self.q, self.m
        j_lo = 0 if block == 0 else block + q - 1
        j_hi = m + q - 2 if block == m - q else block + q - 1
        at = np.arange(max(0, j_lo - q + 1), min(m - 1, j_hi) + 1, dtype=np.int64)  # order positions
        p_lo = np.maximum(0, j_lo - at)
        p_hi = np.minimum(q - 1, j_hi - at)
        n = self.rows[at]
        first, end = self._cut(n, p_lo), self._cut(n, p_hi + 1)
        return self.order[at], first, end - first

    def piece_block(self, at: int, row: int) -> int:
        """The block that holds row `row` of the shard at order position `at`."""
        n = int(self.rows[at])
        p = row * self.q // n
        while p + 1 < self.q and int(self._cut(n, p + 1)) <= row:
            p += 1
        while p > 0 and int(self._cut(n, p)) > row:
            p -= 1
        return int(self._merged(np.asarray(at + p)))


@lru_cache(maxsize=64)
def sliding_layout(shard_rows: tuple[int, ...], resident: int, key: int) -> SlidingLayout:
    return SlidingLayout(shard_rows, resident, key)


def sliding_permute(shard_rows: tuple[int, ...], resident: int, seed: int, k: int, epoch: int,
                    t: np.ndarray) -> np.ndarray:
    """Index within the source (shard rows `shard_rows`) of its t-th sample in `epoch`."""
    layout = sliding_layout(shard_rows, resident, key_of("sliding-shards", seed, k, epoch))
    block = np.searchsorted(layout.starts, t, side="right") - 1
    out = np.empty(len(t), np.int64)
    for b in distinct(block).tolist():
        sel = block == b
        lo, size = layout.starts[b], layout.starts[b + 1] - layout.starts[b]
        u = Permutation(size, key_of("sliding", seed, k, epoch, b))(t[sel] - lo)
        shards, first, count = layout.segments(b)
        seg_starts = np.concatenate([[0], np.cumsum(count)])
        s = np.searchsorted(seg_starts, u, side="right") - 1
        out[sel] = layout.shard_starts[shards[s]] + first[s] + (u - seg_starts[s])
    return out


def sliding_unpermute(shard_rows: tuple[int, ...], resident: int, seed: int, k: int, epoch: int, index: int) -> int:
    """The in-epoch position of sample `index` of the source: `sliding_permute` inverted."""
    layout = sliding_layout(shard_rows, resident, key_of("sliding-shards", seed, k, epoch))
    shard = int(np.searchsorted(layout.shard_starts, index, side="right") - 1)  # empty ones share the next start
    row = index - int(layout.shard_starts[shard])
    at = int(np.flatnonzero(layout.order == shard)[0])
    b = layout.piece_block(at, row)
    shards, first, count = layout.segments(b)
    s = int(np.flatnonzero(shards == shard)[0])
    u = int(np.sum(count[:s])) + row - int(first[s])
    size = int(layout.starts[b + 1] - layout.starts[b])
    return int(layout.starts[b]) + int(Permutation(size, key_of("sliding", seed, k, epoch, b)).inverse(u))

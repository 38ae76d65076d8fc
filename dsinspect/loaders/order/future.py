"""What the known order will read: the shards each global step reads (any rank), when each is next
needed, and what a cache of a given size fetches for that order under Belady's policy (evict what
is needed furthest in the future: optimal for shards of equal size) or LRU. The shard cache evicts
by the first (docs/REMOTE.md); the benchmark and tests measure it against both.

Pure functions of the run spec: a shard is numbered across sources as the reader numbers it (the
shards of source 0, then those of source 1, ...).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Sequence

import numpy as np

from dsinspect.arrays import distinct
from dsinspect.loaders.order.plan import _locate_steps, _samples, locate_step
from dsinspect.loaders.order.spec import RunSpec

__all__ = ["shard_uses", "NextUse", "cache_fetches"]


def shard_uses(spec: RunSpec, first_step: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(step, shard) for each shard that global steps [first_step, first_step + steps) read, by
    any rank, in step order (each pair once)."""
    locate_step(spec, first_step)  # refuses a step before the spec's start, in its words
    step_ids = np.arange(first_step, first_step + max(0, steps), dtype=np.int64)
    if not len(step_ids):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    epochs, firsts = _locate_steps(spec, step_ids)
    g = spec.global_batch
    starts = [np.cumsum([0, *s.shard_rows], dtype=np.int64) for s in spec.sources]
    base = np.cumsum([0] + [len(s.shard_rows) for s in spec.sources], dtype=np.int64)
    out_steps, out_keys = [], []
    for epoch in distinct(epochs).tolist():
        chosen = np.flatnonzero(epochs == epoch)
        positions = ((firsts[chosen][:, None] + np.arange(g, dtype=np.int64)) % spec.epoch_length).ravel()
        sources, indices, _ = _samples(spec, epoch, positions)
        keys = np.empty(len(indices), np.int64)
        for k in distinct(sources).tolist():
            sel = sources == k
            keys[sel] = base[k] + np.searchsorted(starts[k], indices[sel], side="right") - 1
        out_steps.append(np.repeat(step_ids[chosen], g))
        out_keys.append(keys)
    step_col, key_col = np.concatenate(out_steps), np.concatenate(out_keys)
    pairs = np.unique(np.stack([step_col, key_col], axis=1), axis=0)  # sorted by step, then shard
    return pairs[:, 0], pairs[:, 1]


class NextUse:
    """The next step at or after a given one at which each shard is read, over `count` steps from
    `first_step` (beyond them: never, as far as this knows)."""

    def __init__(self, spec: RunSpec, first_step: int, count: int):
        steps, keys = shard_uses(spec, first_step, count)
        order = np.lexsort((steps, keys))
        self._keys, self._steps = keys[order], steps[order]
        self._bounds = {int(k): (int(a), int(b)) for k, a, b in _runs(self._keys)}
        self.first_step, self.count = first_step, count

    def after(self, key: int, step: int) -> float:
        """The first step >= `step` that reads shard `key`; inf if none is known."""
        bounds = self._bounds.get(key)
        if bounds is None:
            return float("inf")
        a, b = bounds
        i = a + int(np.searchsorted(self._steps[a:b], step, side="left"))
        return float(self._steps[i]) if i < b else float("inf")


def _runs(sorted_keys: np.ndarray) -> list[tuple[int, int, int]]:
    if not len(sorted_keys):
        return []
    cuts = np.flatnonzero(np.diff(sorted_keys)) + 1
    bounds = [0, *cuts.tolist(), len(sorted_keys)]
    return [(int(sorted_keys[a]), a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def cache_fetches(steps: Sequence[int], keys: Sequence[int], sizes: Sequence[int], capacity: int,
                  policy: str = "belady") -> tuple[int, int]:
    """(bytes, shards) a cache of `capacity` bytes fetches when the uses (steps[i], keys[i]) come
    in order and a shard is fetched when first needed. It never evicts a shard the current step
    reads; a step that reads more than fits holds them all (a cache over its bound, as the shard
    cache does while they are pinned). `policy`: "belady" (evict the shard needed furthest in the
    future) or "lru" (the least recently used)."""
    steps, keys = list(map(int, steps)), list(map(int, keys))
    if policy not in ("belady", "lru"):
        raise ValueError(f"unknown policy {policy!r}")
    following = [0] * len(keys)  # index of the next use of the same shard (len: never)
    seen: dict[int, int] = {}
    for i in range(len(keys) - 1, -1, -1):
        following[i] = seen.get(keys[i], len(keys))
        seen[keys[i]] = i
    at_step: dict[int, set[int]] = {}  # the shards each step reads: never evicted for each other
    for step, key in zip(steps, keys):
        at_step.setdefault(step, set()).add(key)
    resident: OrderedDict[int, int] = OrderedDict()  # shard -> index of its next use (LRU order)
    heap: list[tuple[int, int]] = []  # (-next use, shard), stale entries skipped
    held = fetched_bytes = fetched = 0
    for i, (step, key) in enumerate(zip(steps, keys)):
        if key in resident:
            resident.move_to_end(key)
        else:
            fetched_bytes += sizes[key]
            fetched += 1
            held += sizes[key]
        resident[key] = following[i]
        heapq.heappush(heap, (-following[i], key))
        while held > capacity:
            victim = _victim(resident, heap, at_step[step], policy)
            if victim is None:
                break
            held -= sizes[victim]
            del resident[victim]
    return fetched_bytes, fetched


def _victim(resident: OrderedDict, heap: list, keep: set[int], policy: str) -> int | None:
    if policy == "lru":
        return next((k for k in resident if k not in keep), None)
    skipped = []
    victim = None
    while heap:
        negative, key = heapq.heappop(heap)
        if resident.get(key) != -negative:
            continue  # stale: evicted, or used again since
        if key in keep:
            skipped.append((negative, key))
            continue
        victim = key
        break
    for item in skipped:
        heapq.heappush(heap, item)
    return victim

"""The sample order as pure functions of the run spec: no I/O, no hidden state, O(1) per batch.

A run is a stream of positions. Epoch e holds positions [0, L); global step s covers the global
batch of G = world_size x batch_size consecutive positions, and rank r takes the r-th slice of B.
Position -> sample goes through the source schedule (mixtures) and each source's own permutation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from dsinspect.arrays import distinct
from dsinspect.errors import UserError
from dsinspect.loaders.order.permutation import Permutation, key_of, sample_seeds
from dsinspect.loaders.order.sliding import sliding_permute
from dsinspect.loaders.order.spec import LastBatch, RunSpec, Shuffle

__all__ = ["BatchPlan", "plan_batch", "plan_batches", "plan_steps", "batch_indices", "epoch_order", "samples_at",
           "locate_step", "steps_in_epoch", "epoch_start_step", "epoch_end", "mixture_counts"]


@dataclass(frozen=True)
class BatchPlan:
    """What one rank reads at one step: per sample its in-epoch position, source, index, seed, and
    its source's own epoch (the run's epoch for a single source; a mixture's sources cycle apart)."""

    step: int
    epoch: int
    rank: int
    positions: np.ndarray
    sources: np.ndarray
    indices: np.ndarray
    padding: np.ndarray
    seeds: np.ndarray
    source_epochs: np.ndarray


def _steps_for(spec: RunSpec, samples: int) -> int:
    g = spec.global_batch
    return samples // g if spec.last_batch is LastBatch.DROP else -(-samples // g)


def steps_in_epoch(spec: RunSpec, epoch: int) -> int:
    """Global steps in `epoch` (the first epoch of a resumed spec counts from its start position)."""
    if epoch < spec.start.epoch:
        raise UserError(f"epoch {epoch} comes before this run spec's start (epoch {spec.start.epoch})")
    if epoch == spec.start.epoch:
        return _steps_for(spec, spec.epoch_length - spec.start.position)
    return _steps_for(spec, spec.epoch_length)


def epoch_start_step(spec: RunSpec, epoch: int) -> int:
    """The first step of `epoch` (of a resumed spec's first epoch: the step it resumed at)."""
    start = spec.start
    if epoch < start.epoch:
        raise UserError(f"epoch {epoch} comes before this run spec's start (epoch {start.epoch})")
    if epoch == start.epoch:
        return start.step
    return start.step + steps_in_epoch(spec, start.epoch) + (epoch - start.epoch - 1) * steps_in_epoch(spec, epoch)


def epoch_end(spec: RunSpec, step: int) -> int:
    """The first step after the epoch holding `step`: where a pass that includes `step` stops."""
    epoch, _ = locate_step(spec, step)
    return epoch_start_step(spec, epoch) + steps_in_epoch(spec, epoch)


def locate_step(spec: RunSpec, step: int) -> tuple[int, int]:
    """(epoch, in-epoch position of the global batch) of `step`, by arithmetic alone."""
    start = spec.start
    if step < start.step:
        raise UserError(f"step {step} comes before this run spec's start (step {start.step}); "
                        "use the spec of the run segment that covered it")
    d = step - start.step
    first = steps_in_epoch(spec, start.epoch)
    if d < first:
        return start.epoch, start.position + d * spec.global_batch
    d -= first
    per_epoch = _steps_for(spec, spec.epoch_length)
    return start.epoch + 1 + d // per_epoch, (d % per_epoch) * spec.global_batch


def plan_batch(spec: RunSpec, step: int, rank: int) -> BatchPlan:
    if not 0 <= rank < spec.world_size:
        raise UserError(f"rank {rank} is outside the world size {spec.world_size}")
    if step < 0:
        raise UserError(f"step {step} is negative")
    epoch, first = locate_step(spec, step)
    positions = first + rank * spec.batch_size + np.arange(spec.batch_size, dtype=np.int64)
    padding = positions >= spec.epoch_length
    positions = positions % spec.epoch_length  # padding repeats samples from the epoch's start
    sources, indices, source_epochs = _samples(spec, epoch, positions)
    return BatchPlan(step, epoch, rank, positions, sources, indices, padding,
                     sample_seeds(spec.seed, source_epochs, sources, indices), source_epochs)


def plan_batches(spec: RunSpec, first_step: int, count: int, rank: int) -> list[BatchPlan]:
    """`plan_batch` for `count` consecutive steps in one vectorised pass (what a loader reading
    ahead needs); equal to planning each step on its own."""
    return plan_steps(spec, range(first_step, first_step + max(0, count)), rank)


def plan_steps(spec: RunSpec, steps: Sequence[int], rank: int) -> list[BatchPlan]:
    """`plan_batch` for any steps (e.g. every W-th, as a DataLoader worker reads) in one pass."""
    steps = list(steps)
    if not steps:
        return []
    if not 0 <= rank < spec.world_size:
        raise UserError(f"rank {rank} is outside the world size {spec.world_size}")
    if min(steps) < 0:
        raise UserError(f"step {min(steps)} is negative")
    locate_step(spec, min(steps))  # refuses a step before the spec's start, in plan_batch's words
    epochs, firsts = _locate_steps(spec, np.asarray(steps, dtype=np.int64))
    b = spec.batch_size
    offsets = rank * b + np.arange(b, dtype=np.int64)
    plans: list[BatchPlan | None] = [None] * len(steps)
    for epoch in distinct(epochs).tolist():
        chosen = np.flatnonzero(epochs == epoch)
        positions = (firsts[chosen][:, None] + offsets).ravel()
        padding = positions >= spec.epoch_length
        positions %= spec.epoch_length
        sources, indices, source_epochs = _samples(spec, epoch, positions)
        seeds = sample_seeds(spec.seed, source_epochs, sources, indices)
        for i, at in enumerate(chosen.tolist()):
            part = slice(i * b, (i + 1) * b)
            plans[at] = BatchPlan(steps[at], epoch, rank, positions[part], sources[part], indices[part],
                                  padding[part], seeds[part], source_epochs[part])
    return plans


def _locate_steps(spec: RunSpec, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`locate_step` of many steps (all at or after the spec's start) at once: epochs, positions."""
    start = spec.start
    d = steps - start.step
    first = steps_in_epoch(spec, start.epoch)
    per_epoch = _steps_for(spec, spec.epoch_length)
    later = np.maximum(d - first, 0)
    in_first = d < first
    epochs = np.where(in_first, start.epoch, start.epoch + 1 + later // per_epoch)
    positions = np.where(in_first, start.position + d * spec.global_batch, (later % per_epoch) * spec.global_batch)
    return epochs, positions


def batch_indices(spec: RunSpec, step: int, rank: int) -> np.ndarray:
    """The global sample indices (within their source) that `rank` reads at `step`."""
    return plan_batch(spec, step, rank).indices


def epoch_order(spec: RunSpec, epoch: int) -> np.ndarray:
    """Every sample of `epoch` in order: indices for one source, (source, index) rows for a mixture."""
    sources, indices = samples_at(spec, epoch, np.arange(spec.epoch_length, dtype=np.int64))
    return np.stack([sources, indices], axis=1) if spec.is_mixture else indices


def samples_at(spec: RunSpec, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source id, index within that source) of in-epoch positions."""
    sources, indices, _ = _samples(spec, epoch, positions)
    return sources, indices


def _samples(spec: RunSpec, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`samples_at` plus each sample's source epoch (its mixture epoch's count of source cycles)."""
    positions = np.asarray(positions, dtype=np.int64)
    if not spec.is_mixture:
        return np.zeros(len(positions), np.int32), _permute(spec, 0, epoch, positions), np.full(len(positions), epoch)
    stream = epoch * spec.epoch_length + positions
    block, offset = np.divmod(stream, spec.mixture_block)
    counts = np.asarray(mixture_counts(spec), dtype=np.int64)
    sources = np.empty(len(positions), np.int32)
    occurrence = np.empty(len(positions), np.int64)  # how many of this source came before, run-wide
    for b in distinct(block):
        sel = block == b
        src, rank = _block_schedule(spec, int(b))
        sources[sel] = src[offset[sel]]
        occurrence[sel] = int(b) * counts[sources[sel]] + rank[offset[sel]]
    indices = np.empty(len(positions), np.int64)
    source_epochs = np.empty(len(positions), np.int64)
    for k in range(len(spec.sources)):
        sel = sources == k
        source_epoch, within = np.divmod(occurrence[sel], spec.source_length(k))  # each cycles its own epochs
        out = np.empty(int(sel.sum()), np.int64)
        for e in distinct(source_epoch):
            part = source_epoch == e
            out[part] = _permute(spec, k, int(e), within[part])
        indices[sel] = out
        source_epochs[sel] = source_epoch
    return sources, indices, source_epochs


def mixture_counts(spec: RunSpec) -> list[int]:
    """Samples of each source per block of `mixture_block` positions (largest-remainder rounding)."""
    total = sum(s.weight for s in spec.sources)
    exact = [s.weight / total * spec.mixture_block for s in spec.sources]
    counts = [max(1, int(x)) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda k: (-(exact[k] - int(exact[k])), k))
    i = 0
    while sum(counts) < spec.mixture_block:
        counts[by_remainder[i % len(counts)]] += 1
        i += 1
    while sum(counts) > spec.mixture_block:
        k = max(range(len(counts)), key=lambda j: (counts[j], -j))
        counts[k] -= 1
    return counts


@lru_cache(maxsize=256)
def _block_schedule(spec: RunSpec, block: int) -> tuple[np.ndarray, np.ndarray]:
    """For one block of a mixture: the source at each offset, and its rank among that source's
    offsets in the block. Unshuffled runs interleave evenly; shuffled runs permute the block."""
    counts = mixture_counts(spec)
    base = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    if spec.shuffle is Shuffle.NONE:
        spread = np.concatenate([(np.arange(c) + 0.5) / c for c in counts])
        schedule = base[np.argsort(spread, kind="stable")]
    else:
        schedule = base[Permutation(spec.mixture_block, key_of("mix", spec.seed, block))(np.arange(spec.mixture_block))]
    order = np.argsort(schedule, kind="stable")
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(schedule), np.int64)
    rank[order] = np.arange(len(schedule)) - firsts[schedule[order]]
    return schedule, rank


def _permute(spec: RunSpec, k: int, epoch: int, t: np.ndarray) -> np.ndarray:
    """Index within source k of its t-th sample in its `epoch`."""
    if spec.shuffle is Shuffle.NONE:
        return t.astype(np.int64)
    if spec.shuffle is Shuffle.GLOBAL:
        return Permutation(spec.source_length(k), key_of("global", spec.seed, k, epoch))(t)
    if spec.shuffle is Shuffle.SLIDING:
        return sliding_permute(spec.sources[k].shard_rows, spec.window_shards, spec.seed, k, epoch, t)
    return _window_permute(spec, k, epoch, t)


def _window_permute(spec: RunSpec, k: int, epoch: int, t: np.ndarray) -> np.ndarray:
    """Shards in a shuffled order, then samples shuffled within each window of `window_shards`
    consecutive shuffled shards: a reader needs at most one window of shards at a time."""
    shard_order, starts_in_order, original_starts = _window_layout(spec, k, epoch)
    w = spec.window_shards
    n_shards = len(shard_order)
    window = (np.searchsorted(starts_in_order, t, side="right") - 1) // w
    out = np.empty(len(t), np.int64)
    for j in distinct(window):
        sel = window == j
        lo = starts_in_order[j * w]
        hi = starts_in_order[min((j + 1) * w, n_shards)]
        shuffled = lo + Permutation(hi - lo, key_of("window", spec.seed, k, epoch, int(j)))(t[sel] - lo)
        u = np.searchsorted(starts_in_order, shuffled, side="right") - 1
        out[sel] = original_starts[shard_order[u]] + (shuffled - starts_in_order[u])
    return out


@lru_cache(maxsize=64)
def _window_layout(spec: RunSpec, k: int, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = np.asarray(spec.sources[k].shard_rows, dtype=np.int64)
    order = Permutation(len(rows), key_of("shards", spec.seed, k, epoch))(np.arange(len(rows)))
    starts_in_order = np.concatenate([[0], np.cumsum(rows[order])])
    original_starts = np.concatenate([[0], np.cumsum(rows)])[:-1]
    return order, starts_in_order, original_starts

"""The order backwards: at which (step, rank, slot) a run reads a given sample of a source, in
every epoch up to a step, by inverting the arithmetic of plan.py (no pass over the order).

A sample of source k is its `within`-th in its source epoch (the inverse permutation), which is the
source's occurrence `source_epoch * length + within`; in a mixture, occurrence o is the (o mod c)-th
of source k in mixture block o div c (c = its count per block), found in that block's schedule.
The position in the run's stream then gives epoch, step, rank and slot as plan.py lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.permutation import Permutation, key_of
from dsinspect.loaders.order.plan import _block_schedule, epoch_start_step, mixture_counts, steps_in_epoch
from dsinspect.loaders.order.sliding import sliding_unpermute
from dsinspect.loaders.order.spec import RunSpec, Shuffle

__all__ = ["Reading", "readings", "reading_in", "source_epoch_begins_before"]


@dataclass(frozen=True)
class Reading:
    """Sample read at `step` by `rank` in batch slot `slot`; `epoch` and `position` in the run's epoch,
    `source_epoch` the source's own epoch (the same for a single source)."""

    step: int
    rank: int
    slot: int
    epoch: int
    position: int
    source_epoch: int


def readings(spec: RunSpec, source: int, index: int, until_step: int) -> list[Reading]:
    """Every reading of sample `index` of source `source` at steps [spec.start.step, until_step), in
    step order. Padding repeats (last_batch=pad) are not readings of their own."""
    _check_sample(spec, source, index)
    found: list[Reading] = []
    source_epoch = 0
    while source_epoch_begins_before(spec, source, source_epoch, until_step):
        reading = reading_in(spec, source, source_epoch, index)
        if reading is not None and reading.step < until_step:
            found.append(reading)
        source_epoch += 1
    return found


def reading_in(spec: RunSpec, source: int, source_epoch: int, index: int) -> Reading | None:
    """Where sample `index` of source `source` is read in that source's epoch `source_epoch` (None: before
    this spec's start, or in a tail an epoch drops)."""
    length = _check_sample(spec, source, index)
    within = _unpermute(spec, source, source_epoch, index)
    epoch, position = _stream_place(spec, source, source_epoch * length + within)
    return _read_at(spec, epoch, position, source_epoch)


def source_epoch_begins_before(spec: RunSpec, source: int, source_epoch: int, until_step: int) -> bool:
    """Whether any sample of the source's epoch `source_epoch` can be read before `until_step` (its first
    occurrence in the stream lies in a run epoch that starts before it)."""
    epoch, _ = _stream_place(spec, source, source_epoch * spec.source_length(source))
    return epoch_start_step(spec, max(epoch, spec.start.epoch)) < until_step


def _check_sample(spec: RunSpec, source: int, index: int) -> int:
    """The source's length, once the source and the sample are known to be in the run."""
    if not 0 <= source < len(spec.sources):
        raise UserError(f"source {source} is outside 0..{len(spec.sources) - 1}")
    length = spec.source_length(source)
    if not 0 <= index < length:
        raise UserError(f"sample {index} is outside 0..{length - 1} of source {spec.sources[source].name}")
    if spec.shuffle is Shuffle.WINDOW:
        raise UserError("finding where a sample was read is not implemented for shuffle=window")
    return length


def _unpermute(spec: RunSpec, k: int, source_epoch: int, index: int) -> int:
    if spec.shuffle is Shuffle.NONE:
        return index
    if spec.shuffle is Shuffle.SLIDING:
        return sliding_unpermute(spec.sources[k].shard_rows, spec.window_shards, spec.seed, k, source_epoch, index)
    return int(Permutation(spec.source_length(k), key_of("global", spec.seed, k, source_epoch)).inverse(index))


def _stream_place(spec: RunSpec, k: int, occurrence: int) -> tuple[int, int]:
    """(run epoch, in-epoch position) of source k's `occurrence`-th sample."""
    if not spec.is_mixture:
        return divmod(occurrence, spec.epoch_length)
    count = mixture_counts(spec)[k]
    block, rank = divmod(occurrence, count)
    schedule, _ = _block_schedule(spec, block)
    offset = int(np.flatnonzero(schedule == k)[rank])
    return divmod(block * spec.mixture_block + offset, spec.epoch_length)


def _read_at(spec: RunSpec, epoch: int, position: int, source_epoch: int) -> Reading | None:
    """Who reads in-epoch `position` of `epoch` (None: before this spec's start, or the dropped tail)."""
    start = spec.start
    if epoch < start.epoch or (epoch == start.epoch and position < start.position):
        return None
    base = start.position if epoch == start.epoch else 0
    d, offset = divmod(position - base, spec.global_batch)
    if d >= steps_in_epoch(spec, epoch):
        return None  # the tail an epoch drops (last_batch=drop)
    rank, slot = divmod(offset, spec.batch_size)
    return Reading(epoch_start_step(spec, epoch) + d, rank, slot, epoch, position, source_epoch)

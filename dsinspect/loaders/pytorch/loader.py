"""TorchLoader: a torch DataLoader over TorchBatches whose state is the global step of the next batch
the consumer gets. Its workers send runs of batches through shared-memory rings (transfer.py), which
it sets up before the workers start and removes however the pass ends. With a recording dataset,
it writes the run record at the consumer: a line per batch it hands over (recording.py).
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, default_convert

from dsinspect.errors import UserError
from dsinspect.loaders.order.plan import epoch_end, locate_step
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.pytorch.consistency import check_ranks_agree
from dsinspect.loaders.pytorch.dataset import TorchBatches
from dsinspect.loaders.pytorch.ring import RingReader, new_prefix, ring_slots
from dsinspect.loaders.pytorch.transfer import Transfer, receive

__all__ = ["TorchLoader"]


class TorchLoader:
    """A torch DataLoader over TorchBatches whose state is the global step of the next batch the
    consumer gets, so it restores into any number of workers, ranks or batch size.

    When the dataset records (`TorchBatches(..., record_dir=...)`), the TorchLoader writes the run
    record in this process, of what the consumer received: a segment with the first batch or at
    `load_state_dict`, then per batch its fingerprint, per-sample digests and the seconds the
    consumer waited for it; the workers write nothing. `state_dict()` makes every line so far
    durable before it returns and names the segment. Under torch.distributed each pass begins
    with one all_gather of where the ranks stand (see TorchBatches): ranks resumed from states of
    different checkpoints (another step, or another position at the same step) all raise UserError
    before the first batch.

    With workers, each pass's first batch is made in this process before they start (they start
    when the consumer asks for the second): the first batch of a fresh node or a resume waits
    neither for workers to start nor for several cold reads at once. Without workers (and without
    `pin_memory`) it iterates the dataset itself, reading consecutive steps together, and converts
    non-tensor values as the DataLoader would."""

    def __init__(self, dataset: TorchBatches, num_workers: int = 0, *, batches_per_transfer: int = 16,
                 **dataloader_options: Any):
        """`batches_per_transfer`: with workers, each sends runs of up to this many consecutive
        batches as one item through the DataLoader (its per-item cost dominates small batches),
        and of no more than ~2 MiB (judged by the pass's first batch: large batches gain nothing
        from runs); each worker's first runs are 1, 2, 4, ... batches, so the first batch waits for
        one batch. Each worker's ring in shared memory holds (prefetch_factor × num_workers + 2)
        such runs."""
        if batches_per_transfer < 1:
            raise UserError(f"batches_per_transfer must be at least 1, not {batches_per_transfer}")
        self.batches_per_transfer = batches_per_transfer
        for option in ("batch_size", "sampler", "batch_sampler", "collate_fn", "persistent_workers", "in_order"):
            if option in dataloader_options:
                raise UserError(f"TorchLoader sets {option} itself: the dataset makes whole batches in step order")
        self.dataset, self.num_workers, self.options = dataset, num_workers, dataloader_options
        self._next = dataset.step
        self._pass: weakref.ref | None = None  # the running pass, which close() ends

    @property
    def step(self) -> int:
        """The step of the next batch the consumer gets."""
        return self._next

    @property
    def epoch(self) -> int:
        return locate_step(self.dataset.spec, self._next)[0]

    def __len__(self) -> int:
        """Batches left in the current epoch."""
        return epoch_end(self.dataset.spec, self._next) - self._next

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._end_pass()
        batches = self._batches()
        self._pass = weakref.ref(batches)
        return batches

    def _batches(self) -> Iterator[dict[str, Any]]:
        dataset = self.dataset
        if dataset.check_ranks:
            check_ranks_agree(dataset._point(self._next))
        end = epoch_end(dataset.spec, self._next)
        record = dataset._record
        asked = time.monotonic()
        first: list[dict[str, Any]] = []
        if self.num_workers > 0 and self._next < end and not self.options.get("pin_memory"):
            # The pass's first batch is made here, and the workers start when the consumer asks for
            # the next: a fresh node's first batch is then one cold read (~90 ms measured), not two
            # workers starting (~50 ms) and reading cold at once on the same cores (230-258 ms),
            # and a resume's first batch does not wait for workers to start.
            first = [dataset._read_alone(self._next)]
        run = self._run_length(first[0] if first else None)
        dataset._seek(self._next + len(first))
        source, ring = iter(()), None
        try:
            for batch in first:
                yield self._hand_over(batch, record, asked)
                asked = time.monotonic()
            if dataset.step < end:
                if record is not None:
                    record.flush()  # nothing pending for forked workers to inherit
                source, ring = self._start_workers(run)
            for item in source:
                for batch in receive(item, ring):
                    yield self._hand_over(batch, record, asked)
                    asked = time.monotonic()
            self._next = end
        finally:  # however the pass ends: stop the workers, then remove every segment they made
            shutdown = getattr(source, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            if ring is not None:
                ring.close()

    def _hand_over(self, batch: dict[str, Any], record: Any, asked: float) -> dict[str, Any]:
        """`batch`, recorded (when the dataset records) as given to the consumer who asked at `asked`."""
        self._next = int(batch["step"]) + 1  # handed over: a state saved now resumes after it
        if record is not None:
            record.record_tensors(batch, *self.dataset._segment_args(), wait=time.monotonic() - asked)
        return batch

    def _run_length(self, batch: dict[str, Any] | None) -> int:
        """Batches per worker run: `batches_per_transfer`, fewer when `batch` (the pass's first)
        shows that many would pass _RUN_BYTES (a ring slot holds a run: memory, not speed, for
        batches whose copy outweighs the DataLoader's per-item cost)."""
        size = _nbytes(batch) if batch is not None else 0
        return max(1, min(self.batches_per_transfer, _RUN_BYTES // size)) if size else self.batches_per_transfer

    def _start_workers(self, run: int) -> tuple[Iterator[Any], RingReader | None]:
        """The DataLoader's iterator over the rest of the pass (its workers started), and the
        shared-memory rings they send through."""
        dataset = self.dataset
        # Workers write each batch's arrays into a shared-memory ring and send a small descriptor;
        # the arrays are copied out here into tensors. torch's own transfer (a new shared-memory
        # segment per tensor) and pickling numpy through the pipe both cost far more (measured).
        # Not with pin_memory, which pins tensors made by torch.
        numpy = self.num_workers > 0 and not self.options.get("pin_memory")
        options = {"collate_fn": _keep} if numpy else {}
        loader = DataLoader(self.dataset, batch_size=None, num_workers=self.num_workers, **options, **self.options)
        ring = RingReader(new_prefix(), self.num_workers) if numpy else None
        if ring is not None:
            slots = ring_slots(loader.prefetch_factor or 2, self.num_workers)
            dataset._transfer = Transfer(ring.prefix, slots, run)
        dataset._consumer_records = True  # the producers (here or in workers) neither record nor check
        try:
            if self.num_workers > 0:
                dataset._share_checks()
            if self.num_workers == 0 and not self.options.get("pin_memory"):
                # In this process the DataLoader (made above only to check the options) would add a
                # profiler scope and a default_convert walk per batch: ~60 of ~190 us a token batch
                return map(_as_collated, iter(dataset)), None
            return iter(loader), ring  # starts the workers, which take the settings above with them
        except BaseException:
            if ring is not None:
                ring.close()
            raise
        finally:
            dataset._transfer = None
            dataset._consumer_records = False

    def _end_pass(self) -> None:
        running = self._pass() if self._pass is not None else None
        if running is not None:
            running.close()
        self._pass = None

    def state_dict(self) -> dict[str, Any]:
        """The state of the next batch the consumer gets. When recording, every line up to here is
        durable before it returns, and the state names the record's segment."""
        return LoaderState.at(self.dataset.spec, self._next, self.dataset.rank, self.dataset._sync_record()).to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state` (from a TorchLoader, Loader or elastic_state), whatever its workers or ranks."""
        self.dataset._load(state)  # the ranks are compared when the pass starts
        self._next = self.dataset.step

    def close(self) -> None:
        """End a pass left unfinished (its workers and shared memory) and release the dataset's Loader."""
        self._end_pass()
        self.dataset.close()


_RUN_BYTES = 2 << 20  # a worker run's bytes at most (TorchLoader._run_length): 15 batches of 32 × 1024 int32 tokens


def _nbytes(value: Any) -> int:
    """Bytes of the tensors and arrays in a batch (dicts and lists walked)."""
    if isinstance(value, (torch.Tensor,)):
        return value.element_size() * value.nelement()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def _as_collated(batch: dict[str, Any]) -> dict[str, Any]:
    """What a DataLoader without workers makes of a batch (default_convert): tensors as they are,
    every other value (a transform's output, Python objects) converted as it converts them."""
    return {k: v if isinstance(v, torch.Tensor) else default_convert(v) for k, v in batch.items()}


def _keep(batch: Any) -> Any:
    """The TorchLoader's collate: nothing in the worker (the batch is made whole there)."""
    return batch

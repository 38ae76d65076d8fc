"""TorchLoader: a torch DataLoader over TorchBatches whose state is the global step of the next batch
the consumer gets. Its workers send runs of batches through shared-memory rings (transfer.py), which
it sets up before the workers start and removes however the pass ends.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator

from torch.utils.data import DataLoader

from dsinspect.errors import UserError
from dsinspect.loaders.order.plan import epoch_end, locate_step
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.pytorch.dataset import TorchBatches
from dsinspect.loaders.pytorch.ring import RingReader, new_prefix, ring_slots
from dsinspect.loaders.pytorch.transfer import Transfer, receive

__all__ = ["TorchLoader"]


class TorchLoader:
    """A torch DataLoader over TorchBatches whose state is the global step of the next batch the
    consumer gets, so it restores into any number of workers, ranks or batch size."""

    def __init__(self, dataset: TorchBatches, num_workers: int = 0, *, batches_per_transfer: int = 8,
                 **dataloader_options: Any):
        """`batches_per_transfer`: with workers, each sends runs of this many consecutive batches
        as one item through the DataLoader (its per-item cost dominates small batches). Each
        worker's ring in shared memory holds (prefetch_factor × num_workers + 2) such runs."""
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
        self.dataset._seek(self._next)
        end = epoch_end(self.dataset.spec, self._next)
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
            self.dataset._transfer = Transfer(ring.prefix, slots, self.batches_per_transfer)
        try:
            source = iter(loader)  # starts the workers, which take the setting above with them
        except BaseException:
            if ring is not None:
                ring.close()
            raise
        finally:
            self.dataset._transfer = None
        try:
            for item in source:
                for batch in receive(item, ring):
                    self._next = int(batch["step"]) + 1  # handed over: a state saved now resumes after it
                    yield batch
            self._next = end
        finally:  # however the pass ends: stop the workers, then remove every segment they made
            shutdown = getattr(source, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            if ring is not None:
                ring.close()

    def _end_pass(self) -> None:
        running = self._pass() if self._pass is not None else None
        if running is not None:
            running.close()
        self._pass = None

    def state_dict(self) -> dict[str, Any]:
        return LoaderState.at(self.dataset.spec, self._next, self.dataset.rank).to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state` (from a TorchLoader, Loader or elastic_state), whatever its workers or ranks."""
        self.dataset.load_state_dict(state)
        self._next = self.dataset.step

    def close(self) -> None:
        """End a pass left unfinished (its workers and shared memory) and release the dataset's Loader."""
        self._end_pass()
        self.dataset.close()


def _keep(batch: Any) -> Any:
    """The TorchLoader's collate: nothing in the worker (the batch is made whole there)."""
    return batch

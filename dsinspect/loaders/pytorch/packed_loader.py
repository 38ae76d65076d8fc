"""PackedTorchLoader: one rank's packed batches (docs/PRETRAINING.md) as a language model step's
tensors, read in any number of DataLoader workers, in the same order and with the same state as
`PackedLoader`.

Worker w of W reads runs of consecutive steps (run c: the steps `run_span(c, W, K)` names, as the
row TorchLoader's workers do; each worker's runs are 1, 2, 4, ... K steps) and sends each run as one
DataLoader item; torch takes items from the workers round-robin, so the consumer gets the steps in
order whatever W is. Workers read through their own PackedLoader (the node-local shard cache is on
disk, shared by the node); the run record is written here, at the consumer, of what it was handed.
A run crosses the worker pipe as numpy arrays and a few small objects (8 × 2,049 tokens is 64 KiB):
no shared-memory ring as for rows, whose batches can be far larger.
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Iterator

from torch.utils.data import DataLoader, IterableDataset

from dsinspect.errors import UserError
from dsinspect.loaders.order.plan import epoch_end, locate_step
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState, ResumePoint
from dsinspect.loaders.pytorch.consistency import check_ranks_agree
from dsinspect.loaders.pytorch.dataset import _placement, _worker, run_span
from dsinspect.loaders.pytorch.packed import packed_to_torch
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.read.packed_loader import PackedLoader
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["PackedTorchLoader"]


class PackedTorchLoader:
    """One rank's packed batches as dicts of tensors (`packed_to_torch`), from `num_workers`
    DataLoader workers or this process. Iterating yields the rest of the current epoch; the state is
    the step of the next batch the consumer gets (a `LoaderState`: it restores into any worker count,
    world size or batch size, and into `PackedLoader`, and theirs into this). `rank` defaults to
    torch.distributed's (adopting its world size), else 0; under torch.distributed the ranks compare
    where they stand at each pass (one all_gather; `check_ranks=False` skips it). `record_dir`: the
    rank's run record (docs/RUN_RECORDS.md), a line per batch handed over, with per-sequence digests."""

    def __init__(self, spec: RunSpec, catalog: str | Catalog, rank: int | None = None, num_workers: int = 0, *,
                 batches_per_transfer: int = 16, cache_bytes: int | None = None, record_dir: str | None = None,
                 record_samples: bool | str = "auto", check_ranks: bool = True, **dataloader_options: Any):
        if spec.sequences is None:
            raise UserError("PackedTorchLoader reads packed sequences: its run spec has no `sequences` "
                            "(rows: TorchLoader(TorchBatches(spec, catalog)))")
        if batches_per_transfer < 1:
            raise UserError(f"batches_per_transfer must be at least 1, not {batches_per_transfer}")
        if num_workers < 0:
            raise UserError(f"num_workers must be at least 0, not {num_workers}")
        for option in ("batch_size", "sampler", "batch_sampler", "collate_fn", "persistent_workers", "in_order"):
            if option in dataloader_options:
                raise UserError(f"PackedTorchLoader sets {option} itself: its workers make whole batches "
                                "in step order")
        self.spec, self.rank = _placement(spec, rank)
        if not 0 <= self.rank < self.spec.world_size:
            raise UserError(f"rank {self.rank} is outside the world size {self.spec.world_size}")
        self.catalog_url = catalog.url if isinstance(catalog, Catalog) else str(catalog)
        self.num_workers, self.batches_per_transfer = num_workers, batches_per_transfer
        self.options, self.cache_bytes, self.check_ranks = dataloader_options, cache_bytes, check_ranks
        self._next = self.spec.start.step
        self._parent: str | None = None  # the record segment of the state this loader resumed from
        self._recorder = RunRecorder(record_dir, self.rank, samples=record_samples) if record_dir else None
        self._pass: weakref.ref | None = None

    @property
    def step(self) -> int:
        """The step of the next batch the consumer gets."""
        return self._next

    @property
    def epoch(self) -> int:
        return locate_step(self.spec, self._next)[0]

    def __len__(self) -> int:
        """Batches left in the current epoch."""
        return epoch_end(self.spec, self._next) - self._next

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._end_pass()
        batches = self._batches()
        self._pass = weakref.ref(batches)
        return batches

    def _batches(self) -> Iterator[dict[str, Any]]:
        first, end = self._next, epoch_end(self.spec, self._next)
        if self.check_ranks:
            epoch, position = locate_step(self.spec, first)
            check_ranks_agree(ResumePoint(first, epoch, position, self.spec.order_hash, self.spec.hash,
                                          self._parent or ""))
        if self._recorder is not None:
            self._recorder.begin(self.spec, self._parent)
        asked = time.monotonic()
        source: Any = iter(())
        try:
            if self.num_workers and first < end:
                # The pass's first batch is read here before the workers start (as TorchLoader does for rows):
                # it waits for one cold read, not for workers starting and each reading cold at once.
                yield self._hand_over(self._read_alone(first), asked)
                asked, first = time.monotonic(), first + 1
            steps = PackedSteps(self.spec, self.catalog_url, self.rank, first, end, self.batches_per_transfer,
                                self.cache_bytes)
            if first < end and self.num_workers:
                if self._recorder is not None:
                    self._recorder.flush()  # nothing pending for forked workers to inherit
                source = iter(DataLoader(steps, batch_size=None, num_workers=self.num_workers, collate_fn=_keep,
                                         **self.options))  # starts the workers
            elif first < end:
                source = iter(steps)
            for run in source:
                for batch in run:
                    yield self._hand_over(batch, asked)
                    asked = time.monotonic()
            self._next = max(self._next, end)
        finally:  # however the pass ends: its workers stop (or this process's reader closes)
            shutdown = getattr(source, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def _hand_over(self, batch: PackedBatch, asked: float) -> dict[str, Any]:
        """`batch` as tensors, recorded (when recording) as given to the consumer who asked at `asked`."""
        self._next = batch.step + 1  # handed over: a state saved now resumes after it
        if self._recorder is not None:
            self._recorder.record(batch.step, batch.epoch, batch.fingerprint, len(batch), row_hashes=batch.digests,
                                  data_bytes=batch.tokens.nbytes, wait=time.monotonic() - asked)
        return packed_to_torch(batch)

    def _read_alone(self, step: int) -> PackedBatch:
        """The batch of `step` read by a PackedLoader of its own that starts no fill and is closed before
        this returns: the workers forked next must not inherit running threads."""
        cache = ShardCache(max_bytes=self.cache_bytes)
        with PackedLoader(self.spec, self.rank, Catalog(self.catalog_url), cache=cache, fill=False) as loader:
            return loader.batch_at(step)

    def _end_pass(self) -> None:
        running = self._pass() if self._pass is not None else None
        if running is not None:
            running.close()
        self._pass = None

    def state_dict(self) -> dict[str, Any]:
        """The state of the next batch the consumer gets. When recording, every line up to here is
        durable before it returns, and the state names the record's segment."""
        segment = None
        if self._recorder is not None:
            segment = self._recorder.begin(self.spec, self._parent)
            self._recorder.sync()
        return LoaderState.at(self.spec, self._next, self.rank, segment).to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state` (from a PackedTorchLoader or PackedLoader), whatever its workers,
        world size or batch size. O(1): nothing is read or skipped."""
        self._end_pass()
        saved = LoaderState.from_json(state)
        self.spec = saved.resume_spec(self.spec)
        self._next, self._parent = self.spec.start.step, saved.segment
        if self._recorder is not None:
            self._recorder.begin(self.spec, self._parent)

    def close(self) -> None:
        """End a pass left unfinished (its workers) and make the record durable."""
        self._end_pass()
        if self._recorder is not None:
            self._recorder.close()

    def __enter__(self) -> "PackedTorchLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PackedSteps(IterableDataset):
    """The steps [first, end) of one rank as runs of PackedBatches: in DataLoader worker w of W, runs
    w, w + W, ... (`run_span`); in this process, every run. Picklable (a spawned worker gets the spec
    as JSON and opens its own catalog and PackedLoader)."""

    def __init__(self, spec: RunSpec, catalog_url: str, rank: int, first: int, end: int, chunk: int,
                 cache_bytes: int | None):
        self.spec, self.catalog_url, self.rank = spec, catalog_url, rank
        self.first, self.end, self.chunk, self.cache_bytes = first, end, chunk, cache_bytes

    def __iter__(self) -> Iterator[list[PackedBatch]]:
        worker, workers = _worker()
        reader = PackedLoader(self.spec, self.rank, Catalog(self.catalog_url),
                              cache=ShardCache(max_bytes=self.cache_bytes))
        try:
            run = worker
            steps = self._steps(run, workers)
            while steps:
                following = self._steps(run + workers, workers)  # this worker's next run: fetched behind
                yield reader.batches_at(steps, ahead=following)
                run, steps = run + workers, following
        finally:
            reader.close()

    def _steps(self, run: int, workers: int) -> range:
        offset, size = run_span(run, workers, self.chunk)
        start = self.first + offset
        return range(start, min(start + size, self.end)) if start < self.end else range(0)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "spec": self.spec.to_json()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, spec=RunSpec.from_json(state["spec"]))


def _keep(run: Any) -> Any:
    """The collate: nothing in the worker (a run is made whole there)."""
    return run

"""TorchBatches: one rank's batches as a torch IterableDataset, the same for any number of DataLoader
workers, with a global state that restores into any number of workers or ranks.

Worker w of W makes exactly the steps first + w, first + w + W, ... of a pass; torch fetches from
workers round-robin in order, so the consumer sees first, first + 1, ... whatever W is. Under a
TorchLoader, workers make runs of consecutive steps instead (run c = steps first + cK ... first +
cK + K - 1, worker w makes runs w, w + W, ...) and send each run as one DataLoader item (transfer.py).

With `record_dir`, the process that makes a batch writes its run record line (recording.py); under
a TorchLoader the TorchLoader records instead, at the consumer.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any, Sequence

import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from dsinspect.errors import UserError
from dsinspect.loaders.order.plan import epoch_end, epoch_start_step, locate_step
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState, ResumePoint
from dsinspect.loaders.pytorch.consistency import check_ranks_agree, distributed_world
from dsinspect.loaders.pytorch.conversion import batch_to_torch, check_columns, worker_arrays
from dsinspect.loaders.pytorch.recording import RankRecord
from dsinspect.loaders.pytorch.ring import RingBatch
from dsinspect.loaders.pytorch.transfer import ChunkSender, Transfer, WorkerChunk, as_received, tensors_to_numpy
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["TorchBatches", "elastic_state"]

PRODUCER_FORMAT = "dsinspect.torch-producer/1"


class TorchBatches(IterableDataset):
    """One rank's batches for a torch DataLoader (use batch_size=None): each pass yields the rest of
    the current epoch. Workers open their own catalog and Loader; only the URL and the spec JSON
    cross (a memory:// catalog reaches forked workers only). Worker copies cannot report progress to
    the parent: wrap it in TorchLoader, or call set_epoch(e) before each epoch as with a sampler.

    `record_dir` writes run records as `Loader` does (docs/RUN_RECORDS.md): a segment at
    `load_state_dict` or with the first batch, then a line per step with the fingerprint of the rows
    as stored and per-sample digests (`record_samples`: True, False or "auto"). The line is written
    by the process that makes the batch (with DataLoader workers: each worker, every line handed to
    the OS before its batch leaves), or, under a TorchLoader, by the consumer. `state_dict()` in the
    main process makes every line so far durable and names the segment. Fingerprints of a
    transform's output (`fingerprint_of="transformed"`) are Loader-only.

    Under torch.distributed the ranks compare where they stand (step, position in the order, run
    spec, record segment: one all_gather) when a state is loaded in the main process and at each
    pass the main process iterates; ranks that disagree (states of different checkpoints) all raise
    UserError before the first batch. Every rank must load and iterate; `check_ranks=False` skips
    it (a loader only some ranks use). DataLoader workers cannot take part, so under
    torch.distributed a StatefulDataLoader state is not restored as is in workers: restore
    `load_state_dict(elastic_state(state))` on every rank (checked, the same batches)."""

    def __init__(self, spec: RunSpec, catalog: str | Catalog, columns: Sequence[str] | None = None,
                 rank: int | None = None, *, dense: Sequence[str] = (), transform=None,
                 cache_bytes: int | None = None, record_dir: str | None = None,
                 record_samples: bool | str = "auto", check_ranks: bool = True):
        if catalog is None:
            raise UserError("TorchBatches needs a catalog: TorchBatches(spec, Catalog(url) or its URL)")
        self.spec, self.rank = _placement(spec, rank)
        self._distributed = distributed_world() > 1  # kept for workers, which cannot ask (spawned ones)
        self.catalog_url = catalog.url if isinstance(catalog, Catalog) else str(catalog)
        self.columns = list(columns) if columns else None
        self.dense = tuple(dense)
        self.transform = transform  # runs in the worker; its output arrives as batch["transformed"]
        self.cache_bytes = cache_bytes  # bound of the node-local shard cache this process reads through
        self._base = self.spec.start.step  # where the next pass starts, for every worker
        self._loader: Loader | None = None
        self._loader_pid = 0
        self._cache: ShardCache | None = None  # this process's (see _shard_cache)
        self._shas: list[str] | None = None  # of the run's shards, for _share_checks
        self._transfer: Transfer | None = None  # set by TorchLoader for its workers: how they send batches
        self._sender: ChunkSender | None = None  # this worker's side of the transfer, made at its first run
        self.check_ranks = check_ranks
        self._record = RankRecord(record_dir, self.rank, record_samples) if record_dir else None
        self._parent: str | None = None  # the record segment of the state this dataset resumed from
        self._kept_segment: tuple[RunSpec, str | None] | None = None  # a worker continuing a saved segment
        self._consumer_records = False  # set by TorchLoader while it starts a pass: producers stay quiet
        source = self.spec.sources[0]
        fields = self._reader().catalog.version(source.name, source.version).fields
        check_columns({f.name: f.type for f in fields}, self.columns, self.dense)

    @property
    def step(self) -> int:
        """The step the next pass starts at."""
        return self._base

    @property
    def epoch(self) -> int:
        return locate_step(self.spec, self._base)[0]

    def __iter__(self) -> "_Producer | _ChunkProducer":
        worker, workers = _worker()
        end = epoch_end(self.spec, self._base)
        transfer = getattr(self, "_transfer", None)
        if transfer is not None and get_worker_info() is not None:
            return _ChunkProducer(self, self._base, end, workers, worker, transfer.chunk)
        mine = not self._consumer_records  # under a TorchLoader, it records and checks the ranks
        check = mine and self.check_ranks and get_worker_info() is None
        return _Producer(self, self._base + worker, end, workers, worker, record=mine and self._record is not None,
                         check=check)

    def batch_at(self, step: int) -> dict[str, Any]:
        """The batch of any step as tensors, read now."""
        return batch_to_torch(self._reader().batch_at(step), self.dense)

    def _produce_chunk(self, steps: range) -> RingBatch | WorkerChunk:
        """A TorchLoader worker's batches of `steps` as numpy arrays (the TorchLoader makes the same
        tensors of them), written into this worker's shared-memory ring, or, should that fail,
        sent through the pipe."""
        chunk = []
        for batch in self._reader().batches_at(steps):  # one read for the run
            arrays = worker_arrays(batch, self.dense)  # the ring (or pickling) copies them; metadata as one array
            if batch.transformed is not None:
                arrays["transformed"] = tensors_to_numpy(batch.transformed)
            chunk.append(arrays)
        if self._sender is None:
            self._sender = ChunkSender(self._transfer, _worker()[0])
        return self._sender.send(chunk)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass read `epoch` (from its start), unless the position already lies in it."""
        if self.epoch != epoch:
            self._seek(epoch_start_step(self.spec, epoch))

    # -- state: a LoaderState, global and world-size free --------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the next pass starts, as a loader state (workers: the start of their pass). When
        recording, it names the record's segment, and in the main process every line so far is
        durable before it returns."""
        return LoaderState.at(self.spec, self._base, self.rank, self._sync_record()).to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start the next pass where `state` stood; the state may come from any world size. When
        recording, a new segment of the record begins (in the main process: now). In the main
        process under torch.distributed, a collective: every rank loads, and ranks whose states
        disagree all raise UserError here."""
        self._load(state)
        if self.check_ranks and get_worker_info() is None:
            check_ranks_agree(self._point(self._base))

    def _point(self, step: int) -> ResumePoint:
        """Where a pass from `step` stands, as the ranks compare it: the spec's hash covers its batch
        size, world size and start; the segment is the record's of the state loaded, if any."""
        epoch, position = locate_step(self.spec, step)
        return ResumePoint(step, epoch, position, self.spec.order_hash, self.spec.hash, self._parent or "")

    def _load(self, state: dict[str, Any]) -> None:
        saved = LoaderState.from_json(state)
        self.spec = saved.resume_spec(self.spec)
        self.close()
        self._seek(self.spec.start.step)
        self._parent, self._kept_segment = saved.segment, None
        if self._record is not None and get_worker_info() is None:
            self._record.recorder().begin(*self._segment_args())

    def _segment_args(self) -> tuple[RunSpec, str | None]:
        """(spec, parent) of the record segment this dataset's batches belong to."""
        return self._kept_segment or (self.spec, self._parent)

    def _segment(self) -> str | None:
        return self._record.segment(*self._segment_args()) if self._record is not None else None

    def _sync_record(self) -> str | None:
        """The segment, begun (its spec file and header written) and, in the main process, every
        line so far durable. A DataLoader worker only names it: its lines reach the OS one by one,
        and an fsync per batch (torchdata snapshots a worker's state every step) would cost."""
        if self._record is None:
            return None
        if get_worker_info() is not None:
            return self._segment()
        recorder = self._record.recorder()
        segment = recorder.begin(*self._segment_args())
        recorder.sync()
        return segment

    def close(self) -> None:
        """Release this process's Loader (its shard pins); the next read opens a new one. Pending
        run record lines go to the OS."""
        if self._loader is not None and self._loader_pid == os.getpid():
            self._loader.close()
        self._loader = None
        if self._record is not None:
            self._record.flush()

    def _seek(self, step: int) -> None:
        self._base = step

    def _reader(self) -> Loader:
        """This process's own Loader: a forked worker must not share the parent's open files."""
        if self._loader is None or self._loader_pid != os.getpid():
            self._loader = self._new_loader()
            self._loader_pid = os.getpid()
        return self._loader

    def _new_loader(self, fill: bool = True) -> Loader:
        return Loader(self.spec, self.rank, Catalog(self.catalog_url), columns=self.columns, prefetch=0,
                      transform=self.transform, cache=self._shard_cache(), fill=fill)

    def _shard_cache(self) -> ShardCache:
        """This process's shard cache, kept across passes. A forked worker uses the copy it
        inherited, whose block checks `share_checks` put in memory shared with the main process:
        a block any process of the job checked is not checked again (workers are new every pass)."""
        if self._cache is None:
            self._cache = ShardCache(max_bytes=self.cache_bytes)
        return self._cache

    def _share_checks(self) -> None:
        """Before workers fork: share the block checks of the run's shards cached now."""
        if self._shas is None:  # once: a remote catalog's manifests are not read again every pass
            catalog = Catalog(self.catalog_url)
            self._shas = [shard.sha256 for source in self.spec.sources
                          for shard in catalog.version(source.name, source.version).manifest.shards]
        self._shard_cache().share_checks(self._shas)

    def _read_alone(self, step: int) -> dict[str, Any]:
        """The batch of `step` as tensors, read by a Loader of its own that starts nothing in the
        background and is closed before this returns: the TorchLoader makes a pass's first batch so
        and then forks its workers, which must not inherit running threads or pinned shards."""
        loader = self._new_loader(fill=False)
        try:
            read = loader.batch_at(step)
            batch = batch_to_torch(read, self.dense)
            if read.transformed is not None:
                batch["transformed"] = as_received(read.transformed)
            return batch
        finally:
            loader.close()

    def __getstate__(self) -> dict[str, Any]:
        kept = self._kept_segment
        return {**self.__dict__, "spec": self.spec.to_json(), "_loader": None, "_sender": None, "_cache": None,
                "_kept_segment": (kept[0].to_json(), kept[1]) if kept else None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        kept = state.get("_kept_segment")
        self.__dict__.update(state, spec=RunSpec.from_json(state["spec"]),
                             _kept_segment=(RunSpec.from_json(kept[0]), kept[1]) if kept else None)


class _Producer:
    """The steps one process makes in one pass: next, next + stride, ... before `end`. torchdata's
    StatefulDataLoader saves and restores it in each worker. `record`: write each batch's run
    record line here; `check`: begin the pass comparing the ranks (check_ranks_agree)."""

    def __init__(self, dataset: TorchBatches, next_step: int, end: int, stride: int, worker: int, *,
                 record: bool = False, check: bool = False):
        self.dataset, self.next, self.end, self.stride, self.worker = dataset, next_step, end, stride, worker
        self._made = 0
        self._record = dataset._record if record else None
        self._check = check

    def __iter__(self) -> "_Producer":
        return self

    def __next__(self) -> dict[str, Any]:
        if self._check:  # at the first batch, so a state torchdata restores after iter() counts
            self._check = False
            check_ranks_agree(self.dataset._point(self.next))  # before the end test: every rank takes part
        if self.next >= self.end:
            self.dataset._seek(self.end)  # the pass is over: the next one reads the next epoch
            raise StopIteration
        step = self.next
        ds = self.dataset
        if self._made == 0:  # this worker reads every stride-th step: plan and fetch ahead along those
            ds._reader().set_stride(self.stride)
        asked = time.monotonic()
        loader = ds._reader()
        read = loader.batch_in_run(step) if self.stride == 1 else loader.batch_at(step)  # in order: runs
        batch = batch_to_torch(read, ds.dense)
        if self._record is not None:  # before the batch leaves this process
            recorder = self._record.recorder()
            recorder.begin(*ds._segment_args())
            wait = time.monotonic() - asked if get_worker_info() is None else None  # a worker's time is not the wait
            recorder.record(read.step, read.epoch, read.fingerprint, len(read), row_hashes=read.hash_array,
                            data_bytes=read.nbytes, wait=wait)
        self._made += 1
        self.next = step + self.stride
        if self.stride == 1:
            ds._seek(self.next)  # one producer: a new pass continues right here
        return batch

    def state_dict(self) -> dict[str, Any]:
        ds = self.dataset
        segment = ds._segment()
        state = {"format": PRODUCER_FORMAT, "next": LoaderState.at(ds.spec, self.next, ds.rank, segment).to_json(),
                 "end": self.end, "stride": self.stride, "worker": self.worker}
        if segment is not None:  # what a worker restored from this state needs to continue the segment
            spec, parent = ds._segment_args()
            state["segment"] = {"spec": ds._record.spec_json(spec), "parent": parent}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("format") != PRODUCER_FORMAT:
            raise UserError(f"not a dsinspect producer state (expected format {PRODUCER_FORMAT!r})")
        if (state["stride"], state["worker"]) != (self.stride, self.worker):
            raise UserError(f"state of worker {state['worker']} of {state['stride']} cannot restore into worker "
                            f"{self.worker} of {self.stride}: keep num_workers, or restore elastic_state(...)")
        saved = LoaderState.from_json(state["next"])
        ds = self.dataset
        if saved.order_hash != ds.spec.order_hash:
            raise UserError("producer state belongs to another data order")
        if (saved.world_size, saved.batch_size) != (ds.spec.world_size, ds.spec.batch_size):
            # its step numbers count global batches of the old size: under another size they name other samples
            raise UserError(f"this StatefulDataLoader state was saved with world size {saved.world_size} and batch "
                            f"size {saved.batch_size}, the dataset now has {ds.spec.world_size} and "
                            f"{ds.spec.batch_size}: restore TorchBatches.load_state_dict(elastic_state(state)) instead")
        if ds.check_ranks and get_worker_info() is not None and (ds._distributed or distributed_world() > 1):
            raise UserError("under torch.distributed a StatefulDataLoader state restored in DataLoader workers cannot "
                            "be checked against the other ranks: restore TorchBatches.load_state_dict(elastic_state("
                            "state)) on every rank instead (checked there; the same batches), or use TorchLoader")
        self.next, self.end = saved.step, int(state["end"])
        kept = state.get("segment")
        if ds._record is not None and get_worker_info() is not None and saved.segment and isinstance(kept, dict):
            # A worker cannot know the consumer's step (the least of all workers' next steps), so
            # it cannot start a segment there: it continues the saved one, whose lines past the
            # restored step are superseded by the lines written now (the last written wins).
            spec = RunSpec.from_json(kept["spec"])
            if ds._record.segment(spec, kept.get("parent")) == saved.segment:
                ds._kept_segment = (spec, kept.get("parent"))


class _ChunkProducer:
    """A TorchLoader worker's steps in runs (`run_span`): run c holds consecutive steps, worker w
    of W makes runs w, w + W, ... Each run crosses to the main process as one transfer (torch's
    per-item cost, paid once per run); torch fetches from workers round-robin, so the TorchLoader
    unpacks the runs in step order. Runs start at one batch and double up to `chunk`, so the
    first batch waits for one batch, not a whole run."""

    def __init__(self, dataset: TorchBatches, first: int, end: int, workers: int, worker: int, chunk: int):
        self.dataset, self.first, self.end, self.workers, self.chunk = dataset, first, end, workers, chunk
        self.run = worker  # index of the next run this worker makes
        dataset._reader().set_upcoming(self._upcoming)  # plan ahead along this worker's runs only

    def _upcoming(self, step: int, n: int) -> list[int]:
        """Up to `n` of this worker's steps from `step` on (it lies in the run being made)."""
        steps: list[int] = []
        run = self.run - self.workers
        while len(steps) < n:
            offset, size = run_span(run, self.workers, self.chunk)
            start = self.first + offset
            if start >= self.end:
                break
            steps += range(max(start, step), min(start + size, self.end))
            run += self.workers
        return steps[:n] or [step]

    def __iter__(self) -> "_ChunkProducer":
        return self

    def __next__(self) -> RingBatch | WorkerChunk:
        offset, size = run_span(self.run, self.workers, self.chunk)
        start = self.first + offset
        if start >= self.end:
            self.dataset._seek(self.end)
            raise StopIteration
        self.run += self.workers
        return self.dataset._produce_chunk(range(start, min(start + size, self.end)))


def run_span(run: int, workers: int, chunk: int) -> tuple[int, int]:
    """(first step after the pass's start, steps) of run `run` of a pass made by `workers` workers
    in runs of up to `chunk` steps: each worker's runs are 1, 2, 4, ... steps long until a
    doubling would reach `chunk`, then `chunk` long."""
    levels = (chunk - 1).bit_length()  # run sizes 1, 2, ..., 2**(levels-1) below chunk
    if run < workers * levels:
        level, nth = divmod(run, workers)
        return workers * ((1 << level) - 1) + nth * (1 << level), 1 << level
    return workers * ((1 << levels) - 1) + (run - workers * levels) * chunk, chunk


def _placement(spec: RunSpec, rank: int | None) -> tuple[RunSpec, int]:
    """(spec, rank): an explicit rank, else torch.distributed's (adopting its world size), else 0."""
    if rank is not None or not (dist.is_available() and dist.is_initialized()):
        return spec, rank or 0
    world = dist.get_world_size()
    if world != spec.world_size:
        warnings.warn(f"run spec has world_size {spec.world_size} but torch.distributed has {world}: using "
                      f"{world} (the sample order does not depend on the world size)", stacklevel=3)
        spec = spec.replace(world_size=world)
    return spec, dist.get_rank()


def _worker() -> tuple[int, int]:
    """(worker id, number of workers) in a DataLoader worker, else (0, 1)."""
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


def elastic_state(dataloader_state: dict[str, Any]) -> dict[str, Any]:
    """The global loader state inside a torchdata StatefulDataLoader state, which restores into
    another number of workers (`TorchBatches.load_state_dict`) or ranks."""
    if "_snapshot" in dataloader_state:
        if dataloader_state.get("_steps_since_snapshot"):
            raise UserError("the StatefulDataLoader state lags its last snapshot: use snapshot_every_n_steps=1")
        workers = list(dataloader_state["_snapshot"]["_worker_snapshots"].values())
    else:
        workers = [dataloader_state]
    nexts = [w["fetcher_state"]["dataset_iter_state"]["next"] for w in workers
             if (w.get("fetcher_state") or {}).get("dataset_iter_state")]
    if not nexts:
        raise UserError("no dsinspect producer state in this StatefulDataLoader state")
    return min(nexts, key=lambda s: s["step"])

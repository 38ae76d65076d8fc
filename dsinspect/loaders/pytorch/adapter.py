"""PyTorch adapter: one rank's batches as dicts of tensors, the same for any number of DataLoader
workers, with a global state that restores into any number of workers or ranks.

The only module of the package that imports torch; `import dsinspect` never loads it.

Worker w of W makes exactly the steps first + w, first + w + W, ... of a pass; torch fetches from
workers round-robin in order, so the consumer sees first, first + 1, ... whatever W is. Under a
TorchLoader, workers make runs of consecutive steps instead (run c = steps first + cK ... first +
cK + K - 1, worker w makes runs w, w + W, ...) and write them into a shared-memory ring
(shared_ring.py): one DataLoader item per run, no pickled payload.
"""

from __future__ import annotations

import os
import re
import warnings
import weakref
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, default_convert, get_worker_info

from dsinspect.errors import UserError
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.columns import is_numeric_dense
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.read.loader import Batch, Loader
from dsinspect.loaders.order.plan import epoch_end, epoch_start_step, locate_step
from dsinspect.loaders.pytorch.ring import RingBatch, RingReader, RingWriter, new_prefix, ring_slots
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState

__all__ = ["TorchBatches", "TorchLoader", "batch_to_torch", "unpack", "split_ragged", "elastic_state", "METADATA"]

METADATA = ("step", "epoch", "positions", "indices", "sources", "padding", "seeds", "row_hashes", "nulls",
            "transformed")
PRODUCER_FORMAT = "dsinspect.torch-producer/1"


# -- the dataset ---------------------------------------------------------------------------------

class TorchBatches(IterableDataset):
    """One rank's batches for a torch DataLoader (use batch_size=None): each pass yields the rest of
    the current epoch. Workers open their own catalog and Loader; only the URL and the spec JSON
    cross (a memory:// catalog reaches forked workers only). Worker copies cannot report progress to
    the parent: wrap it in TorchLoader, or call set_epoch(e) before each epoch as with a sampler."""

    def __init__(self, spec: RunSpec, catalog: str | Catalog | None = None, columns: Sequence[str] | None = None,
                 rank: int | None = None, *, dense: Sequence[str] = (), transform=None,
                 cache_bytes: int | None = None):
        self.spec, self.rank = _placement(spec, rank)
        if catalog is None:
            from dsinspect.defaults import open_catalog
            catalog = open_catalog()
        self.catalog_url = catalog.url if isinstance(catalog, Catalog) else str(catalog)
        self.columns = list(columns) if columns else None
        self.dense = tuple(dense)
        self.transform = transform  # runs in the worker; its output arrives as batch["transformed"]
        self.cache_bytes = cache_bytes  # bound of the node-local shard cache this process reads through
        self._base = self.spec.start.step  # where the next pass starts, for every worker
        self._loader: Loader | None = None
        self._loader_pid = 0
        self._transfer: _Transfer | None = None  # set by TorchLoader for its workers: how they send batches
        self._ring_writer: RingWriter | None = None  # this worker's ring, made at its first batch
        _check_columns(self._reader().catalog, self.spec, self.columns, self.dense)

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
        return _Producer(self, self._base + worker, end, workers, worker)

    def batch_at(self, step: int) -> dict[str, Any]:
        """The batch of any step as tensors, read now."""
        return batch_to_torch(self._reader().batch_at(step), self.dense)

    def _produce_chunk(self, steps: range) -> "RingBatch | _WorkerChunk":
        """A TorchLoader worker's batches of `steps` as numpy arrays (the TorchLoader makes the same
        tensors of them), written into this worker's shared-memory ring, or, should that fail,
        sent through the pipe."""
        chunk = []
        for step in steps:
            batch = self._reader().batch_at(step)
            arrays = batch_arrays(batch, self.dense, own=False)  # the ring (or pickling) copies them
            if batch.transformed is not None:
                arrays["transformed"] = _tensors_to_numpy(batch.transformed)
            chunk.append(arrays)
        transfer = self._transfer
        if transfer is not None and transfer.prefix is not None:
            try:
                if self._ring_writer is None:
                    self._ring_writer = RingWriter(transfer.prefix, _worker()[0], transfer.slots)
                return self._ring_writer.put(chunk)
            except OSError as e:  # e.g. no room in /dev/shm: the pipe still works
                warnings.warn(f"shared-memory ring unavailable ({e}); sending batches through the pipe")
                self._transfer = transfer._replace(prefix=None)
        return _WorkerChunk(chunk)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass read `epoch` (from its start), unless the position already lies in it."""
        if self.epoch != epoch:
            self._seek(epoch_start_step(self.spec, epoch))

    # -- state: a LoaderState, global and world-size free --------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the next pass starts, as a loader state (workers: the start of their pass)."""
        return LoaderState.at(self.spec, self._base, self.rank).to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start the next pass where `state` stood; the state may come from any world size."""
        self.spec = LoaderState.from_json(state).resume_spec(self.spec)
        self.close()
        self._seek(self.spec.start.step)

    def close(self) -> None:
        """Release this process's Loader (its shard pins); the next read opens a new one."""
        if self._loader is not None and self._loader_pid == os.getpid():
            self._loader.close()
        self._loader = None

    def _seek(self, step: int) -> None:
        self._base = step

    def _reader(self) -> Loader:
        """This process's own Loader: a forked worker must not share the parent's open files."""
        if self._loader is None or self._loader_pid != os.getpid():
            self._loader = Loader(self.spec, self.rank, Catalog(self.catalog_url), columns=self.columns, prefetch=0,
                                  transform=self.transform, cache=ShardCache(max_bytes=self.cache_bytes))
            self._loader_pid = os.getpid()
        return self._loader

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "spec": self.spec.to_json(), "_loader": None, "_ring_writer": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, spec=RunSpec.from_json(state["spec"]))


class _Producer:
    """The steps one process makes in one pass: next, next + stride, ... before `end`. torchdata's
    StatefulDataLoader saves and restores it in each worker."""

    def __init__(self, dataset: TorchBatches, next_step: int, end: int, stride: int, worker: int):
        self.dataset, self.next, self.end, self.stride, self.worker = dataset, next_step, end, stride, worker
        self._made = 0

    def __iter__(self) -> "_Producer":
        return self

    def __next__(self) -> dict[str, Any]:
        if self.next >= self.end:
            self.dataset._seek(self.end)  # the pass is over: the next one reads the next epoch
            raise StopIteration
        step = self.next
        if self._made == 0:  # this worker reads every stride-th step: plan and fetch ahead along those
            self.dataset._reader().set_stride(self.stride)
        batch = self.dataset.batch_at(step)
        self._made += 1
        self.next = step + self.stride
        if self.stride == 1:
            self.dataset._seek(self.next)  # one producer: a new pass continues right here
        return batch

    def state_dict(self) -> dict[str, Any]:
        ds = self.dataset
        return {"format": PRODUCER_FORMAT, "next": LoaderState.at(ds.spec, self.next, ds.rank).to_json(),
                "end": self.end, "stride": self.stride, "worker": self.worker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("format") != PRODUCER_FORMAT:
            raise UserError(f"not a dsinspect producer state (expected format {PRODUCER_FORMAT!r})")
        if (state["stride"], state["worker"]) != (self.stride, self.worker):
            raise UserError(f"state of worker {state['worker']} of {state['stride']} cannot restore into worker "
                            f"{self.worker} of {self.stride}: keep num_workers, or restore elastic_state(...)")
        saved = LoaderState.from_json(state["next"])
        if saved.order_hash != self.dataset.spec.order_hash:
            raise UserError("producer state belongs to another data order")
        self.next, self.end = saved.step, int(state["end"])


class _ChunkProducer:
    """A TorchLoader worker's steps in runs of `chunk`: of the pass's runs first + c*chunk, ...,
    worker w of W makes runs w, w + W, ... Each run crosses to the main process as one transfer
    (torch's per-item cost, paid once per run); torch fetches from workers round-robin, so the
    TorchLoader unpacks the runs in step order."""

    def __init__(self, dataset: TorchBatches, first: int, end: int, workers: int, worker: int, chunk: int):
        self.dataset, self.first, self.end, self.workers, self.chunk = dataset, first, end, workers, chunk
        self.run = worker  # index of the next run this worker makes
        dataset._reader().set_stride(1)  # runs of consecutive steps: plan ahead along all of them

    def __iter__(self) -> "_ChunkProducer":
        return self

    def __next__(self) -> "RingBatch | _WorkerChunk":
        start = self.first + self.run * self.chunk
        if start >= self.end:
            self.dataset._seek(self.end)
            raise StopIteration
        self.run += self.workers
        return self.dataset._produce_chunk(range(start, min(start + self.chunk, self.end)))


class _Transfer(NamedTuple):
    """How a TorchLoader's workers send batches: runs of `chunk` steps, through the shared-memory
    rings named by `prefix` (`slots` per worker) or, with no prefix, the pipe."""
    prefix: str | None
    slots: int
    chunk: int


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


def _check_columns(catalog: Catalog, spec: RunSpec, columns: list[str] | None, dense: Sequence[str]) -> None:
    """Column names may not shadow metadata keys; `dense` columns must be lists of numbers."""
    source = spec.sources[0]
    types = {f.name: f.type for f in catalog.version(source.name, source.version).fields}
    names = columns or list(types)
    clash = sorted(set(names) & set(METADATA))
    if clash:
        raise UserError(f"columns {clash} clash with batch metadata keys: pick columns=[...] without them")
    for name in dense:
        t = types.get(name) if name in names else None
        if t is None or not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not _is_number(t.value_type):
            raise UserError(f"dense column {name!r} must be a read column holding lists of numbers")


# -- Arrow -> tensors ----------------------------------------------------------------------------

def batch_to_torch(batch: Batch, dense: Sequence[str] = ()) -> dict[str, Any]:
    """A Batch as a dict: per column a tensor, {"values", "offsets"} or Python objects, plus metadata.

    Numbers (and temporal values as their stored integers) give 1-D tensors; fixed-size lists of
    numbers [B, L]; strings, binary and lists of numbers give {"values": 1-D tensor (uint8 for
    bytes and UTF-8), "offsets": int64 [B + 1]}, or [B, L] for columns in `dense`; anything else
    (structs, nested lists, decimals) stays a list of Python objects. Nulls read as 0 / empty, and
    `nulls[column]` flags them.
    """
    out = _as_tensors(batch_arrays(batch, dense))
    if batch.transformed is not None:
        out["transformed"] = batch.transformed
    return out


def batch_arrays(batch: Batch, dense: Sequence[str] = (), *, own: bool = True) -> dict[str, Any]:
    """`batch_to_torch` with numpy arrays (each owning its memory) where it has tensors, and no
    `transformed`: what a DataLoader worker sends. `own=False` leaves a gathered column as the
    read-only array the Loader made, for a caller that copies it at once (into a worker's ring)."""
    out: dict[str, Any] = {}
    nulls: dict[str, np.ndarray] = {}
    gathered = batch._columns or {}
    for name in batch.table.column_names if batch._columns is None else batch._columns:
        ready = gathered.get(name)
        if isinstance(ready, np.ndarray) and _dense_fits(batch._schema.field(name).type, name in dense):
            out[name] = _owned(ready) if own else ready  # a gathered dense column: no Arrow round trip
            continue
        arr = _array(batch.table.column(name))
        if arr.null_count:
            nulls[name] = _owned(arr.is_null().to_numpy(zero_copy_only=False))
        out[name] = _column(arr, name in dense, name)
    plan = batch.plan
    out.update(step=np.array(plan.step, dtype=np.int64), epoch=np.array(plan.epoch, dtype=np.int64),
               positions=_owned(plan.positions.astype(np.int64)), indices=_owned(plan.indices.astype(np.int64)),
               sources=_owned(plan.sources.astype(np.int64)), padding=_owned(plan.padding),
               seeds=_owned(plan.seeds.view(np.int64)), row_hashes=_owned(batch.hash_array), nulls=nulls)
    return out


def _dense_fits(t: pa.DataType, dense: bool) -> bool:
    """Whether a gathered dense column is, as it is, what batch_to_torch gives for it: integers
    and floats, fixed-size lists of them, and lists of them read as `dense` (other lists give
    values/offsets; temporal and binary columns take the Arrow path)."""
    if not is_numeric_dense(t):
        return False
    return not (pa.types.is_list(t) or pa.types.is_large_list(t)) or dense


def _as_tensors(value: Any) -> Any:
    """numpy arrays (in dicts) as tensors sharing their memory."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, dict):
        return {k: _as_tensors(v) for k, v in value.items()}
    return value


def unpack(column: dict[str, torch.Tensor], text: bool = False) -> list[bytes] | list[str]:
    """A {"values", "offsets"} column of bytes or UTF-8 back as a list of bytes (or str)."""
    data = column["values"].numpy().tobytes()
    offsets = column["offsets"].tolist()
    items = [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    return [item.decode("utf-8") for item in items] if text else items


def split_ragged(column: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """A {"values", "offsets"} column as one tensor per row (views, no copy)."""
    return list(torch.split(column["values"], torch.diff(column["offsets"]).tolist()))


def _array(column: pa.ChunkedArray) -> pa.Array:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _column(arr: pa.Array, dense: bool, name: str) -> Any:
    t = arr.type
    if _is_number(t):
        return _numbers(arr)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _var_bytes(arr)
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width:(arr.offset + len(arr)) * width]
        return _owned(data.reshape(len(arr), width))
    if pa.types.is_fixed_size_list(t) and _is_number(t.value_type):
        values = arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size)
        return _numbers(values).reshape(len(arr), t.list_size)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_number(t.value_type):
        return _number_lists(arr, dense, name)
    return arr.to_pylist()


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t)


def _numbers(arr: pa.Array) -> np.ndarray:
    if pa.types.is_temporal(arr.type):
        arr = arr.view(pa.int32() if arr.type.bit_width == 32 else pa.int64())
    if arr.null_count:
        arr = arr.fill_null(False if pa.types.is_boolean(arr.type) else 0)
    return _owned(arr.to_numpy(zero_copy_only=False))


def _var_bytes(arr: pa.Array) -> dict[str, np.ndarray]:
    """Values and offsets straight from the Arrow buffers (one copy, no Python bytes per row)."""
    if arr.null_count:
        arr = arr.fill_null("" if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) else b"")
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    _, offsets_buf, data_buf = arr.buffers()
    if offsets_buf is None:  # an empty array
        return {"values": np.empty(0, dtype=np.uint8), "offsets": np.zeros(1, dtype=np.int64)}
    offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    values = data[offsets[0]:offsets[-1]]
    return {"values": _owned(values), "offsets": _owned(offsets.astype(np.int64) - int(offsets[0]))}


def _number_lists(arr: pa.Array, dense: bool, name: str) -> np.ndarray | dict[str, np.ndarray]:
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = _numbers(arr.flatten())  # flatten honours the slice offset and skips null slots
    if not dense:
        return {"values": values, "offsets": _owned(np.concatenate([[0], np.cumsum(lengths)]))}
    if len(lengths) and (lengths != lengths[0]).any():
        raise UserError(f"dense column {name!r} has lists of lengths {sorted(set(lengths.tolist()))[:5]} in one "
                        "batch; read it as values/offsets instead")
    return values.reshape(len(arr), int(lengths[0]) if len(lengths) else 0)


def _owned(a: np.ndarray) -> np.ndarray:
    """A writable copy: Arrow buffers are read-only, and torch wants writable memory."""
    return np.array(a, copy=True)


# -- the stateful loader -------------------------------------------------------------------------

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
            self.dataset._transfer = _Transfer(ring.prefix, slots, self.batches_per_transfer)
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
                for batch in _unpack(item, ring):
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


def _unpack(item: Any, ring: RingReader | None) -> list[dict[str, Any]]:
    """A DataLoader item as the batches it carries, tensors as default_convert makes them (what
    the worker's collate would have done)."""
    if isinstance(item, RingBatch):
        return ring.take(item, _tensor_copy, default_convert)
    if isinstance(item, _WorkerChunk):
        return [default_convert(batch) for batch in item]
    return [item]


def _tensor_copy(view: np.ndarray) -> Any:
    """An array in a worker's ring as default_convert makes it (arrays of strings and objects stay
    numpy), owning its memory; without default_convert's generic dispatch (~4x the cost)."""
    copy = view.copy()
    return copy if _KEPT_AS_NUMPY.search(copy.dtype.str) else torch.from_numpy(copy)


_KEPT_AS_NUMPY = re.compile(r"[SaUO]")  # torch's np_str_obj_array_pattern: dtypes default_convert leaves alone


class _WorkerChunk(list):
    """Batches as numpy arrays, on their way from a TorchLoader's worker to the TorchLoader
    through the pipe (when its shared-memory ring is unavailable)."""


def _keep(batch: Any) -> Any:
    """The TorchLoader's collate: nothing in the worker (the batch is made whole there)."""
    return batch


def _tensors_to_numpy(value: Any) -> Any:
    """A transform's CPU tensors (in dicts, lists, tuples) as numpy arrays, which default_convert
    turns back into equal tensors; other tensors and values stay as they are."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.requires_grad or value.dtype not in _NUMPY_ROUND_TRIP:
            return value
        return value.contiguous().numpy()
    if isinstance(value, dict) and type(value) is dict:
        return {k: _tensors_to_numpy(v) for k, v in value.items()}
    if type(value) in (list, tuple):  # a tuple as a list: what default_convert makes of it anyway
        return [_tensors_to_numpy(v) for v in value]
    return value


_NUMPY_ROUND_TRIP = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                     torch.float64, torch.bool, torch.complex64, torch.complex128}


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

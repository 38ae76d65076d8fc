"""One rank's batches as a Grain `RandomAccessDataSource`: element i is the batch of step
`start + i` (planned in O(1), read through the node's shard cache), so `grain.MapDataset.source(...)`
needs no sampler and no shuffle of Grain's: the order is dsinspect's, and a Grain iterator's state
(`{"next_index": i}`) is exactly the dsinspect step `start + i` (`loader_state`, `grain_state`).
Picklable: each Grain worker process opens its own Loader on first use (one node cache). Grain
reads elements on a pool of threads (16 by default); the Loader plans in chunks and is not made for
that, so its reads are taken one at a time (a batch is one vectorised gather per column: the
threads gain little over Grain's own prefetching).

`record_dir`: the rank's run record, a line per element the loop takes. Grain's threads and worker
processes make elements far ahead (hundreds), so a line is written where the loop takes its element:
`source.recorded(dataset)` ends the pipeline with a map in the iterating process, which writes the
line from the element's row hashes (read/recording.py). Grain's checkpointing never calls us, so
each line reaches the OS before its element is handed over. `state`: a LoaderState (any world or
batch size) to start from; the record then continues from the segment that saved it."""

from __future__ import annotations

import os
import threading
from typing import Any, Sequence

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.plan import epoch_start_step, locate_step, steps_in_epoch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.read.recording import MadeRecord
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["StepSource", "grain_state", "loader_state"]


class StepSource:
    """Element i: the batch of step `spec.start.step + i` for `rank`, as a dict of numpy arrays
    (`Batch.to_numpy()`) plus "step", "epoch", "indices" and "row_hashes". `epochs`: how many
    epochs from the start's (the source's length ends at an epoch's end). `state`: start where a
    saved LoaderState continues (element 0 is its step, in its world and batch size). With
    `record_dir`, iterate `source.recorded(dataset)`: elements made without it are refused."""

    _HASHES = "row_hashes"  # the element's per-sample hashes, which its run record line holds
    _METADATA = ("step", "epoch", "indices", "row_hashes")  # not data: not weighed as the batch's bytes

    def __init__(self, spec: RunSpec, catalog: Catalog | str, rank: int = 0,
                 columns: Sequence[str] | None = None, epochs: int = 1, *, state: dict[str, Any] | None = None,
                 record_dir: str | None = None, record_samples: bool | str = "auto"):
        parent = None
        if state is not None:
            saved = LoaderState.from_json(state)
            spec, parent = saved.resume_spec(spec), saved.segment
        if not 0 <= rank < spec.world_size:
            raise UserError(f"rank {rank} is outside the world size {spec.world_size}")
        if epochs < 1:
            raise UserError(f"epochs must be at least 1, not {epochs}")
        self.spec, self.rank, self.epochs = spec, rank, epochs
        self.record = MadeRecord(record_dir, rank, spec, parent, record_samples) if record_dir else None
        self.catalog_url = catalog.url if isinstance(catalog, Catalog) else str(catalog)
        self.columns = list(columns) if columns else None
        self.start = spec.start.step
        first = locate_step(spec, self.start)[0]
        end = epoch_start_step(spec, first + epochs - 1) + steps_in_epoch(spec, first + epochs - 1)
        self._length = end - self.start
        self._loader: Loader | None = None
        self._lock = threading.Lock()
        self._taker: int | None = None  # the pid of the process whose loop takes the elements (recorded)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self._length:
            raise IndexError(f"step index {i} outside the source's {self._length} steps")
        if self.record is not None and self._taker is None:
            raise UserError(f"{type(self).__name__}(record_dir=...) records the elements the loop takes: iterate "
                            "source.recorded(dataset), the pipeline's last stage (docs/GRAIN.md)")
        with self._lock:
            if self._loader is None:
                self._loader = self._open()
            return self._element(self._loader.batch_at(self.start + int(i)))

    def _open(self) -> Any:
        """This process's reader of the rank's batches."""
        return Loader(self.spec, self.rank, catalog=Catalog(self.catalog_url), columns=self.columns)

    def _element(self, batch: Any) -> dict[str, Any]:
        out: dict[str, Any] = dict(batch.to_numpy())
        out.update(step=np.int64(batch.step), epoch=np.int64(batch.epoch), indices=np.asarray(batch.indices),
                   row_hashes=batch.hash_array)
        return out

    def recorded(self, dataset: Any) -> Any:
        """`dataset`, the grain.IterDataset the loop iterates (after `to_iter_dataset()` and any
        `mp_prefetch`), with a last map that records each element as the loop takes it: the record
        names the steps handed to the loop, not those Grain made ahead. Call it before iterating;
        nothing may follow it. Without `record_dir`, `dataset` unchanged."""
        if self.record is None:
            return dataset
        import grain  # the caller has it: it built `dataset`
        if not isinstance(dataset, grain.IterDataset):
            raise UserError(f"{type(self).__name__}.recorded takes the grain.IterDataset the loop iterates (after "
                            f"to_iter_dataset() and any mp_prefetch), not a {type(dataset).__name__}")
        self._taker = os.getpid()
        return dataset.map(self._taken)

    def _taken(self, element: dict[str, Any]) -> dict[str, Any]:
        """Record `element`, taken by the loop now, from the row hashes it carries."""
        if os.getpid() != self._taker:
            raise UserError(f"{type(self).__name__}.recorded(...) ran in a Grain worker process: make it the "
                            "pipeline's last stage, after mp_prefetch")
        key = self._HASHES
        try:
            step, epoch, hashes = element["step"], element["epoch"], np.asarray(element[key])
        except (KeyError, TypeError, IndexError):
            raise UserError(f"{type(self).__name__}.recorded: the element the loop takes has no 'step', 'epoch' or "
                            f"'{key}' (a transformation dropped them): keep them in the element") from None
        if np.ndim(step) != 0 or hashes.ndim != 2:
            raise UserError(f"{type(self).__name__}.recorded: the element holds more than one step (batched by "
                            "Grain?): record before batching steps together")
        self.record.write_hashes(int(step), int(epoch), hashes, _data_bytes(element, self._METADATA))
        return element

    def __getstate__(self) -> dict[str, Any]:  # a worker process opens its own Loader
        return {k: v for k, v in self.__dict__.items() if k not in ("_loader", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _loader=None, _lock=threading.Lock())

    def __repr__(self) -> str:  # Grain names its source in errors and checkpoints
        return (f"StepSource(rank={self.rank}, start={self.start}, steps={self._length}, "
                f"order={self.spec.order_hash[:12]})")


def _data_bytes(element: dict[str, Any], metadata: tuple[str, ...]) -> int:
    """Bytes of an element's arrays besides its metadata: what per-sample digests are weighed against."""
    return sum(int(v.nbytes) for k, v in element.items() if k not in metadata and isinstance(v, np.ndarray))


def loader_state(state: dict[str, Any], source: StepSource) -> dict[str, Any]:
    """A Grain iterator's state over `source` as a LoaderState (elastic, JSON-able): the state of
    `MapDataset.source(source)...to_iter_dataset()`, or of its `mp_prefetch` over n worker
    processes (worker k holds elements k, k+n, ...; the next element is the next of the worker
    whose turn it is)."""
    if "next_index" in state:
        index = int(state["next_index"])
    else:
        try:
            workers = state["iterators_in_use_states"]
            turn = int(state["next_index_in_cycle"])
            index = int(workers[turn]["next_index"]) * len(workers) + turn
        except (KeyError, IndexError, TypeError, ValueError):
            raise UserError("loader_state: not a Grain iterator state over a StepSource "
                            f"(keys {sorted(state)})") from None
    segment = source.record.segment if source.record else None  # a resume from it continues the record
    return LoaderState.at(source.spec, source.start + index, source.rank, segment).to_json()


def grain_state(state: dict[str, Any], source: StepSource) -> dict[str, Any]:
    """A LoaderState as the Grain iterator state over `source` that continues at the same step; a
    state saved with another world size or batch size needs a source that starts there
    (`StepSource(spec, catalog, rank, state=state)`, whose Grain state is 0)."""
    saved = LoaderState.from_json(state)
    saved.resume_spec(source.spec)  # the same order (else a UserError), and the receipt checks out
    if (saved.world_size, saved.batch_size) != (source.spec.world_size, source.spec.batch_size):
        raise UserError("grain_state: the state was saved with another world or batch size; start the source "
                        "there instead: StepSource(spec, catalog, rank, state=state)")
    index = saved.step - source.start
    if not 0 <= index <= len(source):
        raise UserError(f"grain_state: step {saved.step} is outside the source's steps "
                        f"{source.start}..{source.start + len(source)}")
    return {"next_index": index}

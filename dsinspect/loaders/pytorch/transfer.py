"""How a TorchLoader's workers hand batches to the main process: runs of consecutive batches as numpy
arrays, written into the worker's shared-memory ring (ring.py) with one small descriptor through the
DataLoader's pipe, or, when the ring is unavailable, pickled through the pipe; and how the main
process makes tensors of them, as the worker's collate (default_convert) would have.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import default_convert

from dsinspect.loaders.pytorch.conversion import unpacked
from dsinspect.loaders.pytorch.ring import RingBatch, RingReader, RingWriter

__all__ = ["Transfer", "WorkerChunk", "ChunkSender", "receive", "as_received", "tensors_to_numpy"]


class Transfer(NamedTuple):
    """How a TorchLoader's workers send batches: runs of `chunk` steps, through the shared-memory
    rings named by `prefix` (`slots` per worker) or, with no prefix, the pipe."""
    prefix: str | None
    slots: int
    chunk: int


class WorkerChunk(list):
    """Batches as numpy arrays, on their way from a TorchLoader's worker to the TorchLoader
    through the pipe (when its shared-memory ring is unavailable)."""


class ChunkSender:
    """One worker's side of a Transfer: its ring, made at the first run it sends."""

    def __init__(self, transfer: Transfer | None, worker: int):
        self.transfer, self.worker = transfer, worker
        self._ring: RingWriter | None = None

    def send(self, chunk: list[dict[str, Any]]) -> RingBatch | WorkerChunk:
        """A run of batches written into the ring (the DataLoader item is its descriptor), or,
        should that fail, as the item itself."""
        transfer = self.transfer
        if transfer is not None and transfer.prefix is not None:
            try:
                if self._ring is None:
                    self._ring = RingWriter(transfer.prefix, self.worker, transfer.slots)
                return self._ring.put(chunk)
            except OSError as e:  # e.g. no room in /dev/shm: the pipe still works
                warnings.warn(f"shared-memory ring unavailable ({e}); sending batches through the pipe", stacklevel=2)
                self.transfer = transfer._replace(prefix=None)
        return WorkerChunk(chunk)


def receive(item: Any, ring: RingReader | None) -> list[dict[str, Any]]:
    """A DataLoader item as the batches it carries, tensors as default_convert makes them (what
    the worker's collate would have done), the metadata the worker packed unpacked."""
    if isinstance(item, RingBatch):
        return [unpacked(batch) for batch in ring.take(item, _tensor_copy, default_convert)]
    if isinstance(item, WorkerChunk):
        return [unpacked(default_convert(batch)) for batch in item]
    return [item]


def _tensor_copy(view: np.ndarray) -> Any:
    """An array in a worker's ring as default_convert makes it (arrays of strings and objects stay
    numpy), owning its memory; without default_convert's generic dispatch (~4x the cost)."""
    copy = view.copy()
    return copy if _KEPT_AS_NUMPY.search(copy.dtype.str) else torch.from_numpy(copy)


_KEPT_AS_NUMPY = re.compile(r"[SaUO]")  # torch's np_str_obj_array_pattern: dtypes default_convert leaves alone


def as_received(transformed: Any) -> Any:
    """A transform's output made in the main process as a worker's arrives (its tensors sent as
    numpy, then default_convert): the same types whichever process made the batch."""
    return default_convert(tensors_to_numpy(transformed))


def tensors_to_numpy(value: Any) -> Any:
    """A transform's CPU tensors (in dicts, lists, tuples) as numpy arrays, which default_convert
    turns back into equal tensors; other tensors and values stay as they are."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.requires_grad or value.dtype not in _NUMPY_ROUND_TRIP:
            return value
        return value.contiguous().numpy()
    if isinstance(value, dict) and type(value) is dict:
        return {k: tensors_to_numpy(v) for k, v in value.items()}
    if type(value) in (list, tuple):  # a tuple as a list: what default_convert makes of it anyway
        return [tensors_to_numpy(v) for v in value]
    return value


_NUMPY_ROUND_TRIP = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                     torch.float64, torch.bool, torch.complex64, torch.complex128}

"""Run records from the PyTorch adapters: which process writes a rank's lines, and a line made from
the dict of tensors a consumer received.

A TorchLoader records in the main process what its consumer received; its workers never record.
TorchBatches used directly (a plain DataLoader, torchdata's StatefulDataLoader) records where the
batches are made: the main process with num_workers=0, else each DataLoader worker, appending to
the rank's file with flush_every=1 so every line reaches the OS before its batch leaves the worker.
The lines are those a Loader writes (records/runlog.py), fingerprints of the rows as stored.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from dsinspect.errors import UserError
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.pytorch.conversion import METADATA
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.records.runlog import batch_fingerprint, segment_id

__all__ = ["RankRecord", "data_bytes"]

# Recorders a forked DataLoader worker inherited from its parent: kept alive and never used, so
# their finalizer cannot write the parent's pending lines a second time from the child.
_INHERITED: list[RunRecorder] = []


class RankRecord:
    """One rank's run record as the processes of one TorchBatches write it: each process opens its
    own RunRecorder on first use (a DataLoader worker with flush_every=1)."""

    def __init__(self, directory: str, rank: int, samples: bool | str = "auto"):
        if samples not in (True, False, "auto"):
            raise UserError(f"record_samples must be True, False or 'auto', not {samples!r}")
        self.directory, self.rank, self.samples = directory, rank, samples
        self._recorder: RunRecorder | None = None
        self._pid = 0
        self._segments: dict[tuple[int, str | None], tuple[RunSpec, str]] = {}
        self._spec_json: tuple[RunSpec, dict] | None = None
        self.recorder()  # now: a directory that cannot be written is refused at construction

    def recorder(self) -> RunRecorder:
        """This process's recorder."""
        if self._recorder is None or self._pid != os.getpid():
            if self._recorder is not None:  # a forked copy of the parent's: hold it, never flush it
                _INHERITED.append(self._recorder)
            in_worker = get_worker_info() is not None
            self._recorder = RunRecorder(self.directory, self.rank, flush_every=1 if in_worker else 64,
                                         samples=self.samples)
            self._pid = os.getpid()
        return self._recorder

    def flush(self) -> None:
        """Hand this process's pending lines to the OS (a recorder inherited from a parent is not this process's)."""
        if self._recorder is not None and self._pid == os.getpid():
            self._recorder.flush()

    def segment(self, spec: RunSpec, parent: str | None) -> str:
        """The segment id of (spec, parent), without writing anything (hashing a spec costs; asked per batch)."""
        key = (id(spec), parent)
        known = self._segments.get(key)
        if known is None or known[0] is not spec:
            known = self._segments[key] = (spec, segment_id(spec, parent))
        return known[1]

    def spec_json(self, spec: RunSpec) -> dict:
        """`spec.to_json()`, kept for the spec last asked (a worker's state carries it every step)."""
        if self._spec_json is None or self._spec_json[0] is not spec:
            self._spec_json = (spec, spec.to_json())
        return self._spec_json[1]

    def record_tensors(self, batch: dict[str, Any], spec: RunSpec, parent: str | None, wait: float | None) -> None:
        """The line of a batch as the consumer received it (a dict of tensors with its metadata)."""
        hashes = _numpy(batch["row_hashes"])
        recorder = self.recorder()
        recorder.begin(spec, parent)
        recorder.record(int(batch["step"]), int(batch["epoch"]), batch_fingerprint(hashes), len(hashes),
                        row_hashes=hashes, data_bytes=data_bytes(batch), wait=wait)

    def __getstate__(self) -> dict[str, Any]:  # a spawned worker opens its own
        return {**self.__dict__, "_recorder": None, "_pid": 0, "_segments": {}, "_spec_json": None}


def data_bytes(batch: dict[str, Any]) -> int:
    """Bytes of a batch's data (its columns' tensors and arrays; not the metadata): what a line's
    per-sample digests are weighed against."""
    return sum(_nbytes(value) for key, value in batch.items() if key not in METADATA)


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.nelement() * value.element_size()
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 0  # Python objects (structs, nested lists): not weighed


def _numpy(value: Any) -> np.ndarray:
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)

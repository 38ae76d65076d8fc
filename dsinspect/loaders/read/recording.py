"""Run records for adapters whose consumer is another framework's loop (Grain's iterators and worker
processes, Hugging Face's IterableDataset), written where a batch is made (`write`: Hugging Face)
or where the loop takes it (`write_hashes`, from the row hashes the element carries: Grain, whose
threads and workers make elements far ahead). Nothing of ours runs when that loop saves its state,
so no `state_dict()` can make the lines durable: each line goes to the OS before its batch is
handed over (`flush_every=1`, as DataLoader workers do), and a killed process loses none. Each
process opens its own recorder (a forked or spawned worker appends to the same rank file).
"""

from __future__ import annotations

import os

import numpy as np

from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.batch import Batch
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.records.runlog import batch_fingerprint, segment_id

__all__ = ["MadeRecord"]

# Recorders a forked worker inherited from its parent: kept and never used (their finalizer would
# write the parent's lines again from the child; _Buffered skips a foreign pid anyway).
_INHERITED: list[RunRecorder] = []


class MadeRecord:
    """One rank's record, a line per batch, from whichever process writes it (makes or takes the
    batch). Picklable (a worker opens its own recorder); `samples` as `Loader(record_samples=...)`."""

    def __init__(self, directory: str, rank: int, spec: RunSpec, parent: str | None = None,
                 samples: bool | str = "auto"):
        self.directory, self.rank, self.spec, self.parent, self.samples = directory, rank, spec, parent, samples
        self.segment = segment_id(spec, parent)  # what a state saved over these batches names
        self._recorder: RunRecorder | None = None
        self._pid = 0
        self._recorder_here()  # now: a directory that cannot be written is refused at construction

    def write(self, batch: Batch) -> None:
        """The line of `batch`, handed to the OS before this returns."""
        self.write_hashes(batch.step, batch.epoch, batch.hash_array, batch.nbytes)

    def write_hashes(self, step: int, epoch: int, row_hashes: np.ndarray, data_bytes: int | None) -> None:
        """The line of the batch of `step` whose rows have these stored hashes ((n, 16) uint8: the
        fingerprint is the same as `Batch.fingerprint`), handed to the OS before this returns."""
        recorder = self._recorder_here()
        recorder.begin(self.spec, self.parent)
        recorder.record(step, epoch, batch_fingerprint(row_hashes), len(row_hashes), row_hashes=row_hashes,
                        data_bytes=data_bytes)

    def _recorder_here(self) -> RunRecorder:
        if self._recorder is None or self._pid != os.getpid():
            if self._recorder is not None:
                _INHERITED.append(self._recorder)
            self._recorder = RunRecorder(self.directory, self.rank, flush_every=1, samples=self.samples)
            self._pid = os.getpid()
        return self._recorder

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_recorder": None, "_pid": 0}

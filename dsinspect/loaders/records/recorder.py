"""Write one rank's run record: a segment header when a loader starts or resumes, then a line per step.

Lines are buffered (`flush_every`) so a step costs one small string; `sync()` (every `state_dict()`
calls it) writes them out and fsyncs, so no saved state ever stands after lines that a kill could
still lose. Processes that record without owning the state (DataLoader workers) use `flush_every=1`:
each line reaches the OS before the batch leaves the worker.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from typing import IO, Any

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.records.runlog import DIGEST_BYTES, sample_digests, segment_id, spec_file_name
from dsinspect.loaders.store.storage import join, refuse_read_only, url_to_fs, write_atomic

__all__ = ["RunRecorder", "DIGEST_SHARE"]

DIGEST_SHARE = 0.01  # "auto" digests: on while they are at most this share of the bytes the step read


class RunRecorder:
    """One rank's record. `samples`: per-sample digests on every line (True), never (False), or
    "auto": while they add at most DIGEST_SHARE of the bytes the step read (docs/RUN_RECORDS.md)."""

    def __init__(self, directory: str, rank: int, *, flush_every: int = 64, samples: bool | str = "auto",
                 specs_folder: str = "specs"):
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise UserError(f"bad rank {rank!r}: a run record's rank is an integer >= 0")  # it names a file
        if samples not in (True, False, "auto"):
            raise UserError(f"record_samples must be True, False or 'auto', not {samples!r}")
        self.fs, self.root = url_to_fs(directory)
        refuse_read_only(self.fs, self.root)
        self.directory, self.rank, self.flush_every, self.samples = directory, rank, max(1, flush_every), samples
        self.specs_folder = specs_folder  # a stream learner's specs are not run specs: "learner" (docs/RL.md)
        self.segment: str | None = None
        self._begun: tuple[RunSpec, str | None] | None = None
        self._auto: bool | None = None
        self._out = _Buffered(self.fs, join(self.root, "fingerprints", f"rank-{rank:05d}.jsonl"))
        # a loader dropped without close() (or the interpreter exiting) still writes its lines out
        weakref.finalize(self, self._out.flush)

    def begin(self, spec: RunSpec, parent: str | None = None) -> str:
        """Start the segment of `spec` (resumed from the state of segment `parent`, if any): its spec
        file (if no process wrote it yet) and this rank's header line. Returns the segment id. `spec`:
        a RunSpec, or any value with `start_step`, `world_size`, `batch_size`, `hash` and `dumps()`."""
        if self._begun is not None and self._begun[0] is spec and self._begun[1] == parent:
            return self.segment  # the per-step call: the spec's hash is not recomputed
        segment = segment_id(spec, parent)
        self._begun = (spec, parent)
        if segment == self.segment:
            return segment
        spec_path = join(self.root, self.specs_folder, spec_file_name(spec, segment))
        if not self.fs.exists(spec_path):  # the same bytes from any writer, so a race is harmless
            write_atomic(self.fs, spec_path, spec.dumps().encode())
        self.segment = segment
        self._auto: bool | None = None  # "auto" digests: decided by the segment's first line
        self._out.lines.append(json.dumps({"segment": segment, "parent": parent, "start": spec.start_step,
                                       "world_size": spec.world_size, "batch_size": spec.batch_size,
                                       "spec": spec.hash, "rank": self.rank, "time": round(time.time(), 6)}) + "\n")
        self.flush()
        return segment

    def record(self, step: int, epoch: int, fingerprint: str, n: int, of: str = "stored", *,
               row_hashes: np.ndarray | None = None, data_bytes: int | None = None, wait: float | None = None,
               extra: dict | None = None) -> None:
        """One step's line; `row_hashes` ((n, 16) uint8, as stored) give the per-sample digests; `extra`:
        more keys for the line (a stream learner's rows consumed and its policy version)."""
        if self.segment is None:
            raise UserError("RunRecorder.record before begin(spec): a line needs its segment")
        line = {"step": step, "rank": self.rank, "epoch": epoch, "fingerprint": fingerprint, "n": n, "of": of,
                "seg": self.segment}
        if row_hashes is not None and self._digests_wanted(n, data_bytes):
            line["samples"] = sample_digests(row_hashes)
        if wait is not None:
            line["wait"] = round(wait, 5)
        if extra:
            line.update(extra)
        self._out.lines.append(json.dumps(line) + "\n")
        if len(self._out.lines) >= self.flush_every:
            self.flush()

    def _digests_wanted(self, n: int, data_bytes: int | None) -> bool:
        """"auto" decides at the segment's first line and keeps to it: a batch that happens to hold
        short (say, edited) rows must not lose the digests that would name them."""
        if self.samples != "auto":
            return bool(self.samples)
        if self._auto is None and data_bytes is not None:
            self._auto = n * DIGEST_BYTES * 4 / 3 <= DIGEST_SHARE * data_bytes
        return bool(self._auto)

    def flush(self) -> None:
        """Hand the buffered lines to the OS (a killed process loses nothing written so far)."""
        self._out.flush()

    def sync(self) -> None:
        """Every line so far durable: flushed and, on a local disk, fsynced (a crash of the machine
        keeps them too)."""
        self._out.flush()
        fileno = _fileno(self._out.file)
        if fileno is not None:
            os.fsync(fileno)

    def close(self) -> None:
        self._out.close()


class _Buffered:
    """A rank file's pending lines and open handle, apart from the recorder so a finalizer can
    write them out after the recorder is gone."""

    def __init__(self, fs: Any, path: str):
        self.fs, self.path = fs, path
        self.lines: list[str] = []
        self.file: IO[str] | None = None
        self.pid = os.getpid()

    def flush(self) -> None:
        if not self.lines or os.getpid() != self.pid:  # a forked child's copy: the parent writes these lines
            return
        prefix = ""
        if self.file is None:
            self.fs.makedirs(os.path.dirname(self.path), exist_ok=True)
            prefix = "\n" if self._ends_mid_line() else ""  # a killed writer's cut line stays a line of its own
            self.file = self.fs.open(self.path, "a")
        self.file.write(prefix + "".join(self.lines))
        self.file.flush()
        self.lines.clear()

    def close(self) -> None:
        self.flush()
        if self.file is not None:
            self.file.close()
            self.file = None

    def _ends_mid_line(self) -> bool:
        """The file exists and its last line has no newline: a kill stopped a write in the middle."""
        try:
            size = self.fs.size(self.path) if self.fs.exists(self.path) else 0
            return bool(size) and self.fs.cat_file(self.path, start=size - 1, end=size) != b"\n"
        except (OSError, ValueError):
            return False


def _fileno(handle: IO[str] | None) -> int | None:
    """The OS file descriptor under an fsspec file object, when it is a local file."""
    for obj in (handle, getattr(handle, "f", None)):
        try:
            return obj.fileno() if obj is not None else None
        except (AttributeError, OSError, ValueError):
            continue
    return None

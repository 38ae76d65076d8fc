"""A ring of slots in one shared-memory segment per DataLoader worker: how a worker hands a batch's
arrays to the main process without pickling them (torch-free: numpy and multiprocessing only).

The worker writes a batch's arrays into a free slot of its ring and sends only a `RingBatch`
(segment name, slot offset, sequence number, the batch with each array replaced by a marker, and
each array's place: offset, size, dtype, shape). The main process copies the arrays out into fresh
ones, so what it hands on owns its memory, and marks the slot free. Each slot starts with the
sequence number of the batch in it (or FREE); the reader checks it before and after copying, so a
slot reused too early would be a clear error, never a silently wrong batch.

The worker takes the lowest free slot, so the slots in use follow what is in flight (about
prefetch_factor + 1 per worker) while the ring holds the worst case (`ring_slots`): pages of
shared memory count once touched, and the higher slots are touched only when batches pile up.
No free slot at all means the bound did not hold: the worker fails with RingOverrun.

Segments are named `<prefix>-w<worker>-g<generation>` (a generation is a bigger ring made when a
batch outgrows the slots), so the main process can remove every one of them by name when a pass
ends, however it ends, even those of a killed worker it never heard from. When the main process
itself dies with its workers (SIGKILL of a process group, as a dying node), nobody is left to do
that: on Linux each pass also holds a lock on `<prefix>-owner`, and the next pass started on the
machine removes the segments whose owner's lock is free.
"""

from __future__ import annotations

import os
import re
import secrets
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from dsinspect.errors import DsinspectError
from dsinspect.loaders.store import locks

__all__ = ["RingBatch", "RingWriter", "RingReader", "RingOverrun", "ring_slots", "new_prefix", "segment_name",
           "sweep_orphans"]

ALIGN = 64  # every array starts on a cache line
HEADER = ALIGN  # per slot: the int64 sequence number of the batch in it, padded
_WRITING = -1  # a slot's sequence number while its batch is being written
_FREE = -2  # a slot never written, or whose batch the main process has copied out
_PAGE = 4096
SHM_DIR = "/dev/shm"  # where Linux keeps POSIX shared memory; elsewhere orphans are not swept


class _ArrayMark:
    """Where an array was in the tree; the arrays' places follow in order in `RingBatch.places`.
    One module-level instance, pickled by name: a few bytes however many arrays (a NamedTuple per
    array cost ~1 us each to unpickle)."""
    __slots__ = ()

    def __reduce__(self) -> str:
        return "ARRAY"


ARRAY = _ArrayMark()
Place = tuple[int, int, str, tuple[int, ...]]  # offset in the slot's payload, bytes, dtype.str, shape


class RingBatch(NamedTuple):
    """What crosses the pipe: a batch whose arrays wait in slot `base` of `segment`."""
    segment: str
    base: int
    seq: int
    tree: Any
    places: list[Place]


def ring_slots(prefetch_factor: int, num_workers: int) -> int:
    """Slots per worker that a torch DataLoader never overruns.

    The DataLoader issues a new task only when it hands a result on (or learns a worker is done),
    so at most prefetch_factor * num_workers tasks are issued and not yet handed on; when workers
    finish unevenly they may all go to one worker. A worker's slots in use are therefore at most
    that many, plus the batch the consumer is copying right now: one more slot is spare.
    """
    return prefetch_factor * num_workers + 2


def new_prefix() -> str:
    """A segment-name prefix unique to this process and pass (short: macOS allows 31 characters)."""
    return f"dsi{os.getpid()}-{secrets.token_hex(3)}"


def segment_name(prefix: str, worker: int, generation: int) -> str:
    return f"{prefix}-w{worker}-g{generation}"


def _aligned(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


def _ringable(value: Any) -> bool:
    """Plain numpy arrays of fixed-size items go through the ring; anything else is pickled."""
    return (type(value) is np.ndarray and not value.dtype.hasobject and value.dtype.fields is None
            and value.dtype.itemsize > 0)


def _strip(tree: Any, places: list[Place], arrays: list[np.ndarray], end: list[int]) -> Any:
    """`tree` with each ringable array in its dicts and lists replaced by ARRAY, its place (laid
    out one after another) appended to `places`."""
    if _ringable(tree):
        places.append((end[0], tree.nbytes, tree.dtype.str, tree.shape))
        arrays.append(tree)
        end[0] += _aligned(tree.nbytes)
        return ARRAY
    if type(tree) is dict:
        return {k: _strip(v, places, arrays, end) for k, v in tree.items()}
    if type(tree) is list:
        return [_strip(v, places, arrays, end) for v in tree]
    return tree  # tuples too: whatever the reader's `other` makes of them, it makes of the whole


class RingWriter:
    """One worker's ring: made at its first batch, replaced by a bigger one (a new generation)
    when a batch does not fit a slot. Older generations stay mapped until the worker ends, since
    batches in flight may still lie in them; the main process unlinks them all."""

    def __init__(self, prefix: str, worker: int, slots: int):
        if slots < 2:
            raise ValueError("a ring needs at least 2 slots")
        self.prefix, self.worker, self.slots = prefix, worker, slots
        self._segments: list[SharedMemory] = []
        self._stride = 0  # bytes per slot, header included
        self._seq = 0

    def put(self, tree: Any) -> RingBatch:
        """Write `tree`'s arrays into the next slot; the RingBatch to send in its place."""
        places: list[Place] = []
        arrays: list[np.ndarray] = []
        end = [0]
        skeleton = _strip(tree, places, arrays, end)
        if HEADER + end[0] > self._stride:
            self._grow(end[0])
        segment = self._segments[-1]
        seq, base = self._seq, self._free_slot(segment)
        memory = np.frombuffer(segment.buf, np.uint8)
        header = memory[base:base + 8].view(np.int64)
        header[0] = _WRITING
        for (offset, nbytes, _, shape), array in zip(places, arrays):
            start = base + HEADER + offset
            np.copyto(memory[start:start + nbytes].view(array.dtype).reshape(shape), array)
        header[0] = seq
        del memory, header
        self._seq += 1
        return RingBatch(segment.name, base, seq, skeleton, places)

    def _free_slot(self, segment: SharedMemory) -> int:
        """The offset of the lowest slot the main process is done with."""
        memory = np.frombuffer(segment.buf, np.int64, count=self._stride * self.slots // 8)
        free = np.flatnonzero(memory[::self._stride // 8] == _FREE)
        del memory  # no view may outlive this call (an error's traceback would keep it)
        if not len(free):
            raise RingOverrun(f"worker {self.worker}: all {self.slots} shared-memory slots hold batches the main "
                              "process has not copied out yet (the slot-count bound did not hold)")
        return int(free[0]) * self._stride

    def _grow(self, payload: int) -> None:
        """A new generation whose slots hold this payload with room to spare (x1.25, then x2)."""
        room = payload * 2 if self._segments else payload + payload // 4
        self._stride = _aligned(HEADER + room + _PAGE, _PAGE)
        name = segment_name(self.prefix, self.worker, len(self._segments))
        size = self._stride * self.slots
        _check_room(size)
        segment = SharedMemory(name=name, create=True, size=size)
        np.frombuffer(segment.buf, np.int64, count=size // 8)[::self._stride // 8] = _FREE
        self._segments.append(segment)

    def close(self) -> None:
        """Unmap this process's view (the main process unlinks the names)."""
        for segment in self._segments:
            segment.close()
        self._segments = []


def _check_room(size: int) -> None:
    """Refuse (OSError, which the caller answers by using the pipe) a segment that /dev/shm has no
    room for: tmpfs does not refuse it, the first write past its size kills the writer (SIGBUS)."""
    if os.path.isdir(SHM_DIR):
        stat = os.statvfs(SHM_DIR)
        free = stat.f_bavail * stat.f_frsize
        if free < size:
            raise OSError(28, f"{SHM_DIR} has {free} bytes free, a ring needs {size}")


def _same(value: Any) -> Any:
    return value


class RingOverrun(DsinspectError):
    """A slot was needed (or rewritten) before its batch was copied out: the slot-count bound did not hold."""


class RingReader:
    """The main process's side of one pass: attaches each segment once, copies batches out, and
    on close unlinks every segment of the pass's prefix."""

    def __init__(self, prefix: str, workers: int):
        self.prefix, self.workers = prefix, workers
        self._attached: dict[str, tuple[SharedMemory, np.ndarray]] = {}
        resource_tracker.ensure_running()  # forked workers then share it, rather than each starting one
        sweep_orphans()
        self._owner = _hold(f"{SHM_DIR}/{prefix}-owner") if locks.SUPPORTED and os.path.isdir(SHM_DIR) else None

    def take(self, batch: RingBatch, array: Callable[[np.ndarray], Any] = np.copy,
             other: Callable[[Any], Any] = _same) -> Any:
        """The batch with each array copied out of its slot by `array(view)` (a view into the slot
        that must not outlive the call) and every other leaf passed through `other`."""
        memory = self._memory(batch.segment)
        header = memory[batch.base:batch.base + 8].view(np.int64)
        before = int(header[0])
        out = (_fill(batch.tree, iter(batch.places), memory, batch.base + HEADER, array, other)
               if before == batch.seq else None)
        found = before if before != batch.seq else int(header[0])  # rewritten while we copied?
        if found == batch.seq:
            header[0] = _FREE  # the worker may write this slot again (it only takes free ones)
        del memory, header  # no view of the segment may outlive this call (it would block closing it)
        if found == _FREE:
            raise RingOverrun(f"shared-memory slot {batch.base} of {batch.segment}: batch {batch.seq} was "
                              "copied out of it already")
        if found != batch.seq:
            raise RingOverrun(f"shared-memory slot {batch.base} of {batch.segment} holds batch {found}, not "
                              f"batch {batch.seq}: a worker rewrote it before the main process copied it out")
        return out

    def _memory(self, name: str) -> np.ndarray:
        if name not in self._attached:
            segment = SharedMemory(name=name)
            self._attached[name] = (segment, np.frombuffer(segment.buf, np.uint8))
        return self._attached[name][1]

    def close(self) -> int:
        """Detach, then unlink every segment of this prefix (also those never attached); how many."""
        for name in list(self._attached):
            segment = self._attached.pop(name)[0]  # its array view goes first: close() needs no exports
            try:
                segment.close()
            except BufferError:  # a view still alive (an error's traceback): unmapped when it goes
                pass
        removed = 0
        for worker in range(self.workers):
            generation = 0
            while _unlink(segment_name(self.prefix, worker, generation)):
                generation += 1
            removed += generation
        if self._owner is not None:  # last: while it exists, a sweep leaves this pass alone
            _remove(f"{SHM_DIR}/{self.prefix}-owner")
            os.close(self._owner)
            self._owner = None
        return removed


def _hold(path: str) -> int:
    """Create `path` and hold an exclusive lock on it until closed (or the process dies)."""
    return locks.open_locked(path, mode=0o600)


def sweep_orphans(directory: str = SHM_DIR) -> list[str]:
    """Remove the segments of passes whose main process died without closing them: their owner
    file's lock is free, or the owner file is gone (it is made before and removed after the
    segments; without one, also the process named in the prefix must be gone). The names removed."""
    try:
        names = [n for n in os.listdir(directory) if _OURS.match(n)] if locks.SUPPORTED else []  # else no owner locks
    except OSError:
        return []
    removed = []
    for prefix in sorted({"-".join(n.split("-")[:2]) for n in names}):
        owner = f"{prefix}-owner"
        fd = None
        if owner not in names and _alive(int(prefix[3:].split("-")[0])):
            continue
        if owner in names:
            try:
                fd = locks.open_locked(f"{directory}/{owner}", wait=False, create=False)
            except OSError:  # not ours to touch (or gone)
                continue
            if fd is None:  # held: that pass is alive
                continue
        try:
            for name in sorted(n for n in names if n.startswith(prefix + "-") and n != owner) + [owner]:
                if _remove(f"{directory}/{name}"):
                    removed.append(name)
        finally:
            if fd is not None:
                os.close(fd)
    return removed


_OURS = re.compile(r"dsi\d+-[0-9a-f]{6}-(w\d+-g\d+|owner)$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _fill(tree: Any, places: Iterator[Place], memory: np.ndarray, start: int, array: Callable,
          other: Callable) -> Any:
    if tree is ARRAY:
        offset, nbytes, dtype, shape = next(places)
        first = start + offset
        return array(memory[first:first + nbytes].view(_dtype(dtype)).reshape(shape))
    kind = type(tree)
    if kind is dict:
        return {k: _fill(v, places, memory, start, array, other) for k, v in tree.items()}
    if kind is list:
        return [_fill(v, places, memory, start, array, other) for v in tree]
    return other(tree)


_DTYPES: dict[str, np.dtype] = {}


def _dtype(name: str) -> np.dtype:
    found = _DTYPES.get(name)
    if found is None:
        found = _DTYPES[name] = np.dtype(name)
    return found


def _unlink(name: str) -> bool:
    """Remove one segment by name; False when there is none."""
    try:
        segment = SharedMemory(name=name)
    except FileNotFoundError:
        return False
    segment.close()
    segment.unlink()
    return True

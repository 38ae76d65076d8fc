"""The node-local shard cache, shared by every process on the machine.

A shard enters the cache once: downloaded to a temp file while hashing, its sha256 checked against
the manifest, converted to an uncompressed Arrow IPC file (memory-mapped on read: no decode, no
copy), and only then published by rename, with a hash of every 16 KiB block beside it (the hashes
and the sidecar durable; the Arrow file not fsynced, and checked whole after a reboot). A process
checks each block the first time it reads from it (a list column's offsets as a whole, when it
first reads that column), so no cached byte is used unchecked, and a restart costs nothing up front.
Once every block a column's rows can reach is checked, reads of that column skip the bookkeeping.

A shard written with an index (format/shard_index.py) need not be fetched whole before its first
row is used: `read/cold.py` fetches the parts a batch needs, each checked against its sha256, and
writes them here (`<sha>.partial`, the parts at their offsets; `note_part` lists them in
`<sha>.have`). The fill then fetches only the parts nobody fetched, so no byte crosses the network
twice; a part this process checked is not hashed again, one another process wrote is hashed once
more from the local disk. Every part checked is the whole file checked (the parts cut it without gaps).
A fill keeps `_RUNS_IN_FLIGHT` ranged reads in flight (a long link's bandwidth-delay product), and
one fill of a process fetches at a time while the others convert what they fetched (docs/REMOTE.md).

A shard of a local store is converted from the store's own file, in place: each run of row groups
checked against its parts' sha256 just before the conversion reads it (`_convert_in_place`), no
`.partial` copy (`cold.py` reads such shards in place too). A fill runs for a reader that may close
before it ends: `open(..., abandon)` stops it at its next run (`FillAbandoned`), leaving what it
fetched and checked in the `.partial` file (listed in `.have`) for the next fill, and no entry: an
entry is only ever published by rename, its sidecar last.

Locks (flock, released by the kernel if a process dies): `<sha>.lock` makes N processes download a
shard once; a shared lock on `<sha>.pin` marks it in use, and eviction only takes shards whose pin
it can lock exclusively, least recently used first. Under a bound, eviction runs after each fill
publishes and after each release (an entry unpinned later would otherwise stay over the bound).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import mmap
import os
import tempfile
import threading
import time
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import xxhash

from dsinspect.arrays import distinct
from dsinspect.errors import IntegrityError, NotFoundError, UserError
from dsinspect.loaders.format.arrow_errors import UNREADABLE, arrow_error
from dsinspect.loaders.format.pathnames import check_sha256, is_sha256
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.read.columns import View, column_view
from dsinspect.loaders.read.convert import parquet_to_ipc
from dsinspect.loaders.read.fetch import fetch_parts, fetch_verified, local_write
from dsinspect.loaders.read.landed import FillAbandoned, Landed
from dsinspect.loaders.read.stats import ReadStats
from dsinspect.loaders.store.locks import SUPPORTED as LOCKS_SUPPORTED
from dsinspect.loaders.store.locks import SlotLocks, locked_file, open_locked
from dsinspect.loaders.store.storage import cache_dir, is_local
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["ShardCache", "CachedShard", "write_at", "holds_part"]

log = logging.getLogger("dsinspect.cache")
_FORMAT = "dsinspect.cache/1"
BLOCK = 16 << 10  # verification granularity: a read checks (once per process) only the blocks it touches
VERIFY_SPAN = 16  # ... from a shard's second read on, in aligned runs of this many blocks (256 KiB)
_FETCH_RUN = 2 << 20  # a fill fetches consecutive missing parts in ranged reads of up to this many bytes
WAIT_ELSEWHERE = 60.0  # seconds to wait for a part another process is fetching before fetching it too
_RUNS_IN_FLIGHT = 16  # ... this many at once (32 MiB: with 8, a 200 Mbit/s link at 80 ms was ~90 % busy)
_LIVE: "weakref.WeakSet[ShardCache]" = weakref.WeakSet()  # made anew in a forked child (`_after_fork`)


class CachedShard:
    """A verified shard: one memory-mapped record batch, pinned against eviction until `release()`."""

    def __init__(self, cache: "ShardCache", sha256: str, pin_fd: int, blocks: bytes):
        self.cache, self.sha256, self._pin_fd = cache, sha256, pin_fd
        self._buffer = pa.memory_map(str(cache._arrow(sha256))).read_buffer()
        self._base = self._buffer.address
        self._digests = np.frombuffer(blocks, dtype="<u8")  # the block hashes `_trusted` checked
        self._checked = cache._checked.setdefault(sha256, np.zeros(len(self._digests), dtype=bool))
        if len(self._checked) != len(self._digests):  # an older entry of this shard was replaced
            self._checked = cache._checked[sha256] = np.zeros(len(self._digests), dtype=bool)
            cache._shared_checks.discard(sha256)
        self._reads = 0
        # The IPC header and footer are parsed before any column is read: check their blocks first.
        self._verify(np.array([0, max(0, self._buffer.size - BLOCK)]), np.array([1, self._buffer.size]))
        try:
            reader = pa.ipc.open_file(self._buffer)
            self.batch = (reader.get_batch(0) if reader.num_record_batches
                          else pa.RecordBatch.from_pylist([], schema=reader.schema))
        except UNREADABLE as e:
            self._corrupt_unless_intact(e)
            raise
        self.num_rows = self.batch.num_rows
        self.nbytes = self._buffer.size
        self._views: dict[str, View] = {}
        self._verified: set[str] = set()  # columns every block of which is checked: reads skip `check`
        self._extents: dict[str, tuple[int, int] | None] = {}  # per column, the bytes its rows can reach
        self._all_checked = bool(self._checked.all())  # e.g. a one-block shard, by its header check

    def view(self, column: str) -> View:
        """A zero-copy view of one column for gathers (built on first use). What the view itself
        relies on (a list column's whole offsets buffer) is verified before it is handed out."""
        view = self._views.get(column)
        if view is None:
            try:
                view = column_view(self.batch.column(column), self._base)
                self._verify(*self._inside(*view.always()))
            except (IndexError, ValueError) as e:
                self._corrupt_unless_intact(e)
                raise
            self._views[column] = view
        return view

    def check(self, rows: np.ndarray, columns: list[str]) -> None:
        """Verify (once per process) the blocks that reading `rows` of `columns` touches."""
        if self._all_checked or self._verified.issuperset(columns):  # the steady state: nothing to check
            return
        columns = [c for c in columns if c not in self._verified]
        try:  # ranges of variable-size rows come from verified offsets; of other types maybe not
            ranges = [self.view(c).touched(rows) for c in columns]
            starts, ends = np.concatenate([lo for lo, _ in ranges]), np.concatenate([hi for _, hi in ranges])
            keep = ends > starts  # empty rows touch nothing (an empty buffer may sit at address 0)
            starts, ends = self._inside(starts[keep], ends[keep])
        except (IndexError, ValueError) as e:
            self._corrupt_unless_intact(e)
            raise
        self._verify(starts, ends)
        self._reads += 1
        for c in columns:
            if self._column_checked(c):
                self._verified.add(c)

    def check_all(self) -> None:
        """Verify every block not checked yet: for a consumer that reads the Arrow batch directly
        rather than through `check` (a Hugging Face Dataset over the cached file)."""
        self._verify(np.array([0]), np.array([self._buffer.size]))

    def _column_checked(self, column: str) -> bool:
        """Whether every block any row of `column` can touch is checked (then reads need no check)."""
        extent = self._extents.get(column, False)
        if extent is False:
            extent = self._extents[column] = self._views[column].extent()
        if extent is None:
            return False
        start, end = extent
        if end <= start:
            return True
        if start < 0 or end > self._buffer.size:
            return False  # never trusted wholesale; `check` refuses such reads
        return bool(self._checked[start // BLOCK:(end - 1) // BLOCK + 1].all())

    def _inside(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ranges, refused when they reach outside the file (nonsense ranges mean corruption)."""
        if len(starts) and (starts.min() < 0 or ends.max() > self._buffer.size):
            raise IndexError("a read range falls outside the cached file")
        return starts, ends

    def _corrupt_unless_intact(self, error: Exception) -> None:
        """After a parse error: verify every block; a mismatch drops the entry (IntegrityError)."""
        self._verify(np.array([0]), np.array([self._buffer.size]))

    def _verify(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Hash every not-yet-checked block that [start, end) ranges touch; a mismatch is never read."""
        keep = ends > starts
        if not keep.all():
            starts, ends = starts[keep], ends[keep]
        first, last = starts // BLOCK, (ends - 1) // BLOCK
        blocks = np.concatenate([first, last])
        if (last - first > 1).any():  # ranges spanning 3+ blocks: take every block between
            spans = [np.arange(lo, hi + 1) for lo, hi in zip(first, last) if hi - lo > 1]
            blocks = np.concatenate([blocks, *spans])
        todo = blocks[~self._checked[blocks]]  # the common case, all checked, costs no sort
        if not len(todo):
            return
        if self._reads:  # after the first read (kept short: time to first batch), check whole
            # aligned spans of blocks: the same bytes hashed in all, but a shard read at random is
            # fully checked (and `check` free) after a fraction of an epoch
            spans = distinct(todo // VERIFY_SPAN)
            todo = (spans[:, None] * VERIFY_SPAN + np.arange(VERIFY_SPAN)).ravel()
            todo = todo[todo < len(self._checked)]
            todo = todo[~self._checked[todo]]
        else:
            todo = distinct(todo)
        view = memoryview(self._buffer)
        got = np.fromiter((xxhash.xxh3_64_intdigest(view[b * BLOCK:(b + 1) * BLOCK]) for b in todo.tolist()),
                          np.uint64, len(todo))
        bad = np.flatnonzero(got != self._digests[todo])
        if len(bad):
            b = int(todo[bad[0]])
            self.cache._discard(self.sha256)
            raise IntegrityError(f"cached shard {self.cache._arrow(self.sha256)}: bytes {b * BLOCK}..{(b + 1) * BLOCK} "
                                 "do not match the hash taken when it was cached (it will be fetched again)")
        self._checked[todo] = True

    def release(self) -> None:
        """Unpin the shard; under a bound, evict what the cache holds over it (`ShardCache._unpin`)."""
        if self._pin_fd >= 0:
            pin_fd, self._pin_fd = self._pin_fd, -1
            self.cache._unpin(pin_fd)


class ShardCache:
    """Verified shards keyed by sha256 under `root` (default $DSINSPECT_CACHE/shards), at most
    `max_bytes` of them when they are not in use."""

    def __init__(self, root: str | os.PathLike | None = None, max_bytes: int | None = None,
                 stats: ReadStats | None = None, retries: int = 4, backoff: float = 0.1):
        self.root = Path(root) if root else cache_dir() / "shards"
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes, self.retries, self.backoff = max_bytes, retries, backoff
        self.stats = stats or ReadStats()
        self._checked: dict[str, np.ndarray] = {}  # per shard: which blocks this process has verified
        self._shared_checks: set[str] = set()  # shards whose `_checked` is shared with forked processes
        self._parts: dict[str, set[int]] = {}  # per shard: parts this process checked and put in its .partial
        self._parts_lock = threading.Lock()
        # one fill of this process fetches at a time, with all its runs in flight, while the others
        # convert what they fetched: the link stays busy and the shard needed first arrives first
        # (the next begins once the last runs of the one before are in flight: no idle round trip;
        # `_run_slots` keeps the runs in flight of all fills at _RUNS_IN_FLIGHT)
        self._fetching = threading.Lock()
        self._run_slots = threading.Semaphore(_RUNS_IN_FLIGHT)
        self._next_use: Callable[[str], float] | None = None  # see evict_by
        self._inflight: dict[tuple[str, int], threading.Event] = {}  # parts a thread is fetching now
        self._part_slots: dict[str, SlotLocks] = {}  # per shard, the record locks parts are claimed with
        self._overdue: set[tuple[str, int]] = set()  # parts another process held past WAIT_ELSEWHERE: fetched here
        self._partial_users: dict[str, int] = {}  # cold reads under way, per shard
        self._retired: set[str] = set()  # filled shards whose parts wait for those reads to end
        self._abandon = threading.local()  # the event a fill in this thread stops at (see `open`)
        self._in_place: dict[str, set[int]] = {}  # per local store shard: parts this process checked in its file
        self._unpinning = threading.Lock()  # one release of this process at a time, with its eviction (`_unpin`)
        self._sizes: dict[str, int] = {}  # per entry seen, its Arrow bytes (`_held_bytes`)
        _LIVE.add(self)

    def _after_fork(self) -> None:
        """In a forked child (a DataLoader worker inherits its parent's cache): the locks and the
        fetches in flight of the parent's threads, which the child does not have, made anew. A lock
        a parent's thread held at the fork (a fill fetching, a release evicting) would stay held
        here for good, and the child's first fill or release would wait forever. The parts those
        threads claimed stay claimed by the parent's record locks: the child waits for them as for
        any other process's."""
        self._parts_lock = threading.Lock()
        self._fetching = threading.Lock()
        self._run_slots = threading.Semaphore(_RUNS_IN_FLIGHT)
        self._unpinning = threading.Lock()
        self._inflight = {}
        self._partial_users, self._retired = {}, set()  # the parent's cold reads, which end there

    # -- public --------------------------------------------------------------------------------

    def open(self, version: DatasetVersion, shard: int, abandon: threading.Event | None = None) -> CachedShard:
        """The shard, from the cache or fetched into it; pinned until the caller releases it.
        `abandon` set: a fill under way here stops at its next run (`FillAbandoned`), leaving
        what it checked in the `.partial` file for the next fill and no entry (a closing reader)."""
        entry = version.manifest.shards[shard]
        pin_fd = self._pin(entry.sha256)
        try:
            trusted = self._trusted_entry(entry.sha256, locked=False)
            if trusted is None:
                with locked_file(self._path(entry.sha256, ".lock")):
                    trusted = self._trusted_entry(entry.sha256)  # another process may have filled it meanwhile
                    if trusted is None:
                        self.stats.add("cache_misses")
                        self._abandon.event = abandon or threading.Event()  # read by this thread's `_fill`
                        sidecar = self._fill(version, shard)
                        trusted = sidecar, self._path(entry.sha256, ".blocks").read_bytes()  # just written
                        self._evict_over_bound()
                    else:
                        self.stats.add("cache_hits")
            else:
                self.stats.add("cache_hits")
            os.utime(self._path(entry.sha256, ".json"))  # recency, for eviction
            return CachedShard(self, entry.sha256, pin_fd, trusted[1])
        except BaseException:
            os.close(pin_fd)
            raise

    def share_checks(self, shas: list[str]) -> None:
        """Keep which blocks of these shards (those cached now) are checked in memory shared with
        every process forked from this one from now on, keeping what is known: a block one of
        them checks is not checked again by the others, nor by processes forked later (a
        TorchLoader's workers of later passes). Call before forking. Unix only (else a no-op)."""
        todo = []
        for sha in dict.fromkeys(shas):
            if sha in self._shared_checks:
                continue
            try:  # the sidecar only (a shard's size in blocks): its block hashes are read when it opens
                blocks = -(-json.loads(self._path(sha, ".json").read_bytes())["arrow_bytes"] // BLOCK)
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not cached (or a broken entry, which `open` refills)
            todo.append((sha, blocks, self._checked.get(sha)))
        if not todo or not hasattr(mmap, "MAP_SHARED"):
            return
        shared = np.frombuffer(mmap.mmap(-1, sum(n for _, n, _ in todo), flags=mmap.MAP_SHARED), dtype=bool)
        at = 0
        for sha, n, known in todo:
            view = shared[at:at + n]
            if known is not None and len(known) == n:
                view[:] = known
            self._checked[sha] = view
            self._shared_checks.add(sha)
            at += n

    def holds(self, sha256: str) -> bool:
        """Whether the shard looks cached (its sidecar exists): a hint for read-ahead; `open` decides."""
        return os.path.exists(self._path(sha256, ".json"))

    def check_fits(self, need_bytes: int, what: str) -> None:
        """Refuse at start a working set the bound cannot hold (rather than thrash or stall later)."""
        if self.max_bytes is not None and need_bytes > self.max_bytes:
            raise UserError(f"cache bound of {self.max_bytes:,} bytes is smaller than {what} ({need_bytes:,} bytes): "
                            "raise the bound, or use shuffle='window' with fewer window_shards")

    def cached_bytes(self) -> int:
        return sum(meta["arrow_bytes"] for _, meta in self._entries())

    # -- filling -------------------------------------------------------------------------------

    def local_write(self):
        """Around a write into the cache: a full or read-only disk is a StorageError naming it."""
        return local_write(str(self.root))

    def open_partial(self, index: ShardIndex) -> tuple[int, bool]:
        """A file descriptor (the caller's to close) of the shard's `.partial` file, created sparse at
        the shard's size (the parts nobody fetched yet are holes), and whether it was made now."""
        with self.local_write():
            fd = os.open(self._path(index.shard, ".partial"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fresh = os.fstat(fd).st_size != index.size
                if fresh:
                    os.ftruncate(fd, index.size)
            except BaseException:
                os.close(fd)
                raise
        return fd, fresh

    def note_part(self, index: ShardIndex, part: int) -> None:
        """A checked part is now in the `.partial` file: the fill need not fetch it (see the module
        docstring); ends the caller's claim on it."""
        try:
            if not self.holds(index.shard):
                with self.local_write(), open(self._path(index.shard, ".have"), "ab") as have:
                    have.write(part.to_bytes(4, "little"))  # one small append: atomic
                with self._parts_lock:
                    self._parts.setdefault(index.shard, set()).add(part)
        finally:
            self.release(index.shard, [part])

    def claim(self, sha256: str, parts: list[int]) -> tuple[list[int], list]:
        """Of `parts` not yet in this process's `.partial`, those the caller must fetch now (claimed:
        `release` them after), and for those another thread or process is fetching, something to
        `wait()` on (done, or given up: look again). Between processes a part is claimed with a
        record lock on `<sha>.parts` (released if the process dies), so the ranks of a node reading
        cold at the same moment fetch each part once."""
        claimed, busy = [], []
        with self._parts_lock:
            have = self._parts.get(sha256, ())
            for p in parts:
                if p in have:
                    continue
                event = self._inflight.get((sha256, p))
                if event is None:
                    self._inflight[(sha256, p)] = threading.Event()
                    claimed.append(p)
                else:
                    busy.append(event)
            slots = self._slot_locks(sha256)
            if slots is not None:
                elsewhere = [p for p in claimed if not slots.try_lock(p) and (sha256, p) not in self._overdue]
                for p in elsewhere:  # another process fetches it: ours waits for that, then looks again
                    self._inflight.pop((sha256, p)).set()
                    claimed.remove(p)
                    busy.append(_Elsewhere(self, sha256, slots, p))
                done = self._hinted(sha256).intersection(claimed) if claimed else ()
                for p in done:  # another process fetched it before we locked: read it from the file
                    slots.unlock(p)
                    self._inflight.pop((sha256, p)).set()
                    claimed.remove(p)
        return claimed, busy

    def release(self, sha256: str, parts: list[int]) -> None:
        """End a claim (see `claim`): whoever waits for these parts looks again."""
        with self._parts_lock:
            slots = self._part_slots.get(sha256)
            for p in parts:
                self._overdue.discard((sha256, p))
                event = self._inflight.pop((sha256, p), None)
                if event is not None:
                    if slots is not None:
                        slots.unlock(p)
                    event.set()

    def _slot_locks(self, sha256: str) -> SlotLocks | None:
        """This process's handle on the shard's `.parts` lock file (under `_parts_lock`), or None
        where record locks are not supported or the file cannot be made (then: claims per process)."""
        slots = self._part_slots.get(sha256)
        if slots is None and LOCKS_SUPPORTED:
            try:
                slots = self._part_slots[sha256] = SlotLocks(self._path(sha256, ".parts"))
            except OSError:
                return None
        return slots

    def local_part(self, index: ShardIndex, part: int) -> bytes | None:
        """A part some process put in the shard's `.partial` file (a fill under way, or one a job
        ended before it finished), read back and checked again, or None."""
        with self._parts_lock:
            known = part in self._parts.get(index.shard, ())
        if not known and part not in self._hinted(index.shard):
            return None
        start, end = index.span(part)
        try:
            with open(self._path(index.shard, ".partial"), "rb") as f:
                data = os.pread(f.fileno(), end - start, start)
            if hashlib.sha256(data).hexdigest() == index.sha256[part]:
                with self._parts_lock:
                    self._parts.setdefault(index.shard, set()).add(part)
                return data
        except FileNotFoundError:  # the fill just published the shard
            pass
        with self._parts_lock:  # not there after all: whoever asks next fetches it
            self._parts.get(index.shard, set()).discard(part)
        return None

    def _hinted(self, sha256: str) -> set[int]:
        """Parts the `.have` file lists (written by any process; a hint, checked before use)."""
        try:
            return set(np.frombuffer(self._path(sha256, ".have").read_bytes(), "<u4").tolist())
        except (OSError, ValueError):
            return set()

    def _fill(self, version: DatasetVersion, shard: int) -> dict:
        abandon: threading.Event = getattr(self._abandon, "event", None) or threading.Event()
        entry = version.manifest.shards[shard]
        url = version.shard_url(shard)
        try:
            index = version.shard_index(shard)
        except NotFoundError:  # an index file gone missing: the shard whole, as before indexes
            index = None
        parts = index is not None and not is_local(version.catalog.fs)  # filled through a `.partial`
        abandoned = False
        try:
            if index is not None and not parts:
                sidecar = self._publish(entry.sha256, *self._convert_in_place(version, shard, index, url, abandon))
            else:
                sidecar = self._fill_from(version, shard, index, entry, url, abandon)
            if index is not None:  # in the cache now (bytes_fetched counts what crossed); a whole fetch counted itself
                self.stats.add("shards_fetched")
            return sidecar
        except FillAbandoned:
            abandoned = True  # the parts it checked stay in the `.partial` file for the next fill
            raise
        finally:  # after the sidecar: until then cold reads still use the parts (and fetch none twice)
            if parts and not abandoned:
                self._forget_parts(entry.sha256, filling=True)
            pa.default_memory_pool().release_unused()  # what decoding freed back to the OS, not kept

    def _convert_in_place(self, version: DatasetVersion, shard: int, index: ShardIndex, url: str,
                          abandon: threading.Event) -> tuple[str, int]:
        """A local store's shard converted from its own file, read in place (no copy into a
        `.partial`): the footer and each run of row groups checked against their sha256 just
        before the conversion reads them (parts this process checked already are not hashed again)."""
        path = version.shard_path(shard)
        data = pa.memory_map(path).read_buffer()  # a store that cannot be read fails here, as itself

        def ready(groups: list[int]) -> None:
            if abandon.is_set():
                raise FillAbandoned(f"the reader filling shard {url} closed")
            self.check_in_place(path, url, index, [index.footer, *groups], data)

        with self.local_write():  # a full or read-only cache disk: one StorageError naming it
            return self._convert(path, url, ready)

    def check_in_place(self, path: str, url: str, index: ShardIndex, parts: list[int],
                       data: "pa.Buffer | None" = None) -> None:
        """Check these parts of a local store's shard file (`data`: its memory map, else mapped
        here) against their sha256, once per process (`_in_place`); IntegrityError naming the
        bytes and both hashes."""
        with self._parts_lock:
            done = self._in_place.setdefault(index.shard, set())
            todo = [p for p in parts if p not in done]
        if not todo:
            return
        if data is None:
            data = pa.memory_map(path).read_buffer()
        if data.size != index.size:
            raise IntegrityError(f"shard {url}: {data.size} bytes, its index says {index.size}")
        view = memoryview(data)
        began, nbytes = time.monotonic(), 0
        for p in todo:
            start, end = index.span(p)
            got = hashlib.sha256(view[start:end]).hexdigest()
            if got != index.sha256[p]:
                raise IntegrityError(f"shard {url}: bytes {start}..{end}: sha256 {got} does not match the "
                                     f"manifest's shard index ({index.sha256[p]})")
            nbytes += end - start
        with self._parts_lock:
            done.update(todo)
        # read from the store (in place, not copied): counted as fetched, as a remote store's parts are
        self.stats.fetched_parts(nbytes, len(todo), time.monotonic() - began)

    def _fill_from(self, version: DatasetVersion, shard: int, index: ShardIndex | None, entry, url: str,
                   abandon: threading.Event) -> dict:
        self._fetching.acquire()
        handed_over = threading.Event()

        def hand_over() -> None:  # the next fill may start fetching (once)
            if not handed_over.is_set():
                handed_over.set()
                self._fetching.release()

        if index is not None:  # converted as it lands: the conversion follows the fill, row group by row group
            landed, converted = Landed(), {}

            def ready(groups: list[int]) -> None:
                if abandon.is_set():
                    raise FillAbandoned(f"the reader filling shard {url} closed")
                landed.wait_for([index.footer, *groups])

            def convert() -> None:
                try:
                    converted["out"] = self._convert(str(self._path(entry.sha256, ".partial")), url, ready)
                except BaseException as e:  # noqa: BLE001 - raised below, once the fill has ended
                    converted["error"] = e
                finally:  # mimalloc keeps what a thread freed in that thread's heap: this one's, given back
                    pa.default_memory_pool().release_unused()

            converter = threading.Thread(target=convert, name="dsinspect-convert", daemon=True)
            try:
                parquet = self._fill_parts(version, shard, index, hand_over, landed, converter.start, abandon)
            except BaseException:
                landed.fail()
                raise
            finally:
                hand_over()
                if converter.ident is not None:
                    converter.join()
            if "error" in converted:
                raise converted["error"]
            arrow_tmp, rows = converted["out"]
        else:
            try:
                parquet = fetch_verified(version.catalog.fs, version.shard_path(shard), url, entry.sha256, entry.bytes,
                                         str(self.root), self.stats, self.retries, self.backoff)
            finally:
                hand_over()
            try:
                arrow_tmp, rows = self._convert(parquet, url)
            finally:
                os.unlink(parquet)
        return self._publish(entry.sha256, arrow_tmp, rows)

    def _publish(self, sha256: str, arrow_tmp: str, rows: int) -> dict:
        """A converted shard into the cache: its block hashes, the Arrow file renamed into place,
        and last the sidecar that makes the entry trusted; returns the sidecar. The sidecar and the
        block hashes are durable; the Arrow file is fsynced only where the boot cannot be told
        (`_boot_id`): elsewhere the sidecar names the boot that wrote it, and an entry of an
        earlier boot (a crash may have torn the file) is checked whole before it is trusted
        (`_intact_since_boot`). The fsync was ~0.1 s of a 1 s fill of 100 MB (benchmarks/README.md)."""
        boot = _boot_id()
        try:
            digests = _block_digests(arrow_tmp)
            if boot is None:
                _fsync(arrow_tmp)
            _write_durably(self._path(sha256, ".blocks"), digests.tobytes())
            os.replace(arrow_tmp, self._arrow(sha256))
        except BaseException:
            if os.path.exists(arrow_tmp):
                os.unlink(arrow_tmp)
            raise
        sidecar = {"format": _FORMAT, "sha256": sha256, "rows": rows, "block_size": BLOCK,
                   "arrow_bytes": self._arrow(sha256).stat().st_size,
                   "blocks_xxh3": xxhash.xxh3_64_hexdigest(digests.tobytes())}
        if boot is not None:
            sidecar["boot"] = boot  # the Arrow file may not be on disk yet: trusted unchecked in this boot only
        _write_durably(self._path(sha256, ".json"), json.dumps(sidecar).encode())  # now it is trusted
        return sidecar

    def _intact_since_boot(self, sha256: str, sidecar: dict, blocks: bytes) -> bool:
        """Whether an entry's Arrow file can be trusted: of its size, and, published without an
        fsync, in the boot that wrote it (a process that dies leaves its writes in the page cache);
        after a reboot only if its size and every block match (then the file is made durable and
        the sidecar no longer names a boot, so this runs once; torn, it is said once, under the
        entry's lock). No: the caller refills it."""
        arrow = str(self._arrow(sha256))
        whole = os.stat(arrow).st_size == sidecar["arrow_bytes"]
        boot = sidecar.get("boot")
        if boot is None or boot == _boot_id():
            return whole
        if not whole or _block_digests(arrow).tobytes() != blocks:
            log.warning("cached shard %s was torn by a restart of the machine: filled again", arrow)
            return False
        with contextlib.suppress(OSError):  # a read-only cache: intact all the same, checked again next time
            _fsync(arrow)
            _write_durably(self._path(sha256, ".json"),
                           json.dumps({k: v for k, v in sidecar.items() if k != "boot"}).encode())
        return True

    def _fill_parts(self, version: DatasetVersion, shard: int, index: ShardIndex,
                    hand_over: Callable[[], None] = lambda: None, landed: Landed | None = None,
                    opened: Callable[[], None] = lambda: None, abandon: threading.Event | None = None) -> str:
        """The shard assembled in its `.partial` file from the parts already there and the rest
        fetched in runs of consecutive parts (each part checked); returns the file's path.
        `hand_over()` is called once its last run is in flight: the next fill may start fetching
        while these land (one after the other, the link idles a round trip between two fills);
        `opened()` once the file is there at its size; `landed` learns each part in it, checked.
        The footer is fetched first, then the row groups in order (a conversion follows them).
        A part this fill did not write itself is used only once its bytes in this very file check
        out: what this process's cold reads wrote, and what `.have` says other processes wrote,
        may have gone into an older `.partial` that another process removed and someone made anew
        (then it is a hole here, and is fetched)."""
        sha = index.shard
        with self._parts_lock:
            known = set(self._parts.get(sha, ()))
        landed = landed or Landed()
        fd, fresh = self.open_partial(index)
        try:
            opened()
            present = set() if fresh else {p for p in sorted(known | self._hinted(sha)) if holds_part(fd, index, p)}
            landed.add(present)
            with self._parts_lock:  # what cold reads noted since is checked at the end
                self._parts[sha] = present | (self._parts.get(sha, set()) - known)
            missing = [p for p in [index.footer, *range(index.footer)] if p not in present]
            written: set[int] = set()
            others: list[threading.Event] = []

            def fetch(part_run: list[int]) -> None:
                try:
                    self._fetch_into(fd, version, shard, index, part_run)
                    written.update(part_run)
                    landed.add(part_run)
                    for p in part_run:  # listed in `.have`: a process waiting for the part reads it here
                        self.note_part(index, p)
                finally:
                    self.release(sha, part_run)
                    self._run_slots.release()

            # runs in flight together: one after another a run waits a round trip, and a link's
            # bandwidth-delay product is several runs (docs/REMOTE.md). Every submitted run runs to
            # its end (it releases its claim); the first error is raised once all have.
            in_flight: deque[Future] = deque()
            with ThreadPoolExecutor(_RUNS_IN_FLIGHT, thread_name_prefix="dsinspect-run") as pool:
                try:
                    for run in _runs(missing, index, _FETCH_RUN):
                        if abandon is not None and abandon.is_set():  # what is in flight lands and is noted
                            raise FillAbandoned(f"the reader filling shard {version.shard_url(shard)} closed")
                        claimed, busy = self.claim(sha, run)  # cold reads may have brought or be fetching some
                        others += busy
                        for part_run in _runs(claimed, index, _FETCH_RUN):
                            while len(in_flight) >= _RUNS_IN_FLIGHT:
                                in_flight.popleft().result()
                            self._run_slots.acquire()  # a slot the fill before may still hold
                            try:
                                in_flight.append(pool.submit(fetch, part_run))
                            except BaseException:
                                self._run_slots.release()
                                raise
                    hand_over()
                finally:
                    done = [f.exception() for f in in_flight]
                if any(done):
                    raise next(e for e in done if e)
            for event in others:
                event.wait()
            # parts a cold read brought meanwhile (or failed to): checked here, fetched if not in this file
            left = [p for p in missing if p not in written and not holds_part(fd, index, p)]
            landed.add(set(missing) - set(left))
            for part_run in _runs(left, index, _FETCH_RUN):
                self._fetch_into(fd, version, shard, index, part_run)
                landed.add(part_run)
            os.fsync(fd)
        finally:
            os.close(fd)
        return str(self._path(sha, ".partial"))  # late cold reads may still write into it: the same checked bytes

    def _fetch_into(self, fd: int, version: DatasetVersion, shard: int, index: ShardIndex, run: list[int]) -> None:
        """Consecutive parts fetched in one ranged read, each checked, written at their offsets."""
        spans = [(*index.span(p), index.sha256[p]) for p in run]
        datas = fetch_parts(version.catalog.fs, version.shard_path(shard), version.shard_url(shard), spans,
                            self.stats, self.retries, self.backoff)
        with self.local_write():
            for (start, _, _), data in zip(spans, datas):
                write_at(fd, data, start)

    def use_partial(self, sha256: str, n: int = 1) -> None:
        """A cold read of this process is using the shard's parts (n=-1: no longer): the fill that
        ends meanwhile leaves them until it is done, or it would fetch them again."""
        retire = False
        with self._parts_lock:
            users = self._partial_users[sha256] = self._partial_users.get(sha256, 0) + n
            if users <= 0:
                self._partial_users.pop(sha256, None)
                retire = sha256 in self._retired
        if retire:
            self._forget_parts(sha256)

    def drop_partial(self, sha256: str) -> None:
        """The shard is in the cache: a `.partial` file a cold read opened after its fill removed
        its own (made anew, sparse at the shard's size) goes, with what this process knew of it,
        once no cold read here uses it, and only while no fill holds the shard's lock (a fill since
        eviction owns the file; it removes it when it ends). Left, it stayed until the eviction."""
        self._forget_parts(sha256)

    def _forget_parts(self, sha256: str, filling: bool = False) -> None:
        """Drop this process's knowledge of the shard's parts and remove its `.partial` and `.have`
        files, unless cold reads here still use them (then the last one does). The files go only
        under the shard's fill lock (`filling`: the caller holds it): a fill started since in
        another process would otherwise lose the file it is assembling and converting."""
        with self._parts_lock:
            if self._partial_users.get(sha256):
                self._retired.add(sha256)  # the last cold read using them forgets them (`use_partial`)
                return
            self._retired.discard(sha256)
            self._parts.pop(sha256, None)
            if not any(sha == sha256 for sha, _ in self._inflight):  # no claim left: its locks can go
                slots = self._part_slots.pop(sha256, None)
                if slots is not None:
                    slots.close()
        lock = None if filling else open_locked(self._path(sha256, ".lock"), wait=False)
        if not filling and lock is None:
            return  # a fill is under way: it removes them when it ends
        try:
            for ext in (".partial", ".have", ".parts"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(sha256, ext))
        finally:
            if lock is not None:
                os.close(lock)

    def _convert(self, parquet: str, url: str,
                 ready: Callable[[list[int]], None] = lambda groups: None) -> tuple[str, int]:
        """Parquet -> uncompressed Arrow IPC holding one record batch (contiguous columns, so a
        batch of rows is one gather per column), row group by row group in bounded memory, each
        once `ready` says it is in (`convert.py`); (temp path, rows)."""
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".convert-", suffix=".arrow")
        os.close(fd)
        try:
            rows = parquet_to_ipc(parquet, tmp, str(self.root), ready)
        except UNREADABLE as e:
            os.unlink(tmp)
            if _cannot_write(e):  # the cache's disk (Arrow writes it too), not the shard
                raise
            raise arrow_error(e, f"shard {url} has the right sha256 but is not readable Parquet",
                              IntegrityError) from None
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp, rows

    # -- trust, pins and eviction --------------------------------------------------------------

    def _trusted(self, sha256: str) -> dict | None:
        """The sidecar of a complete cache entry, or None (missing, partial or inconsistent)."""
        trusted = self._trusted_entry(sha256)
        return trusted[0] if trusted else None

    def _trusted_entry(self, sha256: str, locked: bool = True) -> tuple[dict, bytes] | None:
        """(sidecar, block hashes) of a complete cache entry, or None. Not `locked` (the caller does
        not hold the entry's lock): an entry of an earlier boot is None, for the caller to check
        under the lock (once, by one process: it hashes the whole file and may refill it)."""
        try:
            sidecar = json.loads(self._path(sha256, ".json").read_bytes())
            blocks = self._path(sha256, ".blocks").read_bytes()
            ok = (sidecar.get("format") == _FORMAT and sidecar.get("sha256") == sha256
                  and sidecar.get("block_size") == BLOCK
                  and xxhash.xxh3_64_hexdigest(blocks) == sidecar["blocks_xxh3"]
                  and (self._intact_since_boot(sha256, sidecar, blocks) if locked
                       else sidecar.get("boot") in (None, _boot_id())
                       and self._arrow(sha256).stat().st_size == sidecar["arrow_bytes"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return (sidecar, blocks) if ok else None

    def _pin(self, sha256: str) -> int:
        return open_locked(self._path(sha256, ".pin"), shared=True)  # waits while an evictor holds it exclusively

    def _entries(self) -> Iterator[tuple[str, dict]]:
        for p in self.root.glob("*.json"):
            if not is_sha256(p.stem):
                continue  # not an entry of ours
            try:
                yield p.stem, {**json.loads(p.read_bytes()), "mtime": p.stat().st_mtime}
            except (OSError, ValueError):
                continue

    def evict_by(self, next_use: Callable[[str], float] | None) -> None:
        """Evict by the known order: `next_use(sha256)` is when the shard is needed next (inf: not
        as far as the reader knows), and the entry needed furthest in the future goes first
        (Belady's policy; order/future.py). None: the least recently used first."""
        self._next_use = next_use

    def forget_order(self, next_use: Callable[[str], float]) -> None:
        """Stop evicting by `next_use` (its reader closes), unless another reader's replaced it."""
        if self._next_use == next_use:
            self._next_use = None

    def _unpin(self, pin_fd: int) -> None:
        """Drop a pin (its shared lock) and, under a bound, evict what the cache holds over it. A fill
        evicts only after it publishes (the new entry pinned by its filler); an entry unpinned after
        the last fill's eviction (one it found pinned) would stay over the bound until some process
        fills again, or for good once the readers close (the four-process test's cache sat at 1.9x
        its bound after the job). One release at a time per process, with its eviction: what the
        cache holds unpinned exceeds the bound by at most one shard per process releasing now."""
        if self.max_bytes is None:
            os.close(pin_fd)
            return
        with self._unpinning:
            os.close(pin_fd)
            try:
                if self._held_bytes() > self.max_bytes:
                    self._evict_over_bound(warn=False)  # all in use: the fill that pinned them said so
            except OSError as e:  # a release runs in cleanup paths: the next fill's eviction tries again
                log.warning("shard cache %s: could not evict over its bound after a release: %s", self.root, e)

    def _held_bytes(self) -> int:
        """What the cache's entries hold, from a listing and the sizes known here (a shard converts
        to the same bytes: its sidecar is read once per process), so a release's check reads no files."""
        sizes = self._sizes
        total = 0
        for name in os.listdir(self.root):
            sha, ext = name[:-5], name[-5:]
            if ext != ".json":
                continue
            size = sizes.get(sha)
            if size is None and is_sha256(sha):
                try:
                    size = sizes[sha] = int(json.loads((self.root / name).read_bytes())["arrow_bytes"])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
            total += size or 0
        return total

    def _evict_over_bound(self, warn: bool = True) -> None:
        if self.max_bytes is None:
            return
        next_use = self._next_use
        if next_use is None:
            entries = sorted(self._entries(), key=lambda e: e[1]["mtime"])
        else:  # furthest next use first; among equals (never needed again), least recently used first
            entries = sorted(self._entries(), key=lambda e: (-next_use(e[0]), e[1]["mtime"]))
        total = sum(meta["arrow_bytes"] for _, meta in entries)
        for sha, meta in entries:
            if total <= self.max_bytes:
                return
            if self._evict(sha):
                total -= meta["arrow_bytes"]
        if total > self.max_bytes and warn:
            log.warning("shard cache %s holds %d bytes over its bound of %d: every cached shard is in use",
                        self.root, total - self.max_bytes, self.max_bytes)

    def _evict(self, sha256: str) -> bool:
        """Delete one entry if no process has it pinned; True if this call removed it (two processes
        that listed it may both get its pin: the one that finds its sidecar gone evicted nothing)."""
        fd = open_locked(self._path(sha256, ".pin"), wait=False)
        if fd is None:  # pinned
            return False
        try:
            if not self._remove(sha256):
                return False
            self.stats.add("evictions")
            return True
        finally:
            os.close(fd)

    def _discard(self, sha256: str) -> None:
        """Forget a corrupt entry (the sidecar first, so nobody trusts what remains)."""
        self._remove(sha256)
        checked = self._checked.pop(sha256, None)
        self._shared_checks.discard(sha256)
        if checked is not None:
            checked[:] = False  # shared with other processes (share_checks): they check again too
        self.stats.add("verify_failures")

    def _remove(self, sha256: str) -> bool:
        """Remove an entry's files, its sidecar first; whether there was a sidecar to remove."""
        removed = False
        for ext in (".json", ".arrow", ".blocks", ".partial", ".have", ".parts"):
            try:
                os.unlink(self._path(sha256, ext))
                removed = removed or ext == ".json"
            except FileNotFoundError:
                pass
        return removed

    def _path(self, sha256: str, ext: str) -> Path:
        return self.root / f"{check_sha256(sha256, 'cached shard sha256')}{ext}"  # never a path elsewhere

    def _arrow(self, sha256: str) -> Path:
        return self._path(sha256, ".arrow")


def _after_fork_in_child() -> None:
    for cache in list(_LIVE):
        cache._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    """All of `data` at `offset` (pwrite may write less, e.g. on a disk that just filled up: then
    the rest fails with ENOSPC here). A part must be whole before it is read back through a memory
    map: an unwritten page of a sparse file on a full tmpfs kills the reader with SIGBUS."""
    view = memoryview(data).cast("B")
    while len(view):
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def holds_part(fd: int, index: ShardIndex, part: int) -> bool:
    """Whether the file holds `part`, checked against its sha256."""
    start, end = index.span(part)
    return hashlib.sha256(os.pread(fd, end - start, start)).hexdigest() == index.sha256[part]


def _runs(parts: list[int], index: ShardIndex, limit: int) -> list[list[int]]:
    """Consecutive parts grouped into runs of at most `limit` bytes (a run of one part may be larger)."""
    runs: list[list[int]] = []
    for p in parts:
        if runs and runs[-1][-1] == p - 1 and index.offsets[p + 1] - index.offsets[runs[-1][0]] <= limit:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def _cannot_write(error: BaseException) -> bool:
    """An error of writing the cache's disk (full, over quota, read-only), as Python or Arrow says it."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return True
    return any(words in str(error) for words in ("No space left on device", "Disk quota exceeded",
                                                 "Read-only file system"))


def _block_digests(arrow_path: str) -> np.ndarray:
    """XXH3-64 of every BLOCK-sized piece of the file (the last one may be shorter)."""
    data = memoryview(pa.memory_map(arrow_path).read_buffer())
    return np.array([xxhash.xxh3_64_intdigest(data[i:i + BLOCK]) for i in range(0, len(data), BLOCK)], dtype="<u8")


@functools.cache
def _boot_id() -> str | None:
    """This boot of the machine (Linux), or None where it cannot be told."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".sidecar-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class _Elsewhere:
    """A part another process is fetching: `wait()` until it is done (or has died, or WAIT_ELSEWHERE
    seconds pass: then the next `claim` gives it to the caller, who fetches it here too), as a
    thread waits on a `threading.Event`."""

    def __init__(self, cache: ShardCache, sha256: str, slots: SlotLocks, part: int):
        self._cache, self._sha256, self._slots, self._part = cache, sha256, slots, part

    def wait(self) -> None:
        if not self._slots.wait(self._part, WAIT_ELSEWHERE):
            with self._cache._parts_lock:
                self._cache._overdue.add((self._sha256, self._part))

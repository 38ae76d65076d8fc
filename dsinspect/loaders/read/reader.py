"""Gather a planned batch from the run's versions through the shard cache, shard by shard, and warm
the cache along the known future order. Rows of a shard the cache does not hold yet come from its
checked parts (`cold.py`) while it fills in the background, so a fresh node's first batch does not
wait for whole shards. Under a cache bound, shards the bound cannot hold (one larger than it, or
those past what fits of a working set larger than it) are streamed: read row group by row group
as batches need them and never filled (`_choose_streamed`). Fills start from the batch after the
first (not under its gather and transform). On a local store, where a fill is decoding rather than
waiting on a link, a consumer faster than cold reads fills a shard itself rather than decode its
row groups cold beside the fills. `close()` never waits for a fill (cache.py: abandoned at its next
run, what it checked kept for the next reader)."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from dsinspect.arrays import distinct
from dsinspect.errors import IntegrityError, NotFoundError, UserError
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.format.shard_index import ShardIndex
from dsinspect.loaders.order.bounded import READ_AHEAD, bound_advice, resident_shards
from dsinspect.loaders.order.future import NextUse
from dsinspect.loaders.order.plan import BatchPlan, locate_step, steps_in_epoch
from dsinspect.loaders.order.spec import RunSpec, Shuffle
from dsinspect.loaders.read.cache import CachedShard, ShardCache
from dsinspect.loaders.read.cold import ColdRows
from dsinspect.loaders.read.columns import gather, is_numeric_dense
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import is_local
from dsinspect.lru import LRU

__all__ = ["BatchReader", "Layout"]

log = logging.getLogger("dsinspect.reader")

# ((source, shard), rows in it, output positions)
Layout = list[tuple[tuple[int, int], np.ndarray, "np.ndarray | None"]]


class _Rows(NamedTuple):
    """What `read` needs of a plan (given its layout): the rows of several plans, one after another."""

    indices: np.ndarray
    sources: np.ndarray
    step: int  # the first plan's


class BatchReader:
    """Reads the rows a BatchPlan names, in plan order, with their stored row hashes."""

    def __init__(self, catalog: Catalog, spec: RunSpec, columns: Sequence[str] | None = None,
                 cache: ShardCache | None = None, fetch_threads: int = 2, fill: bool = True):
        spec.require_rows("the Loader")
        self.versions = [catalog.version(s.name, s.version) for s in spec.sources]
        for source, version in zip(spec.sources, self.versions):
            if not np.array_equal(version.manifest.shard_rows, source.shard_rows):
                raise IntegrityError(f"{version.address}: its shards do not match the run spec's shard sizes")
        self.columns = list(columns) if columns else [f.name for f in self.versions[0].fields]
        self._check_columns()
        self._read = [*self.columns, HASH_COLUMN]
        first = self.versions[0].manifest.schema
        self.schema = pa.schema([first.field(c) for c in self.columns])  # of the batches (row hashes apart)
        self.numeric = frozenset(f.name for f in self.schema if is_numeric_dense(f.type))  # numpy as is
        self.cache = cache or ShardCache()
        # shards of all sources numbered in one sequence, for splitting a batch by shard in one sort
        self._starts = [np.asarray(v.shard_starts, np.int64) for v in self.versions]
        self._shard_base = np.cumsum([0] + [len(v.manifest.shards) for v in self.versions])[:-1].tolist()
        self._flat_starts = np.concatenate([st[:len(v.manifest.shards)] for st, v in zip(self._starts, self.versions)])
        self._shard_key = [(k, s) for k, v in enumerate(self.versions) for s in range(len(v.manifest.shards))]
        self._sha256 = dict(zip(self._shard_key, (sha for v in self.versions for sha in v.manifest.shards.sha256s())))
        self._max_open = self._plan_budget(spec)
        self._open: LRU[tuple[int, int], CachedShard] = LRU(self._max_open)  # pinned; least recent released first
        self._pending: dict[tuple[int, int], Future] = {}
        # fills run ahead along the known order (`warm`): the shards still to start, with the step that
        # first reads each, and those started and not yet read; topped up at every read
        self._queued: dict[tuple[int, int], int] = {}
        self._ahead: dict[tuple[int, int], int] = {}
        # a sliding shuffle under a bound: fills run ahead along the order, topped up at every read
        # (the others start what a warm asks, as far as half the open budget goes)
        self.fills_in_order = self.cache.max_bytes is not None and spec.shuffle is Shuffle.SLIDING
        self._ahead_limit = self._fills_ahead(spec)
        self._lock = threading.Lock()
        self._fetch_threads = fetch_threads
        self._pool: ThreadPoolExecutor | None = None
        self._closed = threading.Event()  # set by close(): fills under way stop at their next run
        # per source: a local store, whose fills are CPU (decode) rather than link: a consumer faster
        # than cold reads fills a shard queued for a fill itself rather than decode its row groups cold
        self._local = [is_local(v.catalog.fs) for v in self.versions]
        self._cold: ColdRows | None = None
        self._indexes: dict[tuple[int, int], ShardIndex | None] = {}
        self._deferred: dict[tuple[int, int], None] = {}  # shards to fill once the first batch is read
        self._reads = 0
        self._cold_seconds = 0.0  # how long the last cold read took
        self.fill = fill  # False: read what each batch needs and start nothing in the background
        self._now = spec.start.step  # the step last read: where the order's future starts
        if self.cache.max_bytes is not None:  # a bound: evict what the order needs furthest ahead
            self._spec, self._future, self._future_lock = spec, None, threading.Lock()
            self._keys_of: dict[str, list[int]] = {}
            for i, key in enumerate(self._shard_key):
                self._keys_of.setdefault(self._sha256[key], []).append(i)
            self.cache.evict_by(self._next_use)

    def read(self, plan: BatchPlan, layout: Layout | None = None,
             patience: float | None = None) -> tuple[dict[str, np.ndarray | pa.Array], np.ndarray]:
        """The rows of `plan` in plan order: per requested column a dense numpy array or an Arrow
        array (see `columns.gather`), and the stored row hashes as an (n, 16) uint8 array.
        `layout` is the plan's from `layouts` (computed here when not given). `patience`: how long
        the consumer took over its last batch (None: unknown). Rows of a shard whose fill is under
        way are read cold only when a cold read took no longer than that: a consumer slower than
        cold reads never waits for a fill, a faster one leaves the CPU to the fills (a shuffled
        cold batch decodes ~30 row groups to use 32 rows; a fill decodes each once)."""
        if layout is None:
            layout = self.layouts([plan])[0]
        if self._reads and self._deferred:  # what the first batch read cold: filled from its successor on
            self._start_fills()
        self._now = plan.step
        if self.fills_in_order and (self._queued or self._ahead):
            self._top_up()
        opened, read = self._open, self._read
        parts: list = []
        cold = []
        for key, rows, where in layout:
            shard = opened.get(key)  # the common case, without the lock (released meanwhile: its map stays valid)
            if shard is None and self.streamed and self._sha256[key] in self.streamed:
                cold.append(len(parts))  # a streamed shard: its rows from their row groups, always
                parts.append((key, rows, where))
                continue
            if shard is None:
                shard = self._shard_or_cold(key, patience)
                if shard is None:
                    cold.append(len(parts))
                    parts.append((key, rows, where))
                    continue
            shard.check(rows, read)
            parts.append((shard, rows, where))
        if cold:
            self._read_cold(parts, cold)
        n = len(plan.indices)
        columns = {c: gather([(shard.view(c), rows, where) for shard, rows, where in parts], n, c) for c in read}
        hashes = columns.pop(HASH_COLUMN)
        self._reads = 1  # fills start at the next read, not under the first batch's gather and transform
        if not isinstance(hashes, np.ndarray):  # a null-free binary(16) column is always dense
            raise IntegrityError("a cached shard's row hashes are not 16-byte values")
        return columns, hashes

    def read_many(self, plans: Sequence[BatchPlan],
                  patience: float | None = None) -> tuple[dict[str, np.ndarray | pa.Array], np.ndarray]:
        """The rows of several plans, one after another, in one read: one gather per column and
        shard for all of them (a Loader reads runs of steps: per batch, Python's overhead is what
        separates a read from a bare numpy gather)."""
        merged = _Rows(np.concatenate([p.indices for p in plans]), np.concatenate([p.sources for p in plans]),
                       plans[0].step)
        return self.read(merged, self.layouts([merged])[0], patience)  # one vectorised split: ~60 us for 512 rows

    def shards_of(self, plans: Sequence[BatchPlan]) -> list[tuple[int, int]]:
        """The (source, shard) keys these plans read, in order of first need."""
        indices = np.concatenate([p.indices for p in plans]).astype(np.int64, copy=False)
        if not len(indices):
            return []
        keys, first = np.unique(self._shards(indices, plans), return_index=True)
        return [self._shard_key[k] for k in keys[np.argsort(first)].tolist()]

    def layouts(self, plans: Sequence[BatchPlan]) -> list[Layout]:
        """Per plan, its rows split by shard: ((source, shard), rows in the shard, output positions
        or None for all rows in order), for many plans in one vectorised pass (a loader plans
        steps in chunks, so a batch's own read does no splitting)."""
        if not plans:
            return []
        lengths = np.array([len(p.indices) for p in plans], np.int64)
        firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        indices = np.concatenate([p.indices for p in plans]).astype(np.int64, copy=False)
        total = len(indices)
        if not total:
            return [[] for _ in plans]
        shard = self._shards(indices, plans)
        plan_of = np.repeat(np.arange(len(plans), dtype=np.int64), lengths)
        order = np.argsort(plan_of * len(self._shard_key) + shard, kind="stable")  # by plan, then shard
        shard, plan_of = shard[order], plan_of[order]
        rows = indices[order] - self._flat_starts[shard]
        positions = order - firsts[plan_of]
        cuts = np.flatnonzero((shard[1:] != shard[:-1]) | (plan_of[1:] != plan_of[:-1])) + 1
        bounds = [0, *cuts.tolist(), total]
        out: list[Layout] = [[] for _ in plans]
        for a, b, p, g in zip(bounds[:-1], bounds[1:], plan_of[bounds[:-1]].tolist(), shard[bounds[:-1]].tolist()):
            out[p].append((self._shard_key[g], rows[a:b], None if b - a == lengths[p] else positions[a:b]))
        return out

    def _shards(self, indices: np.ndarray, plans: Sequence[BatchPlan]) -> np.ndarray:
        """The shard of each of the plans' rows (`indices`, theirs concatenated), numbered across
        sources as `_shard_key` is."""
        if len(self.versions) == 1:
            return np.searchsorted(self._starts[0], indices, side="right") - 1
        sources = np.concatenate([p.sources for p in plans])
        shard = np.empty(len(indices), np.int64)
        for k in distinct(sources).tolist():
            sel = sources == k
            shard[sel] = self._shard_base[k] + np.searchsorted(self._starts[k], indices[sel], side="right") - 1
        return shard

    def warm(self, plans: Sequence[BatchPlan]) -> None:
        """Start fetching the shards these future batches need and the cache lacks, in the order
        of the batches; those past what may run ahead (`_fills_ahead`) start as reads reach them
        (`_top_up`), so fills keep running ahead along the known order between two warms."""
        if not plans or not self.fill:
            return
        wanted = self._first_needs(plans)
        if not self._reads:  # a fresh reader: fill after the first batch, which reads cold what it needs
            missing = [k for k in wanted if not self.cache.holds(self._sha256[k]) and not self._streams(k)]
            self._load_indexes(missing)
            cold = [k for k in missing if self._index(k) is not None]
            with self._lock:
                self._deferred.update(dict.fromkeys(cold))
            first = [k for k in cold if wanted[k] == plans[0].step]  # the first batch reads these cold
            if first:  # their footers parse meanwhile (a warm cache: no cold reader made)
                self._cold_rows().prime([(self.versions[k[0]], k[1], self._index(k)) for k in first])
            wanted = {k: step for k, step in wanted.items() if k not in cold}
        with self._lock:
            self._queued = {k: step for k, step in wanted.items() if k not in self._ahead}
        self._top_up()

    def _first_needs(self, plans: Sequence[BatchPlan]) -> dict[tuple[int, int], int]:
        """The (source, shard) keys these plans read, in order of first need, with that first step."""
        indices = np.concatenate([p.indices for p in plans]).astype(np.int64, copy=False)
        if not len(indices):
            return {}
        keys, first = np.unique(self._shards(indices, plans), return_index=True)
        steps = np.repeat([p.step for p in plans], [len(p.indices) for p in plans])
        order = np.argsort(first)
        return {self._shard_key[k]: s for k, s in zip(keys[order].tolist(), steps[first[order]].tolist())}

    def _top_up(self) -> None:
        """Start the next queued fills, in order of first need, while fewer than `_ahead_limit`
        shards are started and not yet read (`fills_in_order`), or while half the open budget is
        fetching at most (the others)."""
        with self._lock:
            now = self._now
            self._ahead = {k: step for k, step in self._ahead.items() if step > now}
            # a sliding shuffle's fills are bounded by what runs ahead alone: the one a read waits for
            # does not hold back the next (two fetch threads take them in order)
            budget = len(self._queued) if self.fills_in_order else max(1, self._max_open // 2) - len(self._pending)
            # under a bound, fills reach no further than the order's next `_max_open` shards (open, cached
            # or not: a window and the next): one further is unpinned as soon as it opens (`_furthest`),
            # evicted as the one needed last and fetched again (the sliding shuffle: `_ahead_limit`)
            room = len(self._queued)
            if self.cache.max_bytes is not None and not self.fills_in_order:
                room = self._max_open - len(self._ahead)
            for key, step in list(self._queued.items()):
                if budget <= 0 or room <= 0 or len(self._ahead) >= self._ahead_limit:
                    break
                del self._queued[key]
                if step < now or self._streams(key):
                    continue  # read already (cold or filled), or never filled
                room -= 1
                if key in self._open or key in self._pending:
                    continue  # under way
                if self.cache.holds(self._sha256[key]):
                    continue  # a cached shard opens in well under a millisecond: a thread would cost more
                self._pending[key] = self._executor().submit(self._load, key)
                self._ahead[key] = step
                budget -= 1

    def _fills_ahead(self, spec: RunSpec) -> int:
        """How many shards may be filled before their first read. A sliding shuffle under a bound
        holds its q resident shards and what the bound leaves beside them (READ_AHEAD): its next
        shards to enter, one after another as each is first read; more would push a shard still
        to be read out of the bound and fetch it twice. Otherwise no limit but the fetch budget."""
        if self.fills_in_order:
            return max(1, self._max_open - spec.window_shards)
        return len(self._shard_key)

    def _next_use(self, sha256: str) -> float:
        """The next step this run (any rank) reads the shard at, from the one read last; inf when
        not within the horizon (two epochs, or 2^22 samples) or not a shard of this run."""
        keys = self._keys_of.get(sha256)
        if not keys:
            return float("inf")
        now = self._now
        with self._future_lock:
            future = self._future
            if future is None or not future.first_step <= now <= future.first_step + future.count // 2:
                epoch = locate_step(self._spec, now)[0]
                horizon = max(1, min(2 * steps_in_epoch(self._spec, epoch), (1 << 22) // self._spec.global_batch))
                future = self._future = NextUse(self._spec, now, horizon)
        return min(future.after(k, now) for k in keys)

    def close(self, wait: bool = False) -> None:
        """Release the shards held, without waiting for a fill under way: queued fills are
        dropped, running ones stop at their next run (`ShardCache.open`'s `abandon`), keeping
        what they checked for the next reader and publishing nothing half-made. `wait`: return
        once they have stopped (a caller that reads the cache's counters next)."""
        self._closed.set()
        self.cache.forget_order(self._next_use)  # the cache no longer asks this reader what comes next
        if self._cold is not None:
            self._cold.close()
        if self._pool:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
        with self._lock:
            for shard in self._open.values():
                shard.release()
            self._open.clear()
            self._pending.clear()

    # -- internals -----------------------------------------------------------------------------

    def _shard_or_cold(self, key: tuple[int, int], patience: float | None) -> CachedShard | None:
        """The shard if it is open or cached (or fails to fill: its error), or once its fill under
        way ends (see `read`), else None when its rows can be read cold (it has an index)."""
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None and pending.done():
            pending.result()  # a failed fill raises here
        if self.cache.holds(self._sha256[key]) or self._index(key) is None:
            return self._shard(key)
        if (pending is not None and patience is not None and patience < self._cold_seconds
                and (pending.running() or self._local[key[0]])):
            return self._shard(key)  # waits for the fill, or fills it here if it has not started
        return None

    def _cold_rows(self) -> ColdRows:
        if self._cold is None:
            self._cold = ColdRows(self.cache, streamed=self.streamed)
        return self._cold

    def _read_cold(self, parts: list, cold: list[int]) -> None:
        """Replace the entries of uncached shards in `parts` (at positions `cold`) by the decoded row
        groups their rows are in (`cold.py`), then start filling those shards in the background."""
        wants = [(self.versions[parts[i][0][0]], parts[i][0][1], self._index(parts[i][0]), parts[i][1]) for i in cold]
        started = time.monotonic()
        got = self._cold_rows().take(wants, self._read)
        self._cold_seconds = time.monotonic() - started
        keys = []
        for i, pieces in zip(cold, got):
            key, rows, where = parts[i]
            if pieces is None:  # filled meanwhile: from the cache
                shard = self._shard(key)
                shard.check(rows, self._read)
                parts[i] = (shard, rows, where)
                continue
            if not self._streams(key):
                keys.append(key)
            at = np.arange(len(rows)) if where is None else where
            parts[i] = [(group, group_rows, at[sel]) for group, group_rows, sel in pieces]
        parts[:] = [p for entry in parts for p in (entry if isinstance(entry, list) else [entry])]
        with self._lock:
            self._deferred.update(dict.fromkeys(keys))
        if self._reads:
            self._start_fills()

    def _start_fills(self) -> None:
        """Fill the shards read cold so far (and what warm() deferred), in the order they were wanted."""
        with self._lock:
            if not self.fill:
                self._deferred = {}
                return
            for key in self._deferred:
                if key not in self._open and key not in self._pending and not self._streams(key):
                    self._pending[key] = self._executor().submit(self._load, key)
            self._deferred = {}

    def _load_indexes(self, keys: Sequence[tuple[int, int]]) -> None:
        """Fetch the indexes of these shards together (see DatasetVersion.load_indexes)."""
        for source in dict.fromkeys(k for k, _ in keys):
            self.versions[source].load_indexes([s for k, s in keys if k == source and (k, s) not in self._indexes])

    def _index(self, key: tuple[int, int]) -> ShardIndex | None:
        """The shard's index, or None (written without one, or its index file is missing: then the
        shard is fetched whole, as before indexes)."""
        if key not in self._indexes:
            try:
                self._indexes[key] = self.versions[key[0]].shard_index(key[1])
            except NotFoundError as e:
                log.warning("%s; reading the shard whole", e)
                self._indexes[key] = None
        return self._indexes[key]

    def _shard(self, key: tuple[int, int]) -> CachedShard:
        with self._lock:
            cached = self._open.get(key)
            if cached is not None:
                return cached
            pending = self._pending.get(key)
        if pending is not None and not pending.cancel():  # not started: open it here, no thread hand-off
            pending.result()  # fetched in the background; _load has put it in _open
            with self._lock:
                if key in self._open:
                    return self._open.peek(key)
        return self._load(key)

    def _load(self, key: tuple[int, int]) -> CachedShard:
        cached = self.cache.open(self.versions[key[0]], key[1], self._closed)
        try:
            self._check_decoded(key[0], key[1], cached)
        except UserError:
            cached.release()
            raise
        if self._cold is not None:
            self._cold.forget(cached.sha256)
        unpinned: list[CachedShard] = []  # released after the lock: under a bound a release evicts (disk I/O)
        with self._lock:
            self._pending.pop(key, None)
            if self._closed.is_set():  # filled after close (published for the next reader): not pinned
                unpinned.append(cached)
            elif key in self._open:  # loaded twice (foreground and background): keep one pin
                unpinned.append(cached)
                cached = self._open.peek(key)
            else:
                if self.cache.max_bytes is not None and len(self._open) >= self._max_open:
                    unpinned.append(self._open.pop(self._furthest()))
                unpinned += [old for _, old in self._open.put(key, cached)]
        for shard in unpinned:
            shard.release()  # unpinned: evictable; its memory map stays valid for readers holding it
        return cached

    def _furthest(self) -> tuple[int, int]:
        """Under a bound, the open shard to unpin: the one the order reads furthest ahead (one it has
        left first), not the least recently read: that may be a shard filled ahead and not read yet,
        which the cache would then evict, as the one needed furthest, and fetch again."""
        return max(self._open, key=lambda k: self._next_use(self._sha256[k]))  # ties: least recent

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._fetch_threads, thread_name_prefix="dsinspect-fetch")
        return self._pool

    def _plan_budget(self, spec: RunSpec) -> int:
        """How many shards to keep open; under a cache bound, which shards to stream (see
        `_choose_streamed`), or a clear error now if the bound cannot hold what must be cached."""
        self._takes = []  # per version: how many of its shards the shuffle needs at once, and what they are
        self._spec_for_bound = spec
        self.bound_advice: list = []
        shards = 0
        for version in self.versions:
            count = len(version.manifest.shards)
            take = resident_shards(spec, count)
            if spec.shuffle is Shuffle.GLOBAL:
                what = "the whole version (global shuffle reads anywhere in it)"
            elif spec.shuffle is Shuffle.WINDOW:
                what = f"one shuffle window ({spec.window_shards} shards)"
            elif spec.shuffle is Shuffle.SLIDING:
                what = f"the sliding shuffle's resident shards ({spec.window_shards}, and {READ_AHEAD} read ahead)"
            else:
                what = "one shard"
            self._takes.append((take, f"{what} of {version.address}"))
            # open: a window and the next one; the sliding set with its read-ahead; all of a global one
            shards += {Shuffle.GLOBAL: count, Shuffle.SLIDING: take}.get(spec.shuffle, min(2 * take, count))
        self.streamed: set[str] = set()  # sha256s of the shards read through, never filled (shared with ColdRows)
        self._decoded_checked = False
        self._choose_streamed(1.0)
        return max(2, shards)

    def _choose_streamed(self, ratio: float) -> None:
        """Under a cache bound, the shards to stream rather than fill, so that what is filled fits:
        each shard larger than the bound, and where a version's working set (the shards its shuffle
        reads at once, `ratio` times their stored size: decoded Arrow is often larger) does not fit
        in what is left, every shard past those that do, in manifest order (a global shuffle over a
        bound of a quarter of the data keeps a quarter cached and reads the rest as it goes). A shard
        without an index can only be filled whole: a bound that cannot hold those is refused now.
        A working set streamed is said once in a warning with its numbers (order/bounded.py): the
        bound, the working set, the fetch amplification to expect and the shuffles that would fit.
        A warning, not a refusal: streaming reads every sample right, and over a fast store (local
        disk) its cost may be what the run wants; the warning names the way out."""
        room = self.cache.max_bytes
        if room is None:
            return
        before = len(self.streamed)
        advice = []
        for version, (take, what) in zip(self.versions, self._takes):
            entries = version.manifest.shards
            size = [int(e.bytes * ratio) for e in entries]
            indexed = [e.index_sha256 is not None for e in entries]
            fits = [s for s in range(len(entries)) if size[s] <= room or not indexed[s]]
            self.streamed.update(entries[s].sha256 for s in set(range(len(entries))).difference(fits))
            working = sum(sorted((size[s] for s in fits), reverse=True)[:take])
            if working > room:  # keep what fits, in order; stream the rest
                needed = working
                kept: list[int] = []
                total = 0
                for s in fits:
                    if indexed[s] and total + size[s] > room:
                        self.streamed.add(entries[s].sha256)
                    else:
                        kept.append(size[s])
                        total += size[s]
                working = sum(sorted(kept, reverse=True)[:take])
                scaled = "" if ratio == 1 else f" as cached ({ratio:.1f}x its stored size)"
                self.cache.check_fits(working, f"{what}{scaled}, in shards without an index to stream them by")
                streamed = [e.sha256 in self.streamed for e in entries]
                try:  # rows per row group, from one streamed shard's index (a cold read fetches it anyway)
                    index = version.shard_index(streamed.index(True))
                    group_rows = float(index.row_starts[-1]) / max(1, index.parts - 1)
                except (ValueError, NotFoundError, IntegrityError):
                    group_rows = 1.0
                advice.append(bound_advice(self._spec_for_bound, what, self.cache.max_bytes, [e.bytes for e in entries],
                                           [e.rows for e in entries], streamed, group_rows, needed, ratio))
            room -= working
        if len(self.streamed) > before:
            for a in advice:
                log.warning("%s", a.message())
            if not advice:
                log.warning("cache bound of %s bytes: %d of %d shards streamed (each larger than the bound: "
                            "fetched row group by row group as batches read them, never cached)",
                            f"{self.cache.max_bytes:,}", len(self.streamed), len(self._shard_key))
        if advice:
            self.bound_advice = advice  # what the warning said, for a caller to show or test

    def _streams(self, key: tuple[int, int]) -> bool:
        return self._sha256[key] in self.streamed

    def _check_decoded(self, k: int, shard: int, cached: CachedShard) -> None:
        """The cache holds decoded Arrow, often larger than the stored Parquet: once the first
        shard is in, choose again what to stream with the ratio it really takes."""
        if self._decoded_checked or self.cache.max_bytes is None:
            return
        ratio = max(1.0, cached.nbytes / max(1, self.versions[k].manifest.shards[shard].bytes))
        if ratio > 1:
            self._choose_streamed(ratio)
        self._decoded_checked = True  # only once passed: a refusal in a read-ahead thread repeats in the reader

    def _check_columns(self) -> None:
        first = {f.name: f.type for f in self.versions[0].fields}
        for version in self.versions:
            types = {f.name: f.type for f in version.fields}
            missing = [c for c in self.columns if c not in types]
            if missing:
                raise UserError(f"{version.address} has no field(s) {missing}")
            differ = [c for c in self.columns if types[c] != first[c]]
            if differ:
                raise UserError(f"mixture sources disagree on the type of {differ}: "
                                "pick common columns with columns=[...]")

"""Gather a planned batch from the run's versions through the shard cache, shard by shard, and warm
the cache along the known future order."""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

import numpy as np
import pyarrow as pa

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.cache import CachedShard, ShardCache
from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.columns import gather
from dsinspect.loaders.manifest import HASH_COLUMN
from dsinspect.loaders.order import BatchPlan
from dsinspect.loaders.spec import RunSpec, Shuffle

__all__ = ["BatchReader"]


class BatchReader:
    """Reads the rows a BatchPlan names, in plan order, with their stored row hashes."""

    def __init__(self, catalog: Catalog, spec: RunSpec, columns: Sequence[str] | None = None,
                 cache: ShardCache | None = None, fetch_threads: int = 2):
        self.versions = [catalog.version(s.name, s.version) for s in spec.sources]
        for source, version in zip(spec.sources, self.versions):
            if tuple(s.rows for s in version.manifest.shards) != source.shard_rows:
                raise IntegrityError(f"{version.address}: its shards do not match the run spec's shard sizes")
        self.columns = list(columns) if columns else [f.name for f in self.versions[0].fields]
        self._check_columns()
        self._read = [*self.columns, HASH_COLUMN]
        first = self.versions[0].manifest.schema
        self.schema = pa.schema([first.field(c) for c in self.columns])  # of the batches (row hashes apart)
        self.cache = cache or ShardCache()
        self._max_open = self._plan_budget(spec)
        self._open: OrderedDict[tuple[int, int], CachedShard] = OrderedDict()
        self._pending: dict[tuple[int, int], Future] = {}
        self._lock = threading.Lock()
        self._fetch_threads = fetch_threads
        self._pool: ThreadPoolExecutor | None = None

    def read(self, plan: BatchPlan) -> tuple[dict[str, np.ndarray | pa.Array], np.ndarray]:
        """The rows of `plan` in plan order: per requested column a dense numpy array or an Arrow
        array (see `columns.gather`), and the stored row hashes as an (n, 16) uint8 array."""
        n = len(plan.indices)
        if len(self.versions) == 1:
            parts = self._parts(0, plan.indices, None)
        else:
            parts = []
            for k in np.unique(plan.sources):
                sel = np.flatnonzero(plan.sources == k)
                parts += self._parts(int(k), plan.indices[sel], sel)
        for shard, rows, _ in parts:
            shard.check(rows, self._read)
        columns = {c: gather([(shard.view(c), rows, where) for shard, rows, where in parts], n) for c in self._read}
        hashes = columns.pop(HASH_COLUMN)
        if not isinstance(hashes, np.ndarray):  # a null-free binary(16) column is always dense
            raise IntegrityError("a cached shard's row hashes are not 16-byte values")
        return columns, hashes

    def warm(self, plans: Sequence[BatchPlan]) -> None:
        """Start fetching the shards these future batches need, in order of first need (at most
        half the open budget ahead)."""
        if not plans:
            return
        sources = np.concatenate([p.sources for p in plans])
        indices = np.concatenate([p.indices for p in plans])
        wanted: list[tuple[int, int]] = []
        for k in np.unique(sources):
            version = self.versions[int(k)]
            shards = np.searchsorted(version.shard_starts, indices[sources == k], side="right") - 1
            unique, first = np.unique(shards, return_index=True)
            wanted += [(int(k), int(s)) for _, s in sorted(zip(first.tolist(), unique.tolist()))]
        with self._lock:
            budget = max(1, self._max_open // 2) - len(self._pending)
            for key in wanted:
                if budget <= 0:
                    break
                if key not in self._open and key not in self._pending:
                    self._pending[key] = self._executor().submit(self._load, key)
                    budget -= 1

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        with self._lock:
            for shard in self._open.values():
                shard.release()
            self._open.clear()
            self._pending.clear()

    # -- internals -----------------------------------------------------------------------------

    def _parts(self, k: int, indices: np.ndarray, where: np.ndarray | None) -> list[tuple[CachedShard, np.ndarray, np.ndarray | None]]:
        """(cached shard, rows in it, output positions), one part per shard the indices touch;
        `where` None means positions 0..n-1 (and a single part keeps it None: a gather in place)."""
        version = self.versions[k]
        shards = np.searchsorted(version.shard_starts, indices, side="right") - 1
        if not len(shards):
            return []
        first = shards[0]
        if (shards == first).all():
            return [(self._shard(k, int(first)), indices - version.shard_starts[first], where)]
        order = np.argsort(shards, kind="stable")  # one sort splits the batch by shard
        ordered = shards[order]
        cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        positions = order if where is None else where[order]
        rows = indices[order] - np.asarray(version.shard_starts)[ordered]
        return [(self._shard(k, int(ordered[a])), rows[a:b], positions[a:b])
                for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(order)])]

    def _shard(self, k: int, shard: int) -> CachedShard:
        key = (k, shard)
        with self._lock:
            cached = self._open.get(key)
            if cached is not None:
                self._open.move_to_end(key)
                return cached
            pending = self._pending.get(key)
        if pending is not None and not pending.cancel():  # not started: open it here, no thread hand-off
            pending.result()  # fetched in the background; _load has put it in _open
            with self._lock:
                if key in self._open:
                    return self._open[key]
        return self._load(key)

    def _load(self, key: tuple[int, int]) -> CachedShard:
        cached = self.cache.open(self.versions[key[0]], key[1])
        try:
            self._check_decoded(key[0], key[1], cached)
        except UserError:
            cached.release()
            raise
        with self._lock:
            self._pending.pop(key, None)
            if key in self._open:  # loaded twice (foreground and background): keep one pin
                cached.release()
                return self._open[key]
            self._open[key] = cached
            while len(self._open) > self._max_open:
                _, old = self._open.popitem(last=False)
                old.release()  # unpinned: evictable; its memory map stays valid for readers holding it
        return cached

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._fetch_threads, thread_name_prefix="dsinspect-fetch")
        return self._pool

    def _plan_budget(self, spec: RunSpec) -> int:
        """How many shards to keep open, and a clear error now if the cache bound cannot hold the
        working set of this shuffle mode as stored (checked again, decoded, at the first fill)."""
        shards = 0
        self._need: list[tuple[int, str]] = []
        for version in self.versions:
            sizes = sorted((s.bytes for s in version.manifest.shards), reverse=True)
            if spec.shuffle is Shuffle.GLOBAL:
                take, what = len(sizes), "the whole version (global shuffle reads anywhere in it)"
            elif spec.shuffle is Shuffle.WINDOW:
                take, what = spec.window_shards, f"one shuffle window ({spec.window_shards} shards)"
            else:
                take, what = 1, "one shard"
            self._need.append((sum(sizes[:take]), f"{what} of {version.address}"))
            self.cache.check_fits(sum(n for n, _ in self._need), self._need[-1][1])
            shards += min(2 * take, len(sizes)) if spec.shuffle is not Shuffle.GLOBAL else len(sizes)
        self._decoded_checked = False
        return max(2, shards)

    def _check_decoded(self, k: int, shard: int, cached: CachedShard) -> None:
        """The cache holds decoded Arrow, often larger than the stored Parquet: once the first
        shard is in, scale the working set by what it really takes and refuse a bound too small."""
        if self._decoded_checked or self.cache.max_bytes is None:
            return
        ratio = max(1.0, cached.nbytes / max(1, self.versions[k].manifest.shards[shard].bytes))
        need = int(sum(n for n, _ in self._need) * ratio)
        self.cache.check_fits(need, f"{self._need[k][1]} as cached ({ratio:.1f}x its stored size)")
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
                raise UserError(f"mixture sources disagree on the type of {differ}: pick common columns with columns=[...]")

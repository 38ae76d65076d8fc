"""Gather a planned batch from the run's versions: batched per row group, through a small LRU."""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np
import pyarrow as pa

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.catalog import Catalog
from dsinspect.loaders.manifest import HASH_COLUMN
from dsinspect.loaders.order import BatchPlan
from dsinspect.loaders.spec import RunSpec
from dsinspect.loaders.version import DatasetVersion

__all__ = ["BatchReader", "RowGroupCache"]


class RowGroupCache:
    """Decoded row groups, least recently used out first, bounded by bytes."""

    def __init__(self, max_bytes: int = 256 << 20):
        self.max_bytes = max_bytes
        self._tables: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._bytes = 0
        self.hits = self.misses = 0

    def get(self, key: tuple, load) -> pa.Table:
        table = self._tables.get(key)
        if table is not None:
            self.hits += 1
            self._tables.move_to_end(key)
            return table
        self.misses += 1
        table = load()
        self._tables[key] = table
        self._bytes += table.nbytes
        while self._bytes > self.max_bytes and len(self._tables) > 1:
            _, old = self._tables.popitem(last=False)
            self._bytes -= old.nbytes
        return table


class BatchReader:
    """Reads the rows a BatchPlan names, in plan order, with their stored row hashes."""

    def __init__(self, catalog: Catalog, spec: RunSpec, columns: Sequence[str] | None = None,
                 cache: RowGroupCache | None = None):
        self.versions = [catalog.version(s.name, s.version) for s in spec.sources]
        for source, version in zip(spec.sources, self.versions):
            if tuple(s.rows for s in version.manifest.shards) != source.shard_rows:
                raise IntegrityError(f"{version.address}: its shards do not match the run spec's shard sizes")
        self.columns = list(columns) if columns else [f.name for f in self.versions[0].fields]
        self._check_columns()
        self._read = [*self.columns, HASH_COLUMN]
        self.cache = cache or RowGroupCache()

    def read(self, plan: BatchPlan) -> pa.Table:
        """The rows of `plan` (requested columns plus the row-hash column) in plan order."""
        if len(self.versions) == 1:
            return self._take(0, plan.indices)
        parts, order = [], []
        for k in np.unique(plan.sources):
            sel = np.flatnonzero(plan.sources == k)
            parts.append(self._take(int(k), plan.indices[sel]))
            order.append(sel)
        where = np.empty(len(plan.indices), np.int64)
        where[np.concatenate(order)] = np.arange(len(plan.indices))
        return pa.concat_tables(parts).take(pa.array(where))

    def _take(self, k: int, indices: np.ndarray) -> pa.Table:
        version = self.versions[k]
        load = lambda shard, group: self.cache.get(  # noqa: E731
            (k, shard, group), lambda: version.read_row_group(shard, group, self._read))
        return version.take(indices, self._read, read_group=load)

    def _check_columns(self) -> None:
        for version in self.versions:
            types = {f.name: f.type for f in version.fields}
            missing = [c for c in self.columns if c not in types]
            if missing:
                raise UserError(f"{version.address} has no field(s) {missing}")
            first = {f.name: f.type for f in self.versions[0].fields}
            differ = [c for c in self.columns if types[c] != first[c]]
            if differ:
                raise UserError(f"mixture sources disagree on the type of {differ}: pick common columns with columns=[...]")



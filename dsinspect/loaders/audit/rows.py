"""Read the rows a BatchPlan names straight from the versions' row groups (no whole-shard download):
what replay and the log check read, with each row's shard location and a re-check of its hash.

Independent of the Loader's shard cache on purpose: replay proves what the catalog says now, by a
second read path, and reads a few row groups of a remote version instead of whole shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.audit.bounds import ReadBound, group_sizes
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, OffsetLimitError, arrow_error, past_offset_limit
from dsinspect.loaders.format.arrow_indices import int64_array
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.order.plan import BatchPlan
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.lru import LRU

__all__ = ["PlanRows", "RowReader", "ByteLRU", "conformed", "offset_limit_error"]

_GROUPS_KEPT = 64  # row groups kept in memory: consecutive steps of a check often share them


class ByteLRU:
    """An LRU bounded by the bytes its values hold (each `put` says how many), not by their count;
    the newest entry stays even when it alone exceeds the bound."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max(0, int(max_bytes))
        self.bytes = 0
        self._items: LRU[Any, tuple[Any, int]] = LRU(2**62)

    def get(self, key: Any) -> Any:
        found = self._items.get(key)
        return None if found is None else found[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        old = self._items.pop(key)
        if old is not None:
            self.bytes -= old[1]
        self._items.put(key, (value, nbytes))
        self.bytes += nbytes
        while self.bytes > self.max_bytes and len(self._items) > 1:
            oldest = next(iter(self._items))
            self.bytes -= self._items.pop(oldest)[1]  # type: ignore[index]

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class PlanRows:
    """The rows of one plan in plan order: data columns, stored hashes, where each row lives, and
    whether its bytes still hash to the stored hash (None when not re-checked)."""

    table: pa.Table            # the data columns (no hash column)
    stored: list[bytes]
    shards: np.ndarray
    shard_rows: np.ndarray
    rehashed: list[bytes] | None

    @property
    def verified(self) -> np.ndarray | None:
        if self.rehashed is None:
            return None
        return np.array([a == b for a, b in zip(self.stored, self.rehashed)], dtype=bool)


class RowReader:
    """Reads plans of one run spec's sources; keeps recently read row groups for the next plan (the
    last 64, or up to `cache_bytes` of them when given). `columns` default: the fields every source
    has with one type."""

    def __init__(self, catalog: Catalog, spec: RunSpec, columns: Sequence[str] | None = None, *,
                 cache_bytes: int | None = None):
        spec.require_rows("replay")
        self.versions = [catalog.version(s.name, s.version) for s in spec.sources]
        for source, version in zip(spec.sources, self.versions):
            if tuple(version.manifest.shard_rows.tolist()) != source.shard_rows:
                raise IntegrityError(f"{version.address}: its shards do not match the run spec's shard sizes")
        first = self.versions[0].manifest.schema
        if columns is None:  # every field all sources share with one type (a mixture may differ)
            columns = [f.name for f in first if all(_type(v, f.name) == f.type for v in self.versions)]
        self.columns = list(columns)
        for version in self.versions:
            missing = [c for c in self.columns if _type(version, c) is None]
            if missing:
                raise UserError(f"{version.address} has no field(s) {missing}")
            if [c for c in self.columns if _type(version, c) != first.field(c).type]:
                raise UserError(f"mixture sources disagree on the types of some of {self.columns}: pick common columns")
        self.schema = pa.schema([first.field(c) for c in self.columns])
        self._groups: LRU[tuple[int, int, int], pa.Table] | ByteLRU = (
            LRU(_GROUPS_KEPT) if cache_bytes is None else ByteLRU(cache_bytes))
        self._footer_sizes: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def read(self, plan: BatchPlan, rehash: bool = True, bound: ReadBound | None = None) -> PlanRows:
        """The plan's rows; `rehash` recomputes each row's hash from its bytes (needs every field);
        `bound` is charged with each row group as it is decoded (BatchTooLarge past it)."""
        n = len(plan.indices)
        shards, shard_rows = np.empty(n, np.int64), np.empty(n, np.int64)
        rehashed: list[bytes | None] = [None] * n
        parts, order = [], []
        try:
            for k in np.unique(plan.sources).tolist():
                sel = np.flatnonzero(plan.sources == k)
                version, indices = self.versions[k], plan.indices[sel]
                table = self._take(k, indices, self._wanted(version, rehash), bound)
                s = np.searchsorted(version.shard_starts, indices, side="right") - 1
                shards[sel], shard_rows[sel] = s, indices - version.shard_starts[s]
                if rehash:
                    names = [f.name for f in version.fields]
                    data = table.select(names).cast(version.manifest.schema)
                    for where, h in zip(sel.tolist(), row_hashes(data, names)):
                        rehashed[where] = h
                parts.append(table.select([*self.columns, HASH_COLUMN]))
                order.append(sel)
            table = _in_plan_order(parts, order, n)
        except NOT_CONVERTIBLE as e:
            if not past_offset_limit(e):
                raise
            raise offset_limit_error(plan) from None
        stored = table.column(HASH_COLUMN).to_pylist()
        data = table.drop_columns([HASH_COLUMN]).cast(self.schema)
        return PlanRows(data, stored, shards, shard_rows, rehashed if rehash else None)  # type: ignore[arg-type]

    def estimate(self, plan: BatchPlan, rehash: bool = True) -> tuple[int, int]:
        """(bytes of the row groups `read(plan)` decodes, bytes of the rows it returns), from the
        shards' footers: nothing is read but them."""
        groups, group_bytes, row_bytes = self.footprint(plan, rehash)
        first = np.unique(groups, return_index=True)[1]
        return int(group_bytes[first].sum()), int(row_bytes.sum())

    def footprint(self, plan: BatchPlan, rehash: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per sample of `plan`, from the shards' footers: a number naming its row group (source,
        shard, group), that group's decoded bytes, and its row's (the group's average row)."""
        n = len(plan.indices)
        keys, group_bytes, row_bytes = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        for k in np.unique(plan.sources).tolist():
            sel = plan.sources == k
            wanted = self._wanted(self.versions[k], rehash)
            shards, groups, _ = self.versions[k].locate_many(plan.indices[sel])
            sizes, lengths = np.zeros(len(shards), np.int64), np.ones(len(shards), np.int64)
            for shard in np.unique(shards).tolist():
                here = shards == shard
                group_size, group_rows = self._sizes(k, shard, wanted)
                sizes[here], lengths[here] = group_size[groups[here]], group_rows[groups[here]]
            keys[sel] = (k << 56) + (shards << 28) + groups
            group_bytes[sel], row_bytes[sel] = sizes, sizes // np.maximum(lengths, 1)
        return keys, group_bytes, row_bytes

    def _wanted(self, version: DatasetVersion, rehash: bool) -> list[str]:
        """The columns a read takes from `version`: the reader's, every field to re-hash, the hashes."""
        names = [f.name for f in version.fields] if rehash else []
        return list(dict.fromkeys([*self.columns, *names, HASH_COLUMN]))

    def _sizes(self, k: int, shard: int, wanted: list[str]) -> tuple[np.ndarray, np.ndarray]:
        key = (k, shard, tuple(wanted))
        if key not in self._footer_sizes:
            self._footer_sizes[key] = group_sizes(self.versions[k], shard, wanted)
        return self._footer_sizes[key]

    def _take(self, k: int, indices: np.ndarray, wanted: list[str], bound: ReadBound | None) -> pa.Table:
        """Rows `indices` of source `k`, each row group read once (and charged to `bound`)."""
        version, columns = self.versions[k], tuple(wanted)
        if bound is None:
            return version.take(indices, wanted, read_group=lambda s, g: self._group(k, s, g, columns))
        shards, groups, _ = version.locate_many(indices)
        keys, counts = np.unique(shards * (1 << 32) + groups, return_counts=True)
        samples = dict(zip(keys.tolist(), counts.tolist()))

        def charged(shard: int, group: int) -> pa.Table:
            table = self._group(k, shard, group, columns)
            bound.charge(table, samples[(shard << 32) + group])
            return table
        return version.take(indices, wanted, read_group=charged)

    def _group(self, k: int, shard: int, group: int, columns: tuple[str, ...]) -> pa.Table:
        key = (k, shard, group)
        cached = self._groups.get(key)
        if cached is not None and all(c in cached.column_names for c in columns):
            return cached.select(list(columns))
        version = self.versions[k]
        table = conformed(version, shard, version.read_row_group(shard, group, columns), columns)
        if isinstance(self._groups, ByteLRU):
            self._groups.put(key, table, table.nbytes)
        else:
            self._groups.put(key, table)
        return table


def conformed(version: DatasetVersion, shard: int, table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """`table` (read from `shard`) in the manifest's schema for `columns`: a shard written by another
    writer (or edited) may differ; one that cannot be cast is an IntegrityError."""
    want = _schema_of(version, columns)
    if table.schema == want:
        return table
    try:
        return table.select(list(columns)).cast(want)
    except (*NOT_CONVERTIBLE, KeyError) as e:
        raise arrow_error(e, f"shard {shard} of {version.address} does not match its manifest's schema "
                             f"({version.shard_url(shard)})", IntegrityError) from None


def _in_plan_order(parts: list[pa.Table], order: list[np.ndarray], n: int) -> pa.Table:
    """Each source's rows (`parts`, at plan positions `order`) as one table in plan order."""
    if len(parts) == 1:
        return parts[0]
    inverse = np.empty(n, np.int64)
    inverse[np.concatenate(order)] = np.arange(n)
    return pa.concat_tables(parts).take(int64_array(inverse))


def offset_limit_error(plan: BatchPlan) -> OffsetLimitError:
    """A replayed batch whose rows pass what one Arrow array holds in one column."""
    return OffsetLimitError(f"step {plan.step}, rank {plan.rank}: the batch's rows pass what one Arrow array holds "
                            f"in one column (2 GiB: 32-bit offsets): export it instead, which reads it a part at a "
                            "time (`dsinspect replay --export DIR`)")


def _type(version: DatasetVersion, name: str) -> pa.DataType | None:
    return next((f.type for f in version.fields if f.name == name), None)


def _schema_of(version: DatasetVersion, columns: Sequence[str]) -> pa.Schema:
    schema = version.manifest.schema.append(pa.field(HASH_COLUMN, pa.binary(16), nullable=False))
    return pa.schema([schema.field(c) for c in columns])

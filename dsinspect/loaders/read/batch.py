"""`Batch`: one rank's batch at one step, the rows and where each came from; what the loader yields and
replay rebuilds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from dsinspect.loaders.format.arrow_errors import OffsetLimitError
from dsinspect.loaders.order.plan import BatchPlan
from dsinspect.loaders.read.columns import is_numeric_dense, to_arrow
from dsinspect.loaders.records.runlog import batch_fingerprint

__all__ = ["Batch"]


class Batch:
    """One rank's batch at one step: the rows, and where each came from.

    The loader's fast path keeps dense columns (numbers, equal-length lists of numbers) as numpy
    and the row hashes as one (n, 16) array; `table` (Arrow) and `row_hashes` (a list of bytes)
    are built from them the first time they are asked for, sharing the memory."""

    def __init__(self, plan: BatchPlan, table: pa.RecordBatch | None = None, row_hashes: list[bytes] | None = None,
                 source_names: tuple[str, ...] = (), transformed: Any = None, *,
                 columns: dict[str, np.ndarray | pa.Array] | None = None, hash_array: np.ndarray | None = None,
                 schema: pa.Schema | None = None, numeric: frozenset[str] | None = None):
        self.plan, self.source_names, self.transformed = plan, source_names, transformed
        self._table, self._row_hashes = table, row_hashes
        self._columns, self._hash_array, self._schema = columns, hash_array, schema
        self._numeric = numeric  # the columns whose dense numpy form is their `to_numpy` form

    step = property(lambda self: self.plan.step)
    epoch = property(lambda self: self.plan.epoch)
    rank = property(lambda self: self.plan.rank)
    indices = property(lambda self: self.plan.indices)
    sources = property(lambda self: self.plan.sources)
    padding = property(lambda self: self.plan.padding)
    seeds = property(lambda self: self.plan.seeds)

    @property
    def table(self) -> pa.RecordBatch:
        """The requested columns as Arrow, in batch order."""
        if self._table is None:
            arrays = [self._arrow(name, v) for name, v in self._columns.items()]
            self._table = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        return self._table

    def _arrow(self, name: str, values: np.ndarray | pa.Array) -> pa.Array:
        try:
            return to_arrow(values, self._schema.field(name).type, name)
        except OffsetLimitError as e:
            raise OffsetLimitError(f"step {self.step}, rank {self.rank}: {e}: use a smaller batch_size "
                                   f"(now {len(self)})", name) from None

    @table.setter
    def table(self, value: pa.RecordBatch) -> None:
        self._table, self._columns = value, None

    @property
    def row_hashes(self) -> list[bytes]:
        """The stored 16-byte row hashes, in batch order."""
        if self._row_hashes is None:
            raw = self._hash_array.tobytes()
            self._row_hashes = [raw[i:i + 16] for i in range(0, len(raw), 16)]
        return self._row_hashes

    @row_hashes.setter
    def row_hashes(self, value: list[bytes]) -> None:
        self._row_hashes, self._hash_array = value, None

    @property
    def hash_array(self) -> np.ndarray:
        """The stored row hashes as an (n, 16) uint8 array."""
        if self._hash_array is None:
            self._hash_array = np.frombuffer(b"".join(self._row_hashes), np.uint8).reshape(len(self._row_hashes), 16)
        return self._hash_array

    def __len__(self) -> int:
        return len(self.plan.indices) if self._table is None else self._table.num_rows

    def __repr__(self) -> str:
        return f"Batch(step={self.step}, epoch={self.epoch}, rank={self.rank}, rows={len(self)})"

    @property
    def nbytes(self) -> int:
        """Bytes of the batch's columns as read (what a run record's per-sample digests are weighed against)."""
        if self._columns is not None:
            return sum(int(v.nbytes) for v in self._columns.values())
        return int(self.table.nbytes)

    @property
    def fingerprint(self) -> str:
        return batch_fingerprint([self.hash_array.tobytes()])  # = the joined row hashes

    def to_numpy(self) -> dict[str, np.ndarray]:
        """Columns as numpy: numbers 1-D, equal-length lists 2-D, ragged lists and bytes as objects."""
        if self._columns is not None:
            numeric = self._numeric
            if numeric is None:
                numeric = self._numeric = frozenset(f.name for f in self._schema if is_numeric_dense(f.type))
            return {name: v if isinstance(v, np.ndarray) and name in numeric
                    else _column_to_numpy(self.table.column(name)) for name, v in self._columns.items()}
        return {name: _column_to_numpy(self.table.column(name)) for name in self.table.column_names}

    def rows(self) -> list[dict[str, Any]]:
        return self.table.to_pylist()


def _column_to_numpy(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and arr.null_count == 0 and len(arr) \
            and not pa.types.is_nested(t.value_type) and arr.values.null_count == 0:
        offsets = np.frombuffer(arr.buffers()[1], np.int64 if pa.types.is_large_list(t) else np.int32)
        offsets = offsets[arr.offset:arr.offset + len(arr) + 1]
        lengths = np.diff(offsets)
        if (lengths == lengths[0]).all():  # equal-length rows (e.g. packed tokens): a 2-D view, no copy
            values = arr.values.to_numpy(zero_copy_only=False)
            return values[offsets[0]:offsets[-1]].reshape(len(arr), int(lengths[0]))
    if pa.types.is_fixed_size_list(t) and arr.null_count == 0:
        return arr.flatten().to_numpy(zero_copy_only=False).reshape(len(arr), t.list_size)
    return arr.to_numpy(zero_copy_only=False)

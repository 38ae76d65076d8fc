"""Zero-copy numpy views of a cached shard's columns, and gathers of rows across shards.

A training batch draws a few rows from many places; Arrow's `take` pays a kernel call per
(shard, column) and a concatenation, so for the common null-free types (numbers, binary and
strings, lists of numbers) rows are copied straight into the output buffers in batch order with
numpy. Columns whose rows all have one shape (numbers, fixed-size binary, fixed-size lists and
lists whose every row has the same length, e.g. packed tokens) are "dense": a 2-D view of the
shard, gathered with one `take` into a numpy array, and turned into Arrow only when asked
(`dense_to_arrow`). Anything else (nulls, structs) falls back to Arrow's take.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pyarrow as pa

from dsinspect.loaders.format import arrow_errors
from dsinspect.loaders.format.arrow_indices import int64_array
from dsinspect.loaders.format.arrow_kinds import is_fixed_width as _fixed
from dsinspect.loaders.format.arrow_kinds import is_var_binary as _var_binary
from dsinspect.loaders.read.touched import touched_ranges

__all__ = ["column_view", "gather", "gather_column", "dense_to_arrow", "to_arrow", "is_numeric_dense",
           "FixedView", "ListView", "FixedListView", "ArrowView"]

# (view, rows in its shard, output positions; None: all, in order)
Part = tuple["View", np.ndarray, "np.ndarray | None"]
_NO_RANGES = (np.zeros(0, np.int64), np.zeros(0, np.int64))


class FixedView:
    """A null-free fixed-width column as an (n, width) array (numbers, fixed-size binary)."""

    def __init__(self, arr: pa.Array, base: int):
        width = arr.type.byte_width
        raw = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width:(arr.offset + len(arr)) * width]
        self.values = raw.view(_dtype(arr.type)) if _dtype(arr.type) else raw.reshape(len(arr), width)
        self.width, self.type = width, arr.type
        self.dense = self.values  # a row is one value (or one fixed-width byte string)
        self._start = arr.buffers()[1].address + arr.offset * width - base

    def always(self) -> tuple[np.ndarray, np.ndarray]:
        return _NO_RANGES

    def extent(self) -> tuple[int, int] | None:
        return self._start, self._start + len(self.values) * self.width

    def touched(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        begin = self._start + rows * self.width
        return begin, begin + self.width


class ListView:
    """A null-free binary/string column or list of fixed-width numbers: offsets and flat items."""

    def __init__(self, arr: pa.Array, base: int):
        t = arr.type
        large = pa.types.is_large_list(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        bufs = arr.buffers()
        self.offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32)[arr.offset:arr.offset + len(arr) + 1]
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            child = arr.values
            self.item_type, self.item = t.value_type, t.value_type.byte_width
            data_buf, first = child.buffers()[1], child.offset
        else:
            self.item_type, self.item = None, 1
            data_buf, first = bufs[2], 0
        raw = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        self.items = raw[first * self.item:]
        if self.item_type is not None and _dtype(self.item_type):
            self.items = self.items[: len(self.items) // self.item * self.item].view(_dtype(self.item_type))
        lengths = np.diff(self.offsets)
        self.length = int(lengths[0]) if len(lengths) and (lengths == lengths[0]).all() else None  # all rows equal?
        self.type, self.large = t, large
        self._offsets_start = bufs[1].address + arr.offset * self.offsets.itemsize - base
        self._items_start = (data_buf.address if data_buf is not None else base) + first * self.item - base
        self.dense = None  # equal-length lists of numbers: the items as a (rows, length) grid
        if self.length is not None and self.item_type is not None and _dtype(self.item_type) is not None:
            start, rows = int(self.offsets[0]), len(self.offsets) - 1
            if 0 <= start and start + rows * self.length <= len(self.items):
                self.dense = self.items[start:start + rows * self.length].reshape(rows, self.length)

    def always(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole offsets buffer: checked when the view is made, so the row ranges (and the
        dense grid) come from verified offsets."""
        end = self._offsets_start + len(self.offsets) * self.offsets.itemsize
        return np.array([self._offsets_start], np.int64), np.array([end], np.int64)

    def extent(self) -> tuple[int, int] | None:
        """Every item any row can reach: between the smallest and largest offset."""
        if not len(self.offsets):
            return self._items_start, self._items_start
        lo, hi = int(self.offsets.min()), int(self.offsets.max())
        return self._items_start + lo * self.item, self._items_start + hi * self.item

    def touched(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.dense is not None:  # rows of one length: the ranges by arithmetic
            size = self.length * self.item
            begin = self._items_start + (int(self.offsets[0]) * self.item + rows * size)
            return begin, begin + size
        lo, hi = self.offsets[rows].astype(np.int64), self.offsets[rows + 1].astype(np.int64)
        return self._items_start + lo * self.item, self._items_start + hi * self.item


class FixedListView:
    """A null-free fixed-size list of numbers: the values as a (rows, list size) grid."""

    def __init__(self, arr: pa.Array, base: int):
        t, child = arr.type, arr.values
        self.type, self.size = t, t.list_size
        item = t.value_type.byte_width
        raw = np.frombuffer(child.buffers()[1], np.uint8)
        start = (child.offset + arr.offset * self.size) * item
        values = raw[start:start + len(arr) * self.size * item].view(_dtype(t.value_type))
        self.dense = values.reshape(len(arr), self.size)
        self._start = child.buffers()[1].address + start - base
        self._row = self.size * item

    def always(self) -> tuple[np.ndarray, np.ndarray]:
        return _NO_RANGES

    def extent(self) -> tuple[int, int] | None:
        return self._start, self._start + len(self.dense) * self._row

    def touched(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        begin = self._start + rows * self._row
        return begin, begin + self._row


class ArrowView:
    """Any other column: gathered with Arrow's take."""

    def __init__(self, arr: pa.Array, base: int):
        self.arr, self.type, self._base = arr, arr.type, base
        self.dense = None

    def always(self) -> tuple[np.ndarray, np.ndarray]:
        return _NO_RANGES

    def extent(self) -> tuple[int, int] | None:
        return None  # nested or nullable: rows reach into several buffers; checked per read

    def touched(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = touched_ranges(self.arr, rows)
        return lo - self._base, hi - self._base


View = FixedView | ListView | FixedListView | ArrowView


def column_view(arr: pa.Array, base: int) -> View:
    """The fastest view `arr` allows; `base` is the address offsets are reported against."""
    t = arr.type
    if arr.null_count:
        return ArrowView(arr, base)
    if _fixed(t):
        return FixedView(arr, base)
    if _var_binary(t) or ((pa.types.is_list(t) or pa.types.is_large_list(t))
                          and _fixed(t.value_type) and arr.values.null_count == 0):
        return ListView(arr, base)
    if pa.types.is_fixed_size_list(t) and _dtype(t.value_type) is not None and arr.values.null_count == 0 \
            and not pa.types.is_temporal(t.value_type):
        return FixedListView(arr, base)
    return ArrowView(arr, base)


def gather(parts: Sequence[Part], n: int, name: str = "") -> np.ndarray | pa.Array:
    """Rows of one column (`name`) from several shards, in output order: a numpy array when every
    part is dense with one row shape and type (see `dense_to_arrow`), else an Arrow array. Rows past
    what one Arrow array holds are an OffsetLimitError naming the column."""
    try:
        return _gather(parts, n)
    except arrow_errors.NOT_CONVERTIBLE as e:
        if not arrow_errors.past_offset_limit(e):
            raise
        raise _past_limit(name, parts[0][0].type) from None


def to_arrow(values: np.ndarray | pa.Array, t: pa.DataType, name: str = "") -> pa.Array:
    """A gathered column (`gather`'s numpy or Arrow) as Arrow of type `t`; rows past what one Arrow
    array holds are an OffsetLimitError naming the column."""
    if not isinstance(values, np.ndarray):
        return values
    try:
        return dense_to_arrow(values, t)
    except pa.ArrowCapacityError:
        raise _past_limit(name, t) from None


def _past_limit(name: str, t: pa.DataType) -> arrow_errors.OffsetLimitError:
    kind = f"list of {t.value_type}" if pa.types.is_list(t) or pa.types.is_large_list(t) else str(t)  # no child name
    return arrow_errors.OffsetLimitError(f"column {name!r} ({kind}) would pass what one Arrow array holds, "
                                         f"{arrow_errors.OFFSET_LIMIT:,} bytes or list items (32-bit offsets)", name)


def _gather(parts: Sequence[Part], n: int) -> np.ndarray | pa.Array:
    rows_of = [row_items(v) for v, _, _ in parts]
    first = rows_of[0]
    if first is not None and all(r is not None and r[1] == first[1] for r in rows_of):
        dtype, shape = first[1]
        if len(parts) == 1 and parts[0][2] is None:  # one shard, rows in order: one take
            out = np.take(first[0], parts[0][1])
        else:
            out = np.empty(n, first[0].dtype)
            for (items, _), (_, rows, where) in zip(rows_of, parts):
                _place(out, items, rows, where)
        return out.view(dtype).reshape((n,) + shape)
    grids = [v.dense for v, _, _ in parts]  # dense, but rows of no bytes (lists all empty)
    if grids[0] is not None and all(g is not None and g.dtype == grids[0].dtype and g.shape[1:] == grids[0].shape[1:]
                                    for g in grids):
        out = np.empty((n,) + grids[0].shape[1:], grids[0].dtype)
        for grid, (_, rows, where) in zip(grids, parts):
            _place(out, grid, rows, where)
        return out
    return gather_column(parts, n)


def row_items(view: "View") -> tuple[np.ndarray, tuple[np.dtype, tuple[int, ...]]] | None:
    """A dense view's rows as a 1-D array with one item per row (a void of the row's bytes when a
    row holds several values), and the (dtype, row shape) of the grid; None when not dense. Made
    once per view: numpy moves a row per index rather than a row of small elements (measured ~5x
    faster for 16-byte row hashes)."""
    got = view.__dict__.get("_row_items", False)
    if got is False:
        got = view._row_items = _as_row_items(view.dense)
    return got


def _as_row_items(grid: np.ndarray | None) -> tuple[np.ndarray, tuple[np.dtype, tuple[int, ...]]] | None:
    if grid is None:
        return None
    shape = grid.shape[1:]
    if grid.ndim == 1:
        return grid, (grid.dtype, shape)
    width = grid.itemsize * math.prod(shape)
    if width == 0 or not grid.flags.c_contiguous:  # rows of no bytes: no void type; never for views
        return None
    return grid.view(np.dtype((np.void, width))).reshape(len(grid)), (grid.dtype, shape)


def dense_to_arrow(values: np.ndarray, t: pa.DataType) -> pa.Array:
    """A gathered dense column (C-contiguous) as an Arrow array of type `t`, sharing its memory."""
    n = len(values)
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        child = pa.Array.from_buffers(t.value_type, values.size, [None, pa.py_buffer(values)])
        if pa.types.is_fixed_size_list(t):
            return pa.Array.from_buffers(t, n, [None], children=[child])
        width = values.shape[1] if values.ndim > 1 else 0
        arrow_errors.offset_limit_check(n * width, t)  # an int32 arange would wrap past it
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64 if pa.types.is_large_list(t) else np.int32) \
            if width else np.zeros(n + 1, np.int64 if pa.types.is_large_list(t) else np.int32)
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(offsets)], children=[child])
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(values)])


def is_numeric_dense(t: pa.DataType) -> bool:
    """Whether a dense column's numpy form is what `Batch.to_numpy` gives for this type (numbers,
    lists of numbers), rather than objects (fixed-size binary, decimals) or datetimes."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t = t.value_type
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def gather_column(parts: Sequence[Part], n: int) -> pa.Array:
    """Rows of several shards' views of one column, placed at their output positions, as Arrow."""
    parts = [(v, rows, np.arange(n) if where is None else where) for v, rows, where in parts]
    kinds = {type(v) for v, _, _ in parts}
    if kinds == {FixedView}:
        return _gather_fixed(parts, n)
    if kinds == {ListView} and len({v.type for v, _, _ in parts}) == 1:
        return _gather_lists(parts, n)
    totals = [_offsets_total(v, rows) for v, rows, _ in parts]
    if all(t is not None for t in totals):  # before Arrow copies up to 2 GiB and then refuses
        arrow_errors.offset_limit_check(sum(totals), parts[0][0].type)  # type: ignore[arg-type]
    taken = [(v.arr if isinstance(v, ArrowView) else _as_arrow(v)).take(int64_array(rows)) for v, rows, _ in parts]
    combined = pa.concat_arrays(taken) if len(taken) > 1 else taken[0]
    where = np.concatenate([w for _, _, w in parts])
    return combined.take(int64_array(np.argsort(where, kind="stable")))


def _gather_fixed(parts: Sequence[Part], n: int) -> pa.Array:
    first = parts[0][0]
    out = np.empty((n,) + first.values.shape[1:], first.values.dtype)
    for view, rows, where in parts:
        _place(out, view.values, rows, where)
    return pa.Array.from_buffers(first.type, n, [None, pa.py_buffer(out)])


def _gather_lists(parts: Sequence[Part], n: int) -> pa.Array:
    first = parts[0][0]
    lengths = np.empty(n, np.int64)
    for view, rows, where in parts:
        lengths[where] = view.offsets[rows + 1] - view.offsets[rows]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    arrow_errors.offset_limit_check(int(offsets[-1]), first.type)  # int32 offsets would wrap past it
    items = np.empty(int(offsets[-1]), first.items.dtype)
    equal = len(lengths) and (lengths == lengths[0]).all() and lengths[0] > 0
    for view, rows, where in parts:
        if equal and view.length == lengths[0]:  # fixed-length rows (packed tokens): one 2-D gather
            start = int(view.offsets[0])
            grid = view.items[start:start + (len(view.offsets) - 1) * view.length].reshape(-1, view.length)
            _place(items.reshape(n, -1), grid, rows, where)
            continue
        lo, hi = view.offsets[rows].tolist(), view.offsets[rows + 1].tolist()  # Python ints: no numpy
        for a, b, d in zip(lo, hi, offsets[where].tolist()):                     # scalars per row
            items[d:d + b - a] = view.items[a:b]
    offsets = offsets.astype(np.int64 if first.large else np.int32)
    if first.item_type is None:
        return pa.Array.from_buffers(first.type, n, [None, pa.py_buffer(offsets), pa.py_buffer(items)])
    values = pa.Array.from_buffers(first.item_type, len(items), [None, pa.py_buffer(items)])
    return pa.Array.from_buffers(first.type, n, [None, pa.py_buffer(offsets)], children=[values])


def _place(out: np.ndarray, source: np.ndarray, rows: np.ndarray, where: np.ndarray | None) -> None:
    """out[where] = source[rows]; `where` None: the part fills the whole output in order."""
    if where is None:
        np.take(source, rows, axis=0, out=out)
    else:
        out[where] = source[rows]


def _offsets_total(view: View, rows: np.ndarray) -> int | None:
    """Bytes (or list items) rows `rows` of a view's binary, string or list column with 32-bit
    offsets hold together; None for other columns."""
    if isinstance(view, ListView) and not view.large:
        offsets = view.offsets
    elif isinstance(view, ArrowView) and (pa.types.is_binary(view.type) or pa.types.is_string(view.type)
                                          or pa.types.is_list(view.type)):
        arr = view.arr
        offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + len(arr) + 1]
    else:
        return None
    return int((offsets[rows + 1].astype(np.int64) - offsets[rows]).sum())


def _as_arrow(view: FixedView | ListView | FixedListView) -> pa.Array:
    if isinstance(view, FixedListView):
        return dense_to_arrow(np.ascontiguousarray(view.dense), view.type)
    return gather_column([(view, np.arange(_rows(view)), np.arange(_rows(view)))], _rows(view))


def _rows(view: FixedView | ListView) -> int:
    return len(view.values) if isinstance(view, FixedView) else len(view.offsets) - 1


def _dtype(t: pa.DataType) -> np.dtype | None:
    """The numpy dtype of a fixed-width Arrow type when numpy has one of that width (no pandas:
    Arrow's to_pandas_dtype imports it, half a second of start-up)."""
    width = t.bit_width // 8 if t.bit_width >= 8 else 0
    if pa.types.is_signed_integer(t) or pa.types.is_temporal(t):
        return np.dtype(f"<i{width}")
    if pa.types.is_unsigned_integer(t):
        return np.dtype(f"<u{width}")
    if pa.types.is_floating(t):
        return np.dtype(f"<f{width}")
    return None

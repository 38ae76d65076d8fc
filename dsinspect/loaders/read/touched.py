"""The byte ranges of memory that reading some rows of an Arrow array touches.

The shard cache verifies cached bytes lazily, block by block; this says which blocks a gather
reads, so exactly those are checked (on first use), whatever the column types.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dsinspect.loaders.format.arrow_kinds import has_large_offsets, is_var_binary
from dsinspect.loaders.format.arrow_kinds import is_fixed_width as _fixed

__all__ = ["touched_ranges"]


def touched_ranges(arr: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) absolute addresses of the bytes that rows `rows` of `arr` occupy."""
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    _collect(arr, np.asarray(rows, dtype=np.int64), starts, ends)
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(ends)


def _collect(arr: pa.Array, rows: np.ndarray, starts: list, ends: list) -> None:
    t = arr.type
    if len(rows) == 0 or pa.types.is_null(t):
        return
    absolute = rows + arr.offset
    bufs = arr.buffers()
    if bufs[0] is not None:  # validity bitmap: the bytes holding these rows' bits
        starts.append(bufs[0].address + absolute // 8)
        ends.append(bufs[0].address + absolute // 8 + 1)
    if pa.types.is_boolean(t):
        _add(starts, ends, bufs[1].address + absolute // 8, 1)
    elif pa.types.is_dictionary(t):
        _add(starts, ends, bufs[1].address + absolute * t.index_type.bit_width // 8, t.index_type.bit_width // 8)
        _whole(arr.dictionary, starts, ends)
    elif _fixed(t):
        _add(starts, ends, bufs[1].address + absolute * t.byte_width, t.byte_width)
    elif _var(t) is not None:
        (lo, hi), width = _offsets(bufs[1], absolute, large=_var(t))
        _offset_bytes(bufs[1], absolute, width, starts, ends)
        if bufs[2] is not None:
            starts.append(bufs[2].address + lo)
            ends.append(bufs[2].address + hi)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        large = pa.types.is_large_list(t)
        (lo, hi), width = _offsets(bufs[1], absolute, large=large)
        _offset_bytes(bufs[1], absolute, width, starts, ends)
        _collect_child_ranges(arr.values, lo, hi, starts, ends)  # offsets index the unsliced child
    elif pa.types.is_fixed_size_list(t):
        size = t.list_size
        lo = absolute * size
        _collect_child_ranges(arr.values, lo, lo + size, starts, ends)
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            _collect(arr.field(i), rows, starts, ends)  # field() already applies the parent's offset
    else:
        _whole(arr, starts, ends)


def _collect_child_ranges(child: pa.Array, lo: np.ndarray, hi: np.ndarray, starts: list, ends: list) -> None:
    t = child.type
    if _fixed(t) and child.buffers()[0] is None:
        base = child.buffers()[1].address + child.offset * t.byte_width
        starts.append(base + lo * t.byte_width)
        ends.append(base + hi * t.byte_width)
        return
    counts = hi - lo
    if counts.sum() == 0:
        return
    rows = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())
    _collect(child, rows, starts, ends)


def _offsets(buf: pa.Buffer, absolute: np.ndarray, large: bool) -> tuple[tuple[np.ndarray, np.ndarray], int]:
    width = 8 if large else 4
    view = np.frombuffer(buf, np.int64 if large else np.int32)
    return (view[absolute].astype(np.int64), view[absolute + 1].astype(np.int64)), width


def _offset_bytes(buf: pa.Buffer, absolute: np.ndarray, width: int, starts: list, ends: list) -> None:
    starts.append(buf.address + absolute * width)
    ends.append(buf.address + (absolute + 2) * width)


def _add(starts: list, ends: list, begin: np.ndarray, size: int) -> None:
    starts.append(begin)
    ends.append(begin + size)


def _whole(arr: pa.Array, starts: list, ends: list) -> None:
    for buf in arr.buffers():
        if buf is not None and buf.size:
            starts.append(np.array([buf.address], np.int64))
            ends.append(np.array([buf.address + buf.size], np.int64))


def _var(t: pa.DataType) -> bool | None:
    """None if not string/binary; else whether its offsets are 64-bit."""
    return has_large_offsets(t) if is_var_binary(t) else None

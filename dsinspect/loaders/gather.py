"""Gather rows from several record batches into one, with numpy for the common column types.

Arrow's `take` pays a kernel call per (batch, column) and concatenates chunked inputs; a training
batch draws a few rows from many row groups, so for null-free numbers, binary/strings and lists
of numbers this module builds the output buffers directly with vectorised numpy gathers instead.
Anything else falls back to Arrow's take.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["gather"]


def gather(parts: Sequence[tuple[pa.RecordBatch, np.ndarray]], schema: pa.Schema) -> pa.RecordBatch:
    """The rows `rows` of each batch, concatenated in part order."""
    columns = []
    for i, field in enumerate(schema):
        arrays = [(rb.column(i), rows) for rb, rows in parts]
        columns.append(_gather_column(arrays, field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _gather_column(arrays: list[tuple[pa.Array, np.ndarray]], t: pa.DataType) -> pa.Array:
    if any(a.null_count for a, _ in arrays):
        return _fallback(arrays)
    if _fixed(t):
        return pa.Array.from_buffers(t, _count(arrays), [None, pa.py_buffer(_fixed_values(arrays, t.byte_width))])
    if _var(t) is not None:
        offsets, data = _ragged(arrays, None, large=_var(t))
        return pa.Array.from_buffers(t, _count(arrays), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _fixed(t.value_type) \
            and all(a.values.null_count == 0 for a, _ in arrays):
        offsets, data = _ragged(arrays, t.value_type.byte_width, large=pa.types.is_large_list(t))
        values = pa.Array.from_buffers(t.value_type, len(data) // t.value_type.byte_width, [None, pa.py_buffer(data)])
        return pa.Array.from_buffers(t, _count(arrays), [None, pa.py_buffer(offsets)], children=[values])
    return _fallback(arrays)


def _fixed(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
            or pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t))


def _var(t: pa.DataType) -> bool | None:
    """None if not string/binary; else whether its offsets are 64-bit."""
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return False
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return True
    return None


def _count(arrays: list[tuple[pa.Array, np.ndarray]]) -> int:
    return sum(len(rows) for _, rows in arrays)


def _fixed_values(arrays: list[tuple[pa.Array, np.ndarray]], width: int) -> bytes:
    out = []
    for a, rows in arrays:
        buf = np.frombuffer(a.buffers()[1], np.uint8)[a.offset * width:(a.offset + len(a)) * width]
        out.append(buf.reshape(len(a), width)[rows])
    return np.concatenate(out).tobytes() if len(out) > 1 else out[0].tobytes()


def _ragged(arrays: list[tuple[pa.Array, np.ndarray]], item_width: int | None, large: bool) -> tuple[bytes, bytes]:
    """Offsets and data of the selected rows of string/binary (item_width None) or list-of-fixed arrays."""
    lengths, chunks = [], []
    for a, rows in arrays:
        off_type = np.int64 if large else np.int32
        offsets = np.frombuffer(a.buffers()[1], off_type)[a.offset:a.offset + len(a) + 1].astype(np.int64)
        if item_width is None:
            data = np.frombuffer(a.buffers()[2] or b"", np.uint8)
            width = 1
        else:
            child = a.values
            width = item_width
            data = np.frombuffer(child.buffers()[1], np.uint8)[child.offset * width:(child.offset + len(child)) * width]
        starts, ends = offsets[rows], offsets[rows + 1]
        n = ends - starts
        lengths.append(n)
        chunks.append(_ranges(data, starts * width, n * width))
    all_lengths = np.concatenate(lengths)
    new_offsets = np.concatenate([[0], np.cumsum(all_lengths)]).astype(np.int64 if large else np.int32)
    return new_offsets.tobytes(), b"".join(chunks)


def _ranges(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> bytes:
    """The concatenation of data[start:start+size] for each range."""
    if len(sizes) and (sizes == sizes[0]).all():  # equal lengths (fixed-length token rows): 2-D gather
        size = int(sizes[0])
        if size == 0:
            return b""
        if (starts % size == 0).all() and len(data) % size == 0:
            return data.reshape(-1, size)[starts // size].tobytes()
    return b"".join(data[s:s + k].tobytes() for s, k in zip(starts.tolist(), sizes.tolist()))


def _fallback(arrays: list[tuple[pa.Array, np.ndarray]]) -> pa.Array:
    taken = [a.take(pa.array(rows)) for a, rows in arrays]
    return pa.concat_arrays(taken) if len(taken) > 1 else taken[0]

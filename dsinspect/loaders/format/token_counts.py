"""Documents' token counts from a `tokens` column: what a shard's manifest entry records and what
packing documents into sequences locates by. A null document holds no tokens.

`pyarrow.compute` is imported where it is used: ~100 ms that every `dsinspect` command (the writer
imports this module) would otherwise pay at start."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["document_lengths", "list_parts", "list_items", "hash_rows", "token_count"]


def document_lengths(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Tokens of each row (int64; 0 for a null row), from the list offsets and validity bits: no token
    is read, and no Arrow kernel or `to_numpy` runs (either imports pandas: ~0.7 s of a first call)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [list_parts(chunk)[1] for chunk in chunks]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def list_parts(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(where each row's items start in `column.values`, how many it holds: 0 for a null row), int64,
    zero-copy views of a list array's buffers but for the int64 conversion."""
    n, at = len(column), column.offset
    large = pa.types.is_large_list(column.type)
    if column.buffers()[1] is None:  # an empty array may come without an offsets buffer
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    offsets = np.frombuffer(column.buffers()[1], np.int64 if large else np.int32)[at:at + n + 1].astype(np.int64)
    sizes = np.diff(offsets)
    if column.null_count:  # a null row's offsets may span items: it holds none
        bits = np.unpackbits(np.frombuffer(column.buffers()[0], np.uint8), bitorder="little")[at:at + n]
        sizes[bits == 0] = 0
    return offsets[:-1], sizes


def list_items(column: pa.Array) -> np.ndarray:
    """The items of a list array of numbers, as a zero-copy numpy view (indexed by `list_parts`' starts)."""
    child = column.values
    dtype = np.dtype(child.type.to_pandas_dtype())  # a numpy type: no pandas import
    if child.buffers()[1] is None:
        return np.zeros(0, dtype)
    return np.frombuffer(child.buffers()[1], dtype)[child.offset:child.offset + len(child)]


def hash_rows(column: pa.Array) -> np.ndarray:
    """A binary(16) array (the stored row hashes) as an (n, 16) uint8 zero-copy view."""
    raw = np.frombuffer(column.buffers()[1], np.uint8)
    return raw[column.offset * 16:(column.offset + len(column)) * 16].reshape(-1, 16)


def token_count(column: pa.Array | pa.ChunkedArray) -> int:
    """Tokens in the whole column."""
    import pyarrow.compute as pc

    total = pc.sum(pc.list_value_length(column)).as_py()
    return int(total or 0)

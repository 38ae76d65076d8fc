"""NumPy arrays (MDS `ndarray` columns, WebDataset `.npy` members) as Arrow values, bit for bit.

A column's layout is decided once, before any part converts, from the dtype and number of
dimensions of every value in the source (`layout_of`; the plan pins it in the source spec, so every
worker writes one type whatever part it sees first):

- every value one dtype and number of dimensions: N nested lists in C order (`a[i][j]` is
  `value[i][j]`), so dtype and shape survive: the dtype is the innermost Arrow type, the shape the
  list lengths (sizes may vary); a 0-D array is a plain scalar. Arrays with a zero-length axis keep
  their values (none) but not the sizes of the later axes.
- values that differ in dtype or number of dimensions (`NPY`): binary, one `.npy` file per value
  (`dsinspect.loaders.format.npy`), which keeps each row's dtype and shape; the array view decodes it.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.npy import DTYPES, native, read_npy

__all__ = ["DTYPES", "native", "read_npy", "list_type", "fixed_type", "layout", "to_arrow", "check_like",
           "NPY", "layout_of", "layout_type", "check_layouts"]

NPY = "npy"  # the layout of a column whose values differ in dtype or number of dimensions
_MAX_OFFSET = (1 << 31) - 1  # list offsets are int32


def layout_of(seen: Iterable[tuple[str, int]]) -> str:
    """A column's layout from the (dtype name, number of dimensions) of its values: "DTYPE:NDIM"
    (nested lists) when they all agree, else `NPY`."""
    kinds = set(seen)
    if len(kinds) != 1:
        return NPY
    dtype, ndim = kinds.pop()
    return f"{dtype}:{ndim}"


def layout_type(layout: str, where: str) -> pa.DataType:
    """The Arrow type a layout stores: binary for `NPY`, else nested lists of the dtype."""
    if layout == NPY:
        return pa.binary()
    dtype, _, ndim = str(layout).partition(":")
    try:
        d = np.dtype(dtype)
        if d not in DTYPES or not ndim.isdigit():
            raise TypeError
    except TypeError:
        raise UserError(f"{where}: array layout {layout!r} is neither {NPY!r} nor DTYPE:NDIM") from None
    return list_type(d, int(ndim))


def check_layouts(layouts: Mapping[str, str], columns: Iterable[str], where: str) -> dict[str, str]:
    """`layouts` (the spec option `arrays`) when it names a layout for each of `columns`."""
    if not isinstance(layouts, Mapping):
        raise UserError(f"{where}: the option 'arrays' must map columns to layouts")
    for c in columns:
        if c not in layouts:
            raise UserError(f"{where}: the option 'arrays' names no layout for the array column {c!r}")
        layout_type(layouts[c], where)
    return dict(layouts)


def list_type(dtype: np.dtype, ndim: int) -> pa.DataType:
    """The Arrow type of `ndim`-D arrays of `dtype` whose sizes may vary: `ndim` nested lists."""
    t = pa.from_numpy_dtype(dtype)
    for _ in range(ndim):
        t = pa.list_(t)
    return t


def fixed_type(dtype: np.dtype, shape: tuple[int, ...]) -> pa.DataType:
    """The Arrow type of arrays of one fixed `shape`: nested fixed-size lists."""
    t = pa.from_numpy_dtype(dtype)
    for size in reversed(shape):
        t = pa.list_(t, size)
    return t


def layout(t: pa.DataType) -> tuple[np.dtype, int]:
    """(dtype, number of dimensions) of the arrays a `list_type` / `fixed_type` column holds."""
    depth, leaf = _depth(t)
    return np.dtype(leaf.to_pandas_dtype()), depth


def check_like(array: np.ndarray, dtype: np.dtype, ndim: int, where: str) -> None:
    """A UserError naming `where` unless `array` has the column's dtype and number of dimensions."""
    if array.dtype.newbyteorder("=") != dtype or array.ndim != ndim:
        raise UserError(f"{where}: holds a {array.ndim}-D {array.dtype} array, but the column holds "
                        f"{ndim}-D {dtype} arrays (the first value's)")


def to_arrow(arrays: list[np.ndarray], t: pa.DataType) -> pa.Array:
    """`arrays` (all of `t`'s dtype and depth, checked by the caller) as one Arrow array of type `t`."""
    depth, leaf = _depth(t)
    dtype = np.dtype(leaf.to_pandas_dtype())
    flat = np.concatenate([np.ascontiguousarray(a, dtype).reshape(-1) for a in arrays]) if arrays else \
        np.empty(0, dtype)
    if depth == 0:
        return pa.array(flat, leaf)
    result = pa.array(flat, leaf)
    if pa.types.is_fixed_size_list(t):
        for size in reversed(_fixed_shape(t)):
            result = pa.FixedSizeListArray.from_arrays(result, size)
        return result
    for axis in reversed(range(depth)):  # innermost lists first: each array has prod(shape[:axis]) of them
        lengths = np.concatenate([np.full(int(np.prod(a.shape[:axis])), a.shape[axis], np.int64) for a in arrays]) \
            if arrays else np.empty(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        if offsets[-1] > _MAX_OFFSET:
            raise UserError(f"arrays of {offsets[-1]:,} values in one batch exceed Arrow's list offsets")
        result = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), result)
    return result


def _depth(t: pa.DataType) -> tuple[int, pa.DataType]:
    depth = 0
    while pa.types.is_list(t) or pa.types.is_fixed_size_list(t):
        t, depth = t.value_type, depth + 1
    return depth, t


def _fixed_shape(t: pa.DataType) -> list[int]:
    shape = []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    return shape

"""NumPy arrays (MDS `ndarray` columns, WebDataset `.npy` members) as Arrow values, bit for bit.

An N-D array becomes N nested lists in C order (`a[i][j]` is `value[i][j]`), so its dtype and shape
survive: the dtype is the innermost Arrow type, the shape the list lengths. A column's arrays must
share dtype and number of dimensions (their sizes may vary); a 0-D array is a plain scalar. Arrays
with a zero-length axis keep their values (none) but not the sizes of the later axes.
"""

from __future__ import annotations

import io
import math
import tokenize
import warnings

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError

__all__ = ["DTYPES", "native", "read_npy", "list_type", "fixed_type", "layout", "to_arrow", "check_like"]

# Number and bool dtypes, the ones every Arrow list of numbers (role array) can hold exactly.
DTYPES = frozenset(np.dtype(n) for n in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                         "uint32", "uint64", "float16", "float32", "float64"))
_MAX_OFFSET = (1 << 31) - 1  # list offsets are int32


def native(dtype: np.dtype, where: str) -> np.dtype:
    """`dtype` in this machine's byte order, or a UserError naming `where` for a dtype no role holds."""
    d = dtype.newbyteorder("=")
    if d not in DTYPES:
        raise UserError(f"{where}: arrays of dtype {dtype} cannot be ingested (only bool, integer and float "
                        "numbers)")
    return d


def read_npy(data: bytes, where: str) -> np.ndarray:
    """A `.npy` file's array, in native byte order. Only the header is parsed (numpy's own reader,
    format 1.0 or 2.0); the values must fill the rest exactly, so a hostile header can neither
    allocate more than the file holds nor reach pickle (object arrays are refused by dtype)."""
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version[0]}.{version[1]} is not supported (1.0 and 2.0 are)")
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        with warnings.catch_warnings():  # numpy warns about headers it repairs; the verdict is ours
            warnings.simplefilter("ignore")
            shape, fortran, dtype = read(f)
    except (ValueError, TypeError, SyntaxError, EOFError, tokenize.TokenError) as e:
        raise UserError(f"{where} is not a .npy array ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    native(dtype, where)
    values = data[f.tell():]
    if len(values) != math.prod(shape) * dtype.itemsize:
        raise UserError(f"{where}: a .npy array of shape {shape} and dtype {dtype} needs "
                        f"{math.prod(shape) * dtype.itemsize} bytes of values, the file holds {len(values)}")
    flat = np.frombuffer(values, dtype)
    try:
        a = flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)
    except ValueError as e:  # an empty axis beside an absurd one
        raise UserError(f"{where}: a .npy array of shape {shape}: {e}") from None
    return a.astype(dtype.newbyteorder("="), copy=False)


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

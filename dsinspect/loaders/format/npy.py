""".npy files: the self-describing encoding of an `array` field whose values differ in dtype or
number of dimensions from row to row (docs/FORMAT.md, "Arrays").

Read without pickle: only the header is parsed (numpy's own header reader, format 1.0 or 2.0), the
dtype must be a number or bool, and the values must fill the rest of the file exactly, so a hostile
header can neither allocate more than the file holds nor reach pickle. `to_npy` writes the one
canonical form dsinspect itself produces (format 1.0, little-endian, C order, header padded to 64
bytes), byte for byte the same on every machine and numpy version.
"""

from __future__ import annotations

import functools
import io
import math
import tokenize
import warnings
from typing import NamedTuple

import numpy as np

from dsinspect.errors import UserError

__all__ = ["DTYPES", "MAGIC", "NpyHeader", "native", "npy_header", "read_npy", "to_npy", "HEADER_BYTES"]

MAGIC = b"\x93NUMPY"
# Number and bool dtypes, the ones every Arrow list of numbers (role array) can hold exactly.
DTYPES = frozenset(np.dtype(n) for n in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                         "uint32", "uint64", "float16", "float32", "float64"))
HEADER_BYTES = 16 << 10  # a prefix this long holds any header numpy reads (it refuses headers over 10,000 bytes)
_ALIGN = 64


class NpyHeader(NamedTuple):
    dtype: np.dtype  # as the file stores it (byte order included)
    shape: tuple[int, ...]
    fortran: bool
    offset: int  # where the values start


def native(dtype: np.dtype, where: str) -> np.dtype:
    """`dtype` in this machine's byte order, or a UserError naming `where` for a dtype no role holds."""
    d = dtype.newbyteorder("=")
    if d not in DTYPES:
        raise UserError(f"{where}: arrays of dtype {dtype} cannot be ingested (only bool, integer and float "
                        "numbers)")
    return d


def npy_header(prefix: bytes, size: int, where: str) -> NpyHeader:
    """The header of a .npy file of `size` bytes from its first bytes (`HEADER_BYTES` suffice); a
    UserError naming `where` unless it is a .npy file of numbers whose values fill it exactly."""
    try:
        dtype, shape, fortran, offset = _parsed(_header_bytes(prefix))
    except (ValueError, TypeError, SyntaxError, EOFError, tokenize.TokenError) as e:
        raise UserError(f"{where} is not a .npy array ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    native(dtype, where)
    count = math.prod(shape)  # Python ints: a hostile shape cannot overflow
    if size - offset != count * dtype.itemsize:
        raise UserError(f"{where}: a .npy array of shape {shape} and dtype {dtype} needs "
                        f"{count * dtype.itemsize} bytes of values, the file holds {size - offset}")
    if count == 0:
        try:  # no values, so no allocation: only whether numpy can hold such a shape at all
            np.empty(0, dtype).reshape(shape)
        except ValueError as e:
            raise UserError(f"{where}: a .npy array of shape {shape}: {e}") from None
    return NpyHeader(dtype, shape, fortran, offset)


def _header_bytes(prefix: bytes) -> bytes:
    """Magic, version, length and header of a .npy file: what `_parsed` reads (the rest is values)."""
    width = 4 if prefix[6:8] == b"\x02\x00" else 2
    if len(prefix) < 8 + width:
        return prefix  # too short: numpy's reader says why
    return prefix[:8 + width + int.from_bytes(prefix[8:8 + width], "little")]


@functools.lru_cache(maxsize=1024)  # one file's columns repeat a few headers: parsing one costs ~0.1 ms
def _parsed(header: bytes) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    f = io.BytesIO(header)
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"format version {version[0]}.{version[1]} is not supported (1.0 and 2.0 are)")
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    with warnings.catch_warnings():  # numpy warns about headers it repairs; the verdict is ours
        warnings.simplefilter("ignore")
        shape, fortran, dtype = read(f)
    return dtype, tuple(int(n) for n in shape), bool(fortran), f.tell()


def read_npy(data: bytes, where: str) -> np.ndarray:
    """A .npy file's array, in this machine's byte order (see `npy_header`)."""
    header = npy_header(data[:HEADER_BYTES], len(data), where)
    flat = np.frombuffer(data, header.dtype, offset=header.offset)
    shape = header.shape
    a = flat.reshape(shape[::-1]).transpose() if header.fortran else flat.reshape(shape)
    return a.astype(header.dtype.newbyteorder("="), copy=False)


def to_npy(array: np.ndarray) -> bytes:
    """`array` as dsinspect's canonical .npy bytes: format 1.0, `{'descr': <little-endian dtype>,
    'fortran_order': False, 'shape': <tuple>, }`, spaces and a newline up to a multiple of 64 bytes,
    then the values in C order, little-endian. numpy's `np.load` reads it."""
    dtype = native(array.dtype, "to_npy").newbyteorder("<")
    text = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (dtype.str, tuple(int(n) for n in array.shape))
    pad = -(len(MAGIC) + 4 + len(text) + 1) % _ALIGN
    header = (text + " " * pad + "\n").encode("latin1")
    values = np.ascontiguousarray(array, dtype).tobytes()
    return MAGIC + b"\x01\x00" + len(header).to_bytes(2, "little") + header + values

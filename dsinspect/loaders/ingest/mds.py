"""MosaicML Streaming (MDS) directories: `index.json` plus shard files, decoded without the package.

Shard layout (MDS format, version 2): u32 sample count n, then n + 1 u32 offsets from the start of
the file, then the writer's config JSON, then the samples; a sample is one u32 size per variable-size
column (in column order), then every column's bytes in column order. Column encodings map to Arrow as:
`str`, `json`, `str_decimal` → string (the stored text); `bytes`, `jpeg`, `png` → binary (the stored bytes);
`int` → int64; `int8`…`uint64`, `float16`…`float64` → themselves; `str_int` → int64; `str_float` →
float64; `ndarray:DTYPE:SHAPE` → nested fixed-size lists; `ndarray:DTYPE` and plain `ndarray` (whose
values carry their shape, and dtype, see `_decode_ndarray`) in the layout `array_layouts` decides from
every value's header: nested lists of their dtype, or `.npy` bytes where dtypes or dimensions differ
(see `ndarrays`). `pkl` columns are refused (reading them would run pickle); `pil` and list encodings
are refused too. Shards compressed with zstd are decompressed as a stream; other compressions are refused.
"""

from __future__ import annotations

import io
import json
import math
import struct
from functools import cached_property
from typing import Any, Collection, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.npy import to_npy
from dsinspect.loaders.format.pathnames import check_relative
from dsinspect.loaders.ingest.infer import ndarray_role
from dsinspect.loaders.ingest.ndarrays import (
    NPY,
    check_layouts,
    check_like,
    fixed_type,
    layout,
    layout_of,
    layout_type,
    to_arrow,
)
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, open_file, read_bytes
from dsinspect.loaders.store.storage import join, url_to_fs

__all__ = ["MdsSource", "column_type"]

_NUMPY = {n: np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                   "float16", "float32", "float64")}
_NUMPY["int"] = np.dtype("int64")
_STRINGS = {"str": pa.string(), "json": pa.string(), "str_decimal": pa.string(),
            "bytes": pa.binary(), "jpeg": pa.binary(), "png": pa.binary(),
            "str_int": pa.int64(), "str_float": pa.float64()}
_ROLES = {"jpeg": "image", "png": "image", "json": "json"}
_U32 = struct.Struct("<I")


# The value dtypes of MDS `ndarray` columns, by the code a dynamic-dtype value starts with.
_ARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32", 33: "int32",
                 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}
_SHAPE_DTYPES = ("<u1", "<u2", "<u4", "<u8")  # by the low two bits of a dynamic shape's header byte


def column_type(name: str, encoding: str, where: str) -> pa.DataType | None:
    """The Arrow type of an MDS column, or None for an ndarray whose values carry their dtype or
    shape (their first value decides); refused encodings are a UserError naming column and file."""
    if encoding == "pkl":
        raise UserError(f"{where}: column {name!r} uses the 'pkl' encoding (a Python pickle); dsinspect never "
                        "unpickles data — rewrite that column with another encoding")
    if encoding in _NUMPY:
        return pa.from_numpy_dtype(_NUMPY[encoding])
    if encoding in _STRINGS:
        return _STRINGS[encoding]
    array = _ndarray(encoding)
    if array is not None:
        dtype, shape = array
        return fixed_type(dtype, shape) if dtype is not None and shape is not None else None
    raise UserError(f"{where}: column {name!r} uses the MDS encoding {encoding!r}, which dsinspect cannot ingest")


def _ndarray(encoding: str) -> tuple[np.dtype | None, tuple[int, ...] | None] | None:
    """(dtype, shape) of an `ndarray[:DTYPE[:SHAPE]]` encoding (None where the values carry them),
    or None for any other encoding (as the package's `NDArray.from_str` parses it)."""
    args = encoding.split(":")
    if args[0] != "ndarray" or len(args) > 3:
        return None
    if len(args) == 1:
        return None, None
    if args[1] not in _ARRAY_DTYPES.values():
        return None
    try:
        shape = tuple(int(x) for x in args[2].split(",")) if len(args) == 3 else None
    except ValueError:
        return None
    if shape is not None and min(shape) < 1:
        return None
    return np.dtype(args[1]), shape


def _ndarray_header(data: bytes, dtype: np.dtype | None, shape: tuple[int, ...] | None,
                    where: str) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, where the values start) of one `ndarray` value, read as the package's
    `NDArray.decode` reads it: [dtype code: 1, unless the encoding names it] [ndim << 2 | shape width:
    1, shape: ndim × width, unless the encoding names the shape] [values, C order, little-endian];
    a UserError unless the values fill the rest exactly."""
    pos = 0
    try:
        if dtype is None:
            dtype, pos = np.dtype(_ARRAY_DTYPES[data[0]]), 1
        if shape is None:
            ndim, width = data[pos] >> 2, data[pos] & 3
            shape = tuple(np.frombuffer(data, _SHAPE_DTYPES[width], ndim, pos + 1).tolist())
            pos += 1 + ndim * (1 << width)
    except (IndexError, KeyError, ValueError):
        raise UserError(f"{where}: not an MDS ndarray value (bad dtype or shape header)") from None
    if min(shape, default=1) < 1:  # the writer refuses empty axes; one here is damage (and a size-0 bomb)
        raise UserError(f"{where}: an MDS ndarray of shape {shape} (every axis holds at least one value)")
    if len(data) - pos != math.prod(shape) * dtype.itemsize:  # Python ints: a hostile shape cannot overflow
        raise UserError(f"{where}: an MDS ndarray of shape {shape} and dtype {dtype} needs "
                        f"{math.prod(shape) * dtype.itemsize} bytes of values, the sample holds {len(data) - pos}")
    return dtype, shape, pos


def _decode_ndarray(data: bytes, dtype: np.dtype | None, shape: tuple[int, ...] | None, where: str) -> np.ndarray:
    """One `ndarray` value (see `_ndarray_header`)."""
    dtype, shape, pos = _ndarray_header(data, dtype, shape, where)
    return np.frombuffer(data, dtype.newbyteorder("<"), offset=pos).astype(dtype).reshape(shape)


class MdsSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec

    @cached_property
    def _index_url(self) -> str:
        fs, path = url_to_fs(self.spec.url)
        if path.endswith("index.json"):
            return fs.unstrip_protocol(path)
        return join(fs.unstrip_protocol(path), "index.json")

    @cached_property
    def _shards(self) -> list[dict]:
        try:
            index = json.loads(read_bytes(self._index_url))
            shards = index["shards"]
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{self._index_url}: not an MDS index ({e})") from None
        if not shards:
            raise UserError(f"{self._index_url}: lists no shards")
        for s in shards:
            if s.get("format") != "mds":
                raise UserError(f"{self._index_url}: shard format {s.get('format')!r} is not 'mds'")
            if (s["column_names"], s["column_encodings"]) != (shards[0]["column_names"], shards[0]["column_encodings"]):
                raise UserError(f"{self._index_url}: shards disagree on columns")
        return shards

    def _shard_url(self, shard: dict) -> str:
        data = shard["zip_data"] if shard.get("compression") else shard["raw_data"]
        basename = check_relative(data["basename"], f"shard basename in {self._index_url}")  # stays beside the index
        return join(self._index_url.rsplit("/", 1)[0], basename)

    def parts(self) -> list[Part]:
        return [Part(i, self._shard_url(s), int((s["zip_data"] if s.get("compression") else s["raw_data"])["bytes"]),
                     {"compression": s.get("compression")})
                for i, s in enumerate(self._shards)]

    @cached_property
    def _columns(self) -> list[tuple[str, str]]:
        first = self._shards[0]
        return list(zip(first["column_names"], first["column_encodings"]))

    @cached_property
    def _schema(self) -> pa.Schema:
        types = {n: column_type(n, e, self._index_url) for n, e in self._columns}  # `pkl` refused first
        return pa.schema([pa.field(n, layout_type(self._arrays[n], self._index_url) if n in self._arrays else t)
                          for n, t in types.items()])

    @cached_property
    def _arrays(self) -> dict[str, str]:
        """Layouts of the ndarray columns not fixed by their encoding: pinned in the spec by the plan
        (workers never survey), else surveyed now."""
        pinned = self.spec.options.get("arrays")
        if pinned is None:
            return self.array_layouts(self.parts())
        return check_layouts(pinned, [n for n, e in self._columns if _varies(e)], self._index_url)

    def array_columns(self) -> list[str]:
        """The `ndarray` columns (any of them may be kept as `.npy` bytes: `array_layouts`' `raw`)."""
        return [n for n, e in self._columns if _ndarray(e) is not None]

    def array_layouts(self, parts: list[Part], raw: Collection[str] = ()) -> dict[str, str]:
        """The layout of each `ndarray` column whose encoding leaves dtype or shape to the values, over
        every value of `parts` (headers only, each checked against its length, so a damaged value is
        refused before any part converts), and `NPY` for the `raw` columns."""
        for n, e in self._columns:
            column_type(n, e, self._index_url)  # a refused encoding (`pkl`) stops the plan before any reading
        survey = {c: (n, set()) for c, (n, e) in enumerate(self._columns) if _varies(e) and n not in raw}
        for part in parts if survey else ():
            sizes = self._shards[part.index]["column_sizes"]
            for i, sample in enumerate(_samples(part.url, part.options.get("compression"))):
                pieces = _split(sample, sizes, part.url)
                for c, (n, seen) in survey.items():
                    dtype, shape, _ = _ndarray_header(pieces[c], *_ndarray(self._columns[c][1]),
                                                      f"{part.url}: column {n!r} sample {i}")
                    seen.add((dtype.name, len(shape)))
        return {**{n: NPY for n in self.array_columns() if n in raw},
                **{n: layout_of(seen) for n, seen in survey.values()}}

    def schema(self) -> pa.Schema:
        return self._schema

    def hints(self) -> Mapping[str, Any]:
        first = self._shards[0]
        encodings = dict(zip(first["column_names"], first["column_encodings"]))
        roles = {n: _ROLES[e] for n, e in encodings.items() if e in _ROLES}
        roles.update({f.name: ndarray_role(f.name, f.type).value for f in self._schema
                      if _ndarray(encodings[f.name]) is not None})
        return {"roles": roles, "mds_encodings": encodings}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        shard = self._shards[part.index]
        encodings, sizes = shard["column_encodings"], shard["column_sizes"]
        pending: list[list[bytes]] = []
        size = first = 0
        for sample in _samples(part.url, part.options.get("compression")):
            pending.append(_split(sample, sizes, part.url))
            size += len(sample)
            if len(pending) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield self._batch(pending, encodings, part.url, first)
                pending, size, first = [], 0, first + len(pending)
        if pending:
            yield self._batch(pending, encodings, part.url, first)

    def _batch(self, rows: list[list[bytes]], encodings: list[str], url: str, first: int) -> pa.RecordBatch:
        columns = [_decode_column([r[c] for r in rows], enc, f, f"{url}: column {f.name!r}", first)
                   for c, (enc, f) in enumerate(zip(encodings, self._schema))]
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def _samples(url: str, compression: str | None) -> Iterator[bytes]:
    """Each sample's bytes, in shard order."""
    with open_file(url) as f:
        if compression:
            f = _decompressed(f, compression, url)
        head = f.read(4)
        if len(head) < 4:
            raise UserError(f"{url}: truncated MDS shard")
        n = _U32.unpack(head)[0]
        offsets = np.frombuffer(f.read(4 * (n + 1)), "<u4")
        if len(offsets) != n + 1 or offsets[0] < 4 * (n + 2):
            raise UserError(f"{url}: not an MDS shard (bad offsets table)")
        f.read(int(offsets[0]) - 4 * (n + 2))  # the writer's config JSON sits before the samples
        for start, stop in zip(offsets[:-1], offsets[1:]):
            data = f.read(int(stop - start))
            if len(data) != stop - start:
                raise UserError(f"{url}: truncated MDS shard")
            yield data


def _decompressed(f, compression: str, url: str):
    """`f` decompressed as a stream: reading the first sample does not inflate the whole shard."""
    if compression.split(":")[0] != "zstd":
        raise UserError(f"{url}: MDS compression {compression!r} is not supported (only zstd)")
    import zstandard

    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(f))


def _split(sample: bytes, sizes: list[int | None], url: str) -> list[bytes]:
    """A sample's bytes cut into one piece per column."""
    variable = sum(s is None for s in sizes)
    lengths = iter(np.frombuffer(sample[:4 * variable], "<u4").tolist())
    pos, pieces = 4 * variable, []
    for s in sizes:
        n = next(lengths) if s is None else s
        pieces.append(sample[pos:pos + n])
        pos += n
    if pos != len(sample):
        raise UserError(f"{url}: an MDS sample's column sizes do not add up to its length")
    return pieces


def _decode_column(values: list[bytes], encoding: str, f: pa.Field, where: str, first: int) -> pa.Array:
    if encoding in _NUMPY:  # fixed width: the bytes are the numbers, bit for bit
        return pa.array(np.frombuffer(b"".join(values), _NUMPY[encoding].newbyteorder("<")).astype(_NUMPY[encoding]))
    try:
        if encoding in ("bytes", "jpeg", "png"):
            return pa.array(values, pa.binary())
        if encoding in ("str", "json", "str_decimal"):
            return pa.array([v.decode("utf-8") for v in values], pa.string())
        if encoding == "str_int":
            return pa.array([int(v.decode()) for v in values], pa.int64())
        if encoding == "str_float":
            return pa.array([float(v.decode()) for v in values], pa.float64())
    except ValueError as e:
        raise UserError(f"{where} ({encoding}): {e}") from None
    return _ndarray_column(values, encoding, f.type, where, first)


def _ndarray_column(values: list[bytes], encoding: str, t: pa.DataType, where: str, first: int) -> pa.Array:
    dtype, shape = _ndarray(encoding)
    if pa.types.is_binary(t):  # each value as dsinspect's .npy bytes: its own dtype and shape
        return pa.array([to_npy(_decode_ndarray(v, dtype, shape, f"{where} sample {first + i}"))
                         for i, v in enumerate(values)], pa.binary())
    if dtype is not None and shape is not None:  # static: values only, one flat buffer
        return to_arrow([np.frombuffer(b"".join(values), dtype.newbyteorder("<")).astype(dtype)], t)
    column_dtype, ndim = layout(t)
    arrays = []
    for i, v in enumerate(values):
        at = f"{where} sample {first + i}"
        arrays.append(_decode_ndarray(v, dtype, shape, at))
        check_like(arrays[-1], column_dtype, ndim, at)
    return to_arrow(arrays, t)


def _varies(encoding: str) -> bool:
    """An `ndarray` encoding that leaves the dtype or the shape to each value."""
    array = _ndarray(encoding)
    return array is not None and (array[0] is None or array[1] is None)

"""MosaicML Streaming (MDS) directories: `index.json` plus shard files, decoded without the package.

Shard layout (MDS format, version 2): u32 sample count n, then n + 1 u32 offsets from the start of
the file, then the writer's config JSON, then the samples; a sample is one u32 size per variable-size column (in column order),
then every column's bytes in column order. Column encodings map to Arrow as: `str`, `json`,
`str_decimal` → string (the stored text); `bytes`, `jpeg`, `png` → binary (the stored bytes);
`int` → int64; `int8`…`uint64`, `float16`…`float64` → themselves; `str_int` → int64; `str_float` →
float64; `ndarray:DTYPE` → list of DTYPE (1-D arrays), `ndarray:DTYPE:SHAPE` → nested fixed-size
lists. `pkl` columns are refused (reading them would run pickle); `pil`, list and dynamic-dtype
ndarray encodings are refused too. Shards compressed with zstd are decompressed whole (MDS shards
are bounded, 64 MB by default); other compressions are refused.
"""

from __future__ import annotations

import io
import json
import struct
from functools import cached_property
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import BATCH_BYTES, BATCH_ROWS, open_file, read_bytes
from dsinspect.loaders.storage import join, url_to_fs

__all__ = ["MdsSource", "column_type"]

_NUMPY = {n: np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                   "float16", "float32", "float64")}
_NUMPY["int"] = np.dtype("int64")
_STRINGS = {"str": pa.string(), "json": pa.string(), "str_decimal": pa.string(),
            "bytes": pa.binary(), "jpeg": pa.binary(), "png": pa.binary(),
            "str_int": pa.int64(), "str_float": pa.float64()}
_ROLES = {"jpeg": "image", "png": "image", "json": "json"}
_U32 = struct.Struct("<I")


def _arrow(dtype: np.dtype) -> pa.DataType:
    return pa.from_numpy_dtype(dtype)


def column_type(name: str, encoding: str, where: str) -> pa.DataType:
    """The Arrow type of an MDS column; refused encodings are a UserError naming column and file."""
    if encoding == "pkl":
        raise UserError(f"{where}: column {name!r} uses the 'pkl' encoding (a Python pickle); dsinspect never "
                        "unpickles data — rewrite that column with another encoding")
    if encoding in _NUMPY:
        return _arrow(_NUMPY[encoding])
    if encoding in _STRINGS:
        return _STRINGS[encoding]
    dtype, shape = _ndarray(encoding)
    if dtype is not None:
        t = _arrow(dtype)
        if shape is None:
            return pa.list_(t)
        for size in reversed(shape):
            t = pa.list_(t, size)
        return t
    raise UserError(f"{where}: column {name!r} uses the MDS encoding {encoding!r}, which dsinspect cannot ingest")


def _ndarray(encoding: str) -> tuple[np.dtype | None, tuple[int, ...] | None]:
    args = encoding.split(":")
    if args[0] != "ndarray" or len(args) < 2 or args[1] not in _NUMPY or len(args) > 3:
        return None, None
    shape = tuple(int(x) for x in args[2].split(",")) if len(args) == 3 else None
    return _NUMPY[args[1]], shape


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
        return join(self._index_url.rsplit("/", 1)[0], data["basename"])

    def parts(self) -> list[Part]:
        return [Part(i, self._shard_url(s), int((s["zip_data"] if s.get("compression") else s["raw_data"])["bytes"]),
                     {"compression": s.get("compression")})
                for i, s in enumerate(self._shards)]

    @cached_property
    def _schema(self) -> pa.Schema:
        first = self._shards[0]
        return pa.schema([pa.field(n, column_type(n, e, self._index_url))
                          for n, e in zip(first["column_names"], first["column_encodings"])])

    def schema(self) -> pa.Schema:
        return self._schema

    def hints(self) -> Mapping[str, Any]:
        first = self._shards[0]
        return {"roles": {n: _ROLES[e] for n, e in zip(first["column_names"], first["column_encodings"]) if e in _ROLES},
                "mds_encodings": dict(zip(first["column_names"], first["column_encodings"]))}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        shard = self._shards[part.index]
        encodings, sizes = shard["column_encodings"], shard["column_sizes"]
        pending: list[list[bytes]] = []
        size = 0
        for sample in _samples(part.url, part.options.get("compression")):
            pending.append(_split(sample, sizes, part.url))
            size += len(sample)
            if len(pending) >= BATCH_ROWS or size >= BATCH_BYTES:
                yield self._batch(pending, encodings, part.url)
                pending, size = [], 0
        if pending:
            yield self._batch(pending, encodings, part.url)

    def _batch(self, rows: list[list[bytes]], encodings: list[str], url: str) -> pa.RecordBatch:
        columns = [_decode_column([r[c] for r in rows], enc, f.type, f.name, url)
                   for c, (enc, f) in enumerate(zip(encodings, self._schema))]
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def _samples(url: str, compression: str | None) -> Iterator[bytes]:
    """Each sample's bytes, in shard order."""
    with open_file(url) as f:
        if compression:
            f = io.BytesIO(_decompress(f.read(), compression, url))
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


def _decompress(data: bytes, compression: str, url: str) -> bytes:
    if compression.split(":")[0] != "zstd":
        raise UserError(f"{url}: MDS compression {compression!r} is not supported (only zstd)")
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


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


def _decode_column(values: list[bytes], encoding: str, t: pa.DataType, name: str, url: str) -> pa.Array:
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
        raise UserError(f"{url}: column {name!r} ({encoding}): {e}") from None
    return _ndarray_column(values, encoding, t)


def _ndarray_column(values: list[bytes], encoding: str, t: pa.DataType) -> pa.Array:
    dtype, shape = _ndarray(encoding)
    if shape is not None:  # static shape: values only, one flat buffer
        flat = pa.array(np.frombuffer(b"".join(values), dtype.newbyteorder("<")).astype(dtype))
        for size in reversed(shape):
            flat = pa.FixedSizeListArray.from_arrays(flat, size)
        return flat
    arrays = []  # dynamic shape: a header byte (ndim << 2 | shape width code), the shape, the values
    for v in values:
        ndim, code = v[0] >> 2, v[0] & 3
        start = 1 + ndim * (1 << code)
        arrays.append(np.frombuffer(v[start:], dtype.newbyteorder("<")).astype(dtype))
        if ndim != 1:
            raise UserError(f"column of encoding {encoding!r} holds a {ndim}-D array; only 1-D arrays "
                            "of varying length can be ingested")
    offsets = np.cumsum([0] + [len(a) for a in arrays], dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(arrays) if arrays else
                                                                 np.array([], dtype)))

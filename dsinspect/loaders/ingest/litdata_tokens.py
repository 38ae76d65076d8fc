"""LitData's `optimize(..., item_loader=TokensLoader())` output, read without the package: one row per
item the optimize function returned or yielded (LitGPT's prepare scripts yield a document at a time).

`index.json`: `{"chunks": [{"filename", "chunk_size": items, "dim": tokens, "chunk_bytes"}, ...],
"config": {"item_loader": "TokensLoader", "data_format": ["no_header_tensor:K" or
"no_header_numpy:K"], "compression": null, "encryption": null, ...}}`, K indexing LitData's torch or
numpy dtype table (litdata/constants.py). A chunk file (litdata/streaming/writer.py, `_create_chunk`):
u32 N, the item count; N + 1 u32 byte offsets from the file's start, the first where this header
ends (4 (N + 2)), the last at the file's end; then the items' tokens end to end, little-endian, and
nothing else. LitData's TokensLoader skips that header and reads `block_size` windows straight across
items (a chunk's last dim % block_size tokens are never read): its reader never uses the item bounds,
but the offsets table keeps them, so a row here is one item as written. Compressed or encrypted
chunks are refused (their offsets count bytes of the inflated file, which cannot be read by range).
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.pathnames import check_relative
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.ingest.source import Part, SourceSpec
from dsinspect.loaders.ingest.source_files import list_files, open_file, read_bytes
from dsinspect.loaders.ingest.token_streams import (
    TOKEN_TYPES,
    check_declared,
    check_offsets,
    document_batches,
    document_schema,
)
from dsinspect.loaders.store.storage import join, url_to_fs

__all__ = ["LitDataTokensSource"]

# litdata.constants: _TORCH_DTYPES_MAPPING and _NUMPY_DTYPES_MAPPING, by index (what K names)
_TORCH = ["float32", "float32", "float64", "float64", "complex64", "complex64", "complex128", "complex128",
          "float16", "float16", "bfloat16", "uint8", "int8", "int16", "int16", "int32", "int32", "int64", "int64",
          "bool", "uint16"]
_NUMPY = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64",
          "complex64", "complex128", "bool", "object", "bytes", "str", "void"]
_SERIALIZERS = {"no_header_tensor": _TORCH, "no_header_numpy": _NUMPY}


def _token_type(data_format: Any, where: str) -> np.dtype:
    """The token dtype a TokensLoader `config.data_format` names (one `no_header_tensor:K` or
    `no_header_numpy:K`); anything else, or a K that is not an integer type, is a UserError."""
    if not (isinstance(data_format, list) and len(data_format) == 1 and isinstance(data_format[0], str)):
        raise UserError(f"{where}: config.data_format {data_format!r} is not one TokensLoader format "
                        "(['no_header_tensor:K'] or ['no_header_numpy:K'])")
    serializer, _, k = data_format[0].partition(":")
    table = _SERIALIZERS.get(serializer)
    if table is None or not k.isascii() or not k.isdigit() or int(k) >= len(table):
        raise UserError(f"{where}: config.data_format {data_format[0]!r} names no dtype LitData has "
                        f"(no_header_tensor:0..{len(_TORCH) - 1} or no_header_numpy:0..{len(_NUMPY) - 1})")
    name = table[int(k)]
    if name not in TOKEN_TYPES:
        raise UserError(f"{where}: config.data_format {data_format[0]!r} holds {name} values, not integer tokens")
    return TOKEN_TYPES[name]


class LitDataTokensSource:
    def __init__(self, spec: SourceSpec):
        self.spec = spec

    @cached_property
    def _index_url(self) -> str:
        fs, path = url_to_fs(self.spec.url)
        path = path.rstrip("/")
        return fs.unstrip_protocol(path if path.endswith("index.json") else f"{path}/index.json")

    @cached_property
    def _index(self) -> tuple[list[dict], np.dtype]:
        """The chunk entries and the token type, the config checked."""
        where = self._index_url
        try:
            index = json.loads(read_bytes(where))
        except ValueError as e:
            raise UserError(f"{where}: not JSON ({e})") from None
        if not (isinstance(index, dict) and isinstance(index.get("chunks"), list)
                and isinstance(index.get("config"), dict)):
            raise UserError(f"{where}: not a LitData index (an object with 'chunks' and 'config')")
        if not index["chunks"]:
            raise UserError(f"{where}: lists no chunks")
        config = index["config"]
        if config.get("item_loader") != "TokensLoader":
            raise UserError(f"{where}: config.item_loader is {config.get('item_loader')!r}: only LitData's "
                            "TokensLoader output (a stream of tokens) is read")
        for key in ("compression", "encryption"):
            if config.get(key):
                raise UserError(f"{where}: config.{key} is {config[key]!r}: only uncompressed, unencrypted "
                                "chunks are read (optimize without it)")
        return index["chunks"], _token_type(config.get("data_format"), where)

    def parts(self) -> list[Part]:
        chunks, dtype = self._index
        folder = self._index_url.rsplit("/", 1)[0]
        files = {f.url: f for f in list_files(folder, (".bin",), "LitData chunks")}
        parts = []
        for i, chunk in enumerate(chunks):
            where = f"{self._index_url}: chunks[{i}]"
            if not isinstance(chunk, dict):
                raise UserError(f"{where} is not an object")
            name = check_relative(chunk.get("filename"), f"chunks[{i}].filename in {self._index_url}")
            items, tokens = _count(chunk, "chunk_size", where), _count(chunk, "dim", where)
            f = files.get(join(folder, name))
            if f is None:
                raise UserError(f"{where}.filename {name!r}: no such chunk beside the index")
            check_declared(items + 2, 4, f.size, f.url, f"its header (chunks[{i}].chunk_size {items:,} items)")
            header = 4 * (items + 2)
            check_declared(tokens, dtype.itemsize, f.size - header, f.url, f"chunks[{i}].dim ({dtype.name} tokens)")
            if f.size != header + tokens * dtype.itemsize:
                raise UserError(f"{f.url}: {f.size:,} bytes; chunks[{i}] of the index ({items:,} items, "
                                f"{tokens:,} {dtype.name} tokens) takes {header + tokens * dtype.itemsize:,}")
            parts.append(Part(i, f.url, f.size, {"name": name, "items": items, "tokens": tokens,
                                                 "dtype": dtype.name}, f.stamp))
        return parts

    def schema(self) -> pa.Schema:
        return document_schema(self._index[1])

    def hints(self) -> Mapping[str, Any]:
        return {"roles": {"tokens": Role.TOKENS.value}}

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        dtype = TOKEN_TYPES[part.options["dtype"]]
        items, tokens = part.options["items"], part.options["tokens"]
        header = 4 * (items + 2)
        with open_file(part.url) as f:
            data = f.read(header)  # the header's size was checked against the file when the parts were listed
        if len(data) != header:
            raise UserError(f"{part.url}: ends at byte {len(data):,}, inside its {header:,}-byte header (truncated?)")
        declared = int(np.frombuffer(data, "<u4", 1)[0])
        if declared != items:
            raise UserError(f"{part.url}: its header declares {declared:,} items, the index's chunk_size {items:,}")
        offsets = np.frombuffer(data, "<u4", items + 1, 4).astype(np.int64) - header
        if (offsets % dtype.itemsize).any():
            at = int(np.flatnonzero(offsets % dtype.itemsize)[0])
            raise UserError(f"{part.url}: item offset {at:,} (byte {int(offsets[at]) + header:,}) is not on a "
                            f"{dtype.name} token")
        offsets = check_offsets(offsets // dtype.itemsize, tokens, part.url, "its header's item offsets")
        yield from document_batches(part.url, part.options["name"], dtype, offsets, base=header)


def _count(chunk: dict, key: str, where: str) -> int:
    value = chunk.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"{where}.{key} is {value!r}, not a count")
    return value

"""Undo what an export had to do to fit a format: exact types, base64 and JSON-text values, names.

An export writes a `_dsinspect.export` sidecar (`SIDECAR`) beside its files: the version's fields
(types, roles, options), its key, and per field how the value was written (`encodings`) and under
which column name a reader of that format will find it (`columns`). Re-ingesting that directory
applies it, so the rows, the schema and hence the version id come back exactly.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Iterator

import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, arrow_error
from dsinspect.loaders.format.arrow_types import type_from_json
from dsinspect.loaders.store.storage import join, url_to_fs

__all__ = ["SIDECAR", "SIDECAR_FORMAT", "SIDECAR_KEY", "find_sidecar", "restore_batches", "restore_batch"]

SIDECAR = "_dsinspect.export"  # JSON; "_" prefix and no data-file ending: readers and kind detection skip it
SIDECAR_FORMAT = "dsinspect.export/1"
SIDECAR_KEY = b"dsinspect"  # the same JSON in a Parquet export's schema metadata


def find_sidecar(url: str) -> dict | None:
    """The export sidecar of a source directory (or of a file's or glob's directory), if any."""
    fs, path = url_to_fs(url)
    if any(c in url for c in "*?[") or not fs.isdir(path):
        path = path.rsplit("/", 1)[0] if "/" in path else path
    candidate = join(path, SIDECAR)
    try:
        if not fs.isfile(candidate):
            return None
        data = json.loads(fs.cat_file(candidate))
    except (OSError, ValueError) as e:
        raise UserError(f"{fs.unstrip_protocol(candidate)}: not a readable export sidecar: {e}") from None
    if not isinstance(data, dict) or data.get("format") != SIDECAR_FORMAT:
        raise UserError(f"{fs.unstrip_protocol(candidate)}: not a {SIDECAR_FORMAT} sidecar")
    return data


def restore_batches(batches: Iterator[pa.RecordBatch], sidecar: dict, where: str) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield restore_batch(batch, sidecar, where)


def restore_batch(batch: pa.RecordBatch, sidecar: dict, where: str) -> pa.RecordBatch:
    """`batch` as the exported version's columns, in field order, with their exact types."""
    encodings, columns = sidecar.get("encodings", {}), sidecar.get("columns", {})
    arrays, fields = [], []
    for f in sidecar["fields"]:
        name, target = f["name"], type_from_json(f["type"])
        column = columns.get(name, name)
        if column not in batch.schema.names:
            raise UserError(f"{where}: column {column!r} of exported field {name!r} is missing")
        arrays.append(_restore(batch.column(column), target, encodings.get(name), f"{where}: field {name!r}"))
        fields.append(pa.field(name, target, f["nullable"]))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _restore(array: pa.Array, target: pa.DataType, encoding: str | None, where: str) -> pa.Array:
    try:
        if encoding == "base64":
            return pa.array([None if v is None else base64.b64decode(_text(v), validate=True)
                             for v in array.to_pylist()], target)
        if encoding == "json" and (pa.types.is_string(array.type) or pa.types.is_binary(array.type)
                                   or pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)):
            return _cast(pa.array([None if v is None else json.loads(v) for v in array.to_pylist()]), target)
        if encoding == "utf-8" and not pa.types.is_string(array.type):
            return pa.array([None if v is None else _text(v) for v in array.to_pylist()], target)
        return _cast(array, target)
    except (binascii.Error, *NOT_CONVERTIBLE) as e:
        raise arrow_error(e, f"{where}: cannot restore the exported values") from None


def _cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    if array.type == target:
        return array
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), target)
    if pa.types.is_temporal(target) and pa.types.is_integer(array.type):  # exported as the stored integer
        return array.cast(pa.int32() if target.bit_width == 32 else pa.int64()).view(target)
    return array.cast(target)


def _text(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else v

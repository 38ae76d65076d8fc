"""Arrow types as small, stable JSON (manifests must not depend on a library's binary schema format)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dsinspect.errors import ManifestError, UserError
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, arrow_error

__all__ = ["type_to_json", "type_from_json"]

_SIMPLE: dict[str, pa.DataType] = {
    str(t): t
    for t in (
        pa.null(), pa.bool_(),
        pa.int8(), pa.int16(), pa.int32(), pa.int64(),
        pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
        pa.float16(), pa.float32(), pa.float64(),
        pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
        pa.date32(), pa.date64(),
    )
}
_SIMPLE["float16"] = pa.float16()  # str(pa.float16()) is "halffloat"; keep both spellings readable


def type_to_json(t: pa.DataType) -> Any:
    """A JSON value describing `t`; `type_from_json` inverts it exactly."""
    if pa.types.is_dictionary(t):
        return type_to_json(t.value_type)  # dictionary encoding is a storage detail, not content
    if t in _SIMPLE.values():
        return "float16" if t == pa.float16() else str(t)
    if pa.types.is_timestamp(t):
        return {"type": "timestamp", "unit": t.unit, "tz": t.tz}
    if pa.types.is_duration(t):
        return {"type": "duration", "unit": t.unit}
    if pa.types.is_time32(t) or pa.types.is_time64(t):
        return {"type": f"time{t.bit_width}", "unit": t.unit}
    if pa.types.is_decimal(t):
        return {"type": f"decimal{t.bit_width}", "precision": t.precision, "scale": t.scale}
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed_size_binary", "width": t.byte_width}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind = "list" if pa.types.is_list(t) else "large_list"
        return {"type": kind, "item": type_to_json(t.value_type)}
    if pa.types.is_fixed_size_list(t):
        return {"type": "fixed_size_list", "item": type_to_json(t.value_type), "size": t.list_size}
    if pa.types.is_struct(t):
        fields = [{"name": f.name, "type": type_to_json(f.type), "nullable": f.nullable} for f in t]
        return {"type": "struct", "fields": fields}
    raise UserError(f"Arrow type {t} is not supported by dsinspect (supported: numbers, bool, strings, "
                    "binary, dates, times, timestamps, decimals, lists and structs of those)")


def type_from_json(j: Any, where: str = "manifest") -> pa.DataType:
    """The Arrow type described by `j`; a clear ManifestError naming `where` when it is malformed."""
    if isinstance(j, str):
        if j in _SIMPLE:
            return _SIMPLE[j]
        raise ManifestError(f"{where}: unknown type {j!r}")
    if not isinstance(j, dict) or not isinstance(j.get("type"), str):
        raise ManifestError(f"{where}: a type must be a name or an object with a 'type' key, got {j!r}")
    try:
        return _PARAMETRIC[j["type"]](j, where)
    except KeyError as e:
        if j["type"] not in _PARAMETRIC:
            raise ManifestError(f"{where}: unknown type {j['type']!r}") from None
        raise ManifestError(f"{where}: type {j['type']!r} is missing key {e}") from None
    except NOT_CONVERTIBLE as e:
        raise arrow_error(e, f"{where}: bad {j['type']!r} type", ManifestError) from None


def _struct(j: dict, where: str) -> pa.DataType:
    return pa.struct([pa.field(f["name"], type_from_json(f["type"], where), bool(f.get("nullable", True)))
                      for f in j["fields"]])


_PARAMETRIC = {
    "timestamp": lambda j, w: pa.timestamp(j["unit"], j.get("tz")),
    "duration": lambda j, w: pa.duration(j["unit"]),
    "time32": lambda j, w: pa.time32(j["unit"]),
    "time64": lambda j, w: pa.time64(j["unit"]),
    "decimal128": lambda j, w: pa.decimal128(j["precision"], j["scale"]),
    "decimal256": lambda j, w: pa.decimal256(j["precision"], j["scale"]),
    "fixed_size_binary": lambda j, w: pa.binary(int(j["width"])),
    "list": lambda j, w: pa.list_(type_from_json(j["item"], w)),
    "large_list": lambda j, w: pa.large_list(type_from_json(j["item"], w)),
    "fixed_size_list": lambda j, w: pa.list_(type_from_json(j["item"], w), int(j["size"])),
    "struct": _struct,
}

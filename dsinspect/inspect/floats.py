"""Floats stored in fewer than 64 bits, shown with the digits they have: a float32 read into Python
is a float64 whose repr has float64 digits (-0.00029598333640024066 for the stored -0.00029598334).
`narrow` marks such values (walking a value beside its Arrow type) with a float subclass whose text
is the shortest that gives the same float32 (or float16) back; the number itself is unchanged, and
JSON (`json.dumps` writes float64's repr) stays exact."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["Float32", "Float16", "narrow", "narrow_array", "has_narrow_floats", "json_number", "from_duckdb"]


class _Narrow(float):
    """A float64 holding a narrower float's value; its text is the narrow type's shortest."""

    kind: Any = np.float32

    def __repr__(self) -> str:
        return str(self.kind(self))

    __str__ = __repr__


class Float32(_Narrow):
    kind = np.float32


class Float16(_Narrow):
    kind = np.float16


def _marker(t: pa.DataType) -> type[_Narrow] | None:
    return Float32 if pa.types.is_float32(t) else Float16 if pa.types.is_float16(t) else None


def has_narrow_floats(t: pa.DataType) -> bool:
    """`t` holds float32 or float16 values somewhere (in a list, a struct...)."""
    if _marker(t) is not None:
        return True
    return any(has_narrow_floats(t.field(i).type) for i in range(t.num_fields))


def narrow(value: Any, t: pa.DataType, *, shallow: bool = False) -> Any:
    """`value` (as `.as_py()` gives it for type `t`) with its float32/float16 numbers marked; `shallow`:
    a struct's own fields only, not the lists inside it (a table cell shows only their lengths)."""
    if value is None or not has_narrow_floats(t):
        return value
    marker = _marker(t)
    if marker is not None:
        return marker(value) if isinstance(value, float) else value
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and not shallow:
        return [narrow(v, t.value_type) for v in value]
    if pa.types.is_struct(t) and isinstance(value, dict):
        return {k: narrow(v, t.field(k).type, shallow=shallow) if t.get_field_index(k) >= 0 else v
                for k, v in value.items()}
    return value


def narrow_array(values: Any, dtype: np.dtype) -> Any:
    """A numpy array's `tolist()` with its float32/float16 numbers marked."""
    marker = Float32 if dtype == np.float32 else Float16 if dtype == np.float16 else None
    if marker is None:
        return values
    if isinstance(values, list):
        return [narrow_array(v, dtype) for v in values]
    return marker(values) if isinstance(values, float) else values


def json_number(value: Any) -> str:
    """`value` as JSON text, a marked float with its own shortest digits."""
    import json

    return repr(value) if isinstance(value, _Narrow) and np.isfinite(value) else json.dumps(value)


def from_duckdb(t: Any) -> pa.DataType:
    """A DuckDB column type (`cursor.description`) as an Arrow type, as far as `narrow` needs it:
    FLOAT, HALF_FLOAT, lists, arrays and structs of them; anything else a stand-in without floats."""
    kind = getattr(t, "id", None)
    if kind == "float":
        return pa.float32()
    if kind in ("list", "array"):
        return pa.list_(from_duckdb(t.children[0][1]))
    if kind == "struct":
        return pa.struct([(str(name), from_duckdb(child)) for name, child in t.children])
    return pa.null()

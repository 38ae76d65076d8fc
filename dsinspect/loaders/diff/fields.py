"""Field-level comparison of two versions of one row: what changed in a field, by role: the first
differing token or character, an image's size, mode and pixel difference, an array's shape and elements."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.diff.images import image_detail
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.format.nested import flatten
from dsinspect.loaders.format.npy import read_npy
from dsinspect.loaders.format.roles import Role

__all__ = ["field_detail", "image_detail", "array_detail", "first_difference", "changed_stretch"]

CONTEXT = 24    # characters or tokens kept either side of a change: what a face shows around it
SHOWN = 160     # of the changed stretch itself, per side


def field_detail(field: Field, before: Any, after: Any) -> dict[str, Any]:
    """What changed in one field's value, in terms that fit its role (JSON-able)."""
    if before is None or after is None:
        return {"null": [before is None, after is None]}
    role = field.role
    if role is Role.TOKENS:
        first = first_difference(before, after)
        return {"tokens": [len(before), len(after)], "first_diff": first, **changed_stretch(before, after, first)}
    if role is Role.IMAGE:
        return image_detail(before, after)
    if role is Role.ARRAY and isinstance(before, list) and isinstance(after, list):
        return array_detail(before, after, _dtype_name(field.type))
    if role is Role.ARRAY and isinstance(before, bytes) and isinstance(after, bytes):
        return _npy_detail(before, after)
    if role is Role.TRAJECTORY:
        return {"steps": [_steps(before), _steps(after)], "return": [_return(before), _return(after)]}
    if role in (Role.TEXT, Role.JSON) and isinstance(before, str):
        first = first_difference(before, after)
        return {"chars": [len(before), len(after)], "first_diff": first, **changed_stretch(before, after, first)}
    if isinstance(before, (bytes, bytearray)):
        return {"bytes": [len(before), len(after)], "first_diff": first_difference(before, after)}
    if isinstance(before, (bool, int, float, str)):
        return {"before": _json_scalar(before), "after": _json_scalar(after)}
    return {}


def first_difference(a: Any, b: Any) -> int | None:
    """The first index where two sequences differ (the shorter length if one extends the other)."""
    n = min(len(a), len(b))
    if isinstance(a, (bytes, bytearray)) and isinstance(b, (bytes, bytearray)):
        x, y = np.frombuffer(a[:n], np.uint8), np.frombuffer(b[:n], np.uint8)
        where = np.flatnonzero(x != y)
        return int(where[0]) if len(where) else (n if len(a) != len(b) else None)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n if len(a) != len(b) else None


def changed_stretch(a: str | list, b: str | list, first: int | None) -> dict[str, Any]:
    """The one stretch that changed between a common prefix (up to `first`) and a common suffix,
    with CONTEXT around it, for a face to highlight: `{"change": {"span": [first, end_a, end_b],
    "before": ..., "removed": a[first:end_a], "added": b[first:end_b], "after": ..., "cut": ...}}`
    (pieces of `a`'s own type: text or token ids; `removed`/`added` cut to SHOWN, `cut` says so).
    Several edits far apart make one stretch from the first to the last."""
    if first is None:
        return {}
    most = min(len(a), len(b)) - first
    suffix = 0
    while suffix < most and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
        suffix += 1
    end_a, end_b = len(a) - suffix, len(b) - suffix
    piece = (lambda x: x) if isinstance(a, str) else (lambda x: [int(v) for v in x])
    return {"change": {"span": [first, end_a, end_b], "before": piece(a[max(0, first - CONTEXT):first]),
                       "removed": piece(a[first:min(end_a, first + SHOWN)]),
                       "added": piece(b[first:min(end_b, first + SHOWN)]),
                       "after": piece(a[end_a:end_a + CONTEXT]),
                       "cut": end_a - first > SHOWN or end_b - first > SHOWN}}


def array_detail(before: list, after: list, dtype: str) -> dict[str, Any]:
    """The shapes of two (nested) lists of numbers ("ragged" when irregular); when they agree, how
    many elements differ, the first that does (its index and both values) and the largest absolute
    difference. Elements compare as the field hash does: NaN equals NaN, -0.0 differs from 0.0."""
    (xa, na, sa), (xb, nb, sb) = _elements(before), _elements(after)
    out: dict[str, Any] = {"dtype": dtype, "shape": [_shape_json(sa), _shape_json(sb)], "elements": [len(xa), len(xb)]}
    if sa is None or sa != sb:
        return out
    differ = (na != nb) | (~na & ~nb & _values_differ(xa, xb))
    where = np.flatnonzero(differ)
    out["elements_changed"] = len(where)
    if len(where):
        first = int(where[0])
        out["first_diff"] = [int(i) for i in np.unravel_index(first, sa)] if sa else []
        out["values"] = [None if nulls[first] else _json_scalar(values[first].item())
                         for values, nulls in ((xa, na), (xb, nb))]
    both = ~na & ~nb
    if xa.dtype.kind in "iuf" and both.any():
        gap = np.abs(xa[both].astype(np.float64) - xb[both].astype(np.float64))
        gap = gap[np.isfinite(gap)]
        out["max_abs_diff"] = _json_scalar(float(gap.max())) if len(gap) else None
    return out


def _npy_detail(before: bytes, after: bytes) -> dict[str, Any]:
    """`array_detail` of two .npy values (an array field whose rows differ in dtype or dimensions);
    their bytes' difference when either is not a .npy array of numbers."""
    try:
        a, b = read_npy(before, "before"), read_npy(after, "after")
    except UserError:
        return {"bytes": [len(before), len(after)], "first_diff": first_difference(before, after)}
    dtype = a.dtype.name if a.dtype == b.dtype else f"{a.dtype.name} → {b.dtype.name}"
    return array_detail(_as_list(a), _as_list(b), dtype)


def _as_list(array: np.ndarray) -> list:
    return array.tolist() if array.ndim else [array.item()]


def _elements(value: list) -> tuple[np.ndarray, np.ndarray, tuple[int, ...] | None]:
    """Leaves in order (nulls as 0), which leaves are null, and the shape (None when ragged)."""
    flat, shape = flatten(value)
    nulls = np.fromiter((v is None for v in flat), dtype=bool, count=len(flat))
    values = np.asarray([0 if v is None else v for v in flat]) if flat else np.zeros(0)
    return values, nulls, shape


def _values_differ(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f" or y.dtype.kind == "f":
        x, y = x.astype(np.float64), y.astype(np.float64)
        same = ((x == y) & (np.signbit(x) == np.signbit(y))) | (np.isnan(x) & np.isnan(y))
        return ~same
    return x != y


def _shape_json(shape: tuple[int, ...] | None) -> list[int] | str:
    return list(shape) if shape is not None else "ragged"


def _dtype_name(t: Any) -> str:
    """The numpy name of a (nested) list type's items: float32, int64, bool."""
    while hasattr(t, "value_type"):
        t = t.value_type
    try:
        return np.dtype(t.to_pandas_dtype()).name
    except (NotImplementedError, TypeError):
        return str(t)


def _steps(trajectory: Any) -> int | None:
    if isinstance(trajectory, dict):
        for value in trajectory.values():
            if isinstance(value, list):
                return len(value)
    return None


def _return(trajectory: Any) -> float | None:
    if isinstance(trajectory, dict):
        for name in ("reward", "rewards"):
            rewards = trajectory.get(name)
            if isinstance(rewards, list):
                total = float(sum(r for r in rewards if r is not None))
                return round(total, 6) if math.isfinite(total) else None
    return None


def _json_scalar(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str) and len(value) > 200:
        return value[:200] + "…"
    return value

"""Field-level comparison of two versions of one row: which fields changed (by field hash), and what
changed in each, by role: the first differing token, an image's size, mode and pixel difference."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pyarrow as pa

from dsinspect.loaders.canonical import field_hashes
from dsinspect.loaders.manifest import Field
from dsinspect.loaders.roles import Role

__all__ = ["changed_fields", "field_detail", "image_detail", "first_difference"]

_MAX_PIXELS = 64 << 20  # larger images get size and mode only (no pixel comparison)


def changed_fields(a: pa.Table, b: pa.Table, names: list[str]) -> list[list[str]]:
    """For each row pair (row i of `a` with row i of `b`), the fields among `names` that differ."""
    differ = {n: [x != y for x, y in zip(field_hashes(a.column(n)), field_hashes(b.column(n)))] for n in names}
    return [[n for n in names if differ[n][i]] for i in range(a.num_rows)]


def field_detail(field: Field, before: Any, after: Any) -> dict[str, Any]:
    """What changed in one field's value, in terms that fit its role (JSON-able)."""
    if before is None or after is None:
        return {"null": [before is None, after is None]}
    role = field.role
    if role is Role.TOKENS:
        return {"tokens": [len(before), len(after)], "first_diff": first_difference(before, after)}
    if role is Role.IMAGE:
        return image_detail(before, after)
    if role is Role.TRAJECTORY:
        return {"steps": [_steps(before), _steps(after)], "return": [_return(before), _return(after)]}
    if role in (Role.TEXT, Role.JSON) and isinstance(before, str):
        return {"chars": [len(before), len(after)], "first_diff": first_difference(before, after)}
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


def image_detail(a: bytes, b: bytes) -> dict[str, Any]:
    """Size, mode and format of both images; when the sizes match, the mean absolute pixel
    difference (0-255, over RGBA channels) and the fraction of pixels that differ."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is a dependency
        return {"bytes": [len(a), len(b)]}
    try:
        images = []
        for data in (a, b):
            img = Image.open(io.BytesIO(data))
            img.load()
            images.append(img)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        return {"bytes": [len(a), len(b)], "error": f"not decodable as an image: {e}"}
    x, y = images
    out: dict[str, Any] = {"size": [list(x.size), list(y.size)], "mode": [x.mode, y.mode],
                           "format": [x.format, y.format], "bytes": [len(a), len(b)]}
    if x.size == y.size and x.size[0] * x.size[1] <= _MAX_PIXELS:
        px = np.asarray(x.convert("RGBA"), dtype=np.int16)
        py = np.asarray(y.convert("RGBA"), dtype=np.int16)
        delta = np.abs(px - py)
        out["pixel_mean_abs_diff"] = round(float(delta.mean()), 4)
        out["pixels_changed"] = round(float((delta.max(axis=2) > 0).mean()), 6)
    return out


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

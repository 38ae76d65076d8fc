"""What changed between two encoded images: size, mode, format, bit depth, and the pixel
difference on the images' own values (a 16-bit PNG is compared on 0-65535, never clipped to 8 bits)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from dsinspect.extras import require
from dsinspect.loaders.format.image_formats import SAFE_FORMATS

__all__ = ["image_detail", "pixel_delta", "bit_depth", "MAX_PIXELS"]

MAX_PIXELS = 64 << 20  # larger images get size and mode only (no pixel comparison)
# Single-channel modes holding more than 8 bits: compared as stored. Others go through 8-bit RGBA.
_DEEP_BITS = {"I;16": 16, "I;16L": 16, "I;16B": 16, "I;16N": 16, "I": 32, "F": 32}


def bit_depth(img: Any) -> int:
    """Bits per channel of a decoded PIL image's mode."""
    return _DEEP_BITS.get(img.mode, 1 if img.mode == "1" else 8)


def pixel_delta(x: Any, y: Any) -> np.ndarray | None:
    """|x - y| per pixel and channel, on the values as stored for 16- and 32-bit single-channel
    images ((h, w), float64; NaN where exactly one side is NaN) and on 8-bit RGBA for the rest
    ((h, w, 4)); None when the sizes differ or one image is deep and the other 8-bit."""
    deep = x.mode in _DEEP_BITS
    if x.size != y.size or deep != (y.mode in _DEEP_BITS):
        return None
    if deep:
        px, py = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        return np.where(np.isnan(px) & np.isnan(py), 0.0, np.abs(px - py))
    px, py = np.asarray(x.convert("RGBA"), dtype=np.int16), np.asarray(y.convert("RGBA"), dtype=np.int16)
    return np.abs(px - py)


def image_detail(a: bytes, b: bytes) -> dict[str, Any]:
    """Size, mode, format and bits per channel of both images; when they compare, the mean and
    largest absolute difference over all channel values, on the `full_scale` they span (255 for
    8-bit RGBA, 65535 for 16-bit, None for 32-bit int or float), the fraction of pixels that
    differ, and for 16/32-bit images each one's value range."""
    Image = require("PIL.Image", "media", "a diff of image fields")

    try:
        x, y = (Image.open(io.BytesIO(data), formats=SAFE_FORMATS) for data in (a, b))  # never Ghostscript
        small = all(img.size[0] * img.size[1] <= MAX_PIXELS for img in (x, y))
        if small:  # the header's size is checked before any pixel is decoded
            x.load()
            y.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        return {"bytes": [len(a), len(b)], "error": f"not decodable as an image: {e}"}
    out: dict[str, Any] = {"size": [list(x.size), list(y.size)], "mode": [x.mode, y.mode],
                           "format": [x.format, y.format], "bytes": [len(a), len(b)],
                           "bits": [bit_depth(x), bit_depth(y)]}
    delta = pixel_delta(x, y) if small else None
    if delta is None:
        if small and x.size == y.size:
            out["note"] = "bit depths differ: no pixel comparison"
        return out
    finite = delta[np.isfinite(delta)]
    out["full_scale"] = _full_scale(x, y)
    out["pixel_mean_abs_diff"] = round(float(finite.mean()), 4) if finite.size else None
    out["pixel_max_abs_diff"] = _number(finite.max()) if finite.size else None
    changed = delta != 0  # NaN (one side only) counts as a change
    out["pixels_changed"] = round(float((changed.any(axis=2) if changed.ndim == 3 else changed).mean()), 6)
    if x.mode in _DEEP_BITS:
        out["value_range"] = [_value_range(x), _value_range(y)]
    return out


def _full_scale(x: Any, y: Any) -> int | None:
    bits = {bit_depth(x), bit_depth(y)}
    if x.mode not in _DEEP_BITS:
        return 255
    return 65535 if bits == {16} else None


def _value_range(img: Any) -> list[Any] | None:
    values = np.asarray(img)
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values.ravel()
    return [_number(finite.min()), _number(finite.max())] if finite.size else None


def _number(value: Any) -> int | float:
    value = value.item() if hasattr(value, "item") else value
    return int(value) if float(value).is_integer() else round(float(value), 6)

"""Two versions of an image, as every face draws them: decoded with Pillow's own decoders, turned
upright by their EXIF orientation (as the sample views do), and a greyscale figure of where they
differ (the largest channel difference, on the stored values of 16/32-bit images, stretched so the
largest becomes white). Shared by the web's Diff page and the TUI's row diff."""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps

from dsinspect.inspect.images import SAFE_FORMATS
from dsinspect.loaders.diff.images import pixel_delta

__all__ = ["open_image", "upright", "difference_image", "DIFF_PIXELS"]

DIFF_PIXELS = 16 << 20  # larger images get no difference figure
_ORIENTATION_TAG = 0x0112


def open_image(data: bytes) -> Image.Image:
    """Decoded, Pillow's own decoders only (OSError, ValueError, SyntaxError or
    DecompressionBombError when it cannot be)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        img = Image.open(io.BytesIO(data), formats=SAFE_FORMATS)
        img.load()
    return img


def upright(img: Image.Image) -> tuple[Image.Image, int | None]:
    """`img` turned upright by its EXIF orientation, and that orientation (None when it needs no turn)."""
    try:
        orientation = img.getexif().get(_ORIENTATION_TAG)
    except Exception:  # noqa: BLE001 - a corrupt EXIF block must not hide the picture
        return img, None
    if orientation in (2, 3, 4, 5, 6, 7, 8):
        return ImageOps.exif_transpose(img), orientation
    return img, None


def difference_image(a: bytes, b: bytes) -> Image.Image | None:
    """Where two encoded images differ, drawn upright as they are; None when the sizes or bit depths
    differ, either is undecodable, or they are larger than DIFF_PIXELS."""
    try:
        x, y = upright(open_image(a))[0], upright(open_image(b))[0]
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    if x.width * x.height > DIFF_PIXELS:
        return None
    delta = pixel_delta(x, y)
    if delta is None:
        return None
    delta = np.nan_to_num(delta if delta.ndim == 2 else delta.max(axis=2), nan=0.0)
    top = float(delta.max())
    figure = (delta * (255.0 / top)).astype(np.uint8) if top else delta.astype(np.uint8)
    return Image.fromarray(figure, "L")

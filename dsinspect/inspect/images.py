"""Images: format, size, mode, EXIF orientation, the decoded picture and thumbnails, behind a
decompression-bomb limit checked from the header before any pixel is decoded."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from dsinspect.inspect.views import ErrorView, Finding, Severity, View, no_json, reason_of
from dsinspect.loaders.format.image_formats import SAFE_FORMATS

__all__ = ["ImageView", "image_view", "fit_pixels", "to_rgb", "png_bytes", "MAX_PIXELS", "SAFE_FORMATS"]

MAX_PIXELS = 50_000_000
_ORIENTATION_TAG = 0x0112
_ORIENTATIONS = {1: "upright", 2: "mirrored", 3: "rotated 180°", 4: "flipped", 5: "mirrored and rotated 90° CW",
                 6: "rotated 90° CW", 7: "mirrored and rotated 90° CCW", 8: "rotated 90° CCW"}


@dataclass
class ImageView(View):
    """One decoded image; `width`/`height` are as stored, `display_*` after the EXIF orientation."""

    kind: ClassVar[str] = "image"
    format: str
    width: int
    height: int
    mode: str
    orientation: int | None
    display_width: int
    display_height: int
    frames: int
    byte_size: int
    info: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    decoded: Image.Image | None = no_json(default=None)

    def image(self, oriented: bool = True) -> Image.Image:
        """The full image (a copy), turned upright by its EXIF orientation unless `oriented` is False."""
        img = self.decoded.copy()
        return ImageOps.exif_transpose(img) if oriented and self.orientation not in (None, 1) else img

    def thumbnail(self, max_side: int = 128, oriented: bool = True) -> Image.Image:
        img = self.image(oriented)
        img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        return img

    def png(self, max_side: int | None = None, oriented: bool = True) -> bytes:
        return png_bytes(self.thumbnail(max_side, oriented) if max_side else self.image(oriented))

    def pixels(self, max_width: int, max_height: int) -> np.ndarray:
        """Upright RGB pixels fitted into max_width x max_height, e.g. for half-block terminal art."""
        return fit_pixels(self.image(), max_width, max_height)


def image_view(data: bytes, max_pixels: int = MAX_PIXELS) -> ImageView | ErrorView:
    """Decode `data`; a broken, truncated or oversized image becomes an ErrorView with the reason."""
    if not data:
        return ErrorView("image", "empty: the field holds 0 bytes", b"")
    try:
        img = Image.open(io.BytesIO(data), formats=SAFE_FORMATS)
    except Image.DecompressionBombError as e:
        return ErrorView("image", f"refused by the decompression-bomb guard: {e}", data)
    except UnidentifiedImageError:
        return ErrorView("image", f"not an image in a known format (first bytes {data[:8].hex(' ')}; "
                                  f"tried {', '.join(SAFE_FORMATS)})", data)
    except Exception as e:  # noqa: BLE001 - a corrupt header can raise anything
        return ErrorView("image", f"unreadable header: {reason_of(e)}", data)
    w, h = img.size
    if w * h > max_pixels:
        return ErrorView("image", f"refused: the header declares {w}x{h} = {w * h:,} pixels, over the limit of "
                                  f"{max_pixels:,} (decompression-bomb guard); nothing was decoded", data)
    try:
        img.load()
    except Exception as e:  # noqa: BLE001
        return ErrorView("image", f"{img.format} {w}x{h} {img.mode} could not be decoded: {reason_of(e)}", data)
    return _view(img, data)


def _view(img: Image.Image, data: bytes) -> ImageView:
    findings: list[Finding] = []
    orientation = _orientation(img, findings)
    w, h = img.size
    dw, dh = (h, w) if orientation in (5, 6, 7, 8) else (w, h)
    try:
        frames = int(getattr(img, "n_frames", 1) or 1)  # counting GIF/WebP frames reads them all
    except Exception as e:  # noqa: BLE001 - a later frame may be corrupt when the first is fine
        frames = 1
        findings.append(Finding(Severity.WARNING, "image-frames", f"frames after the first unreadable: {reason_of(e)}"))
    if orientation not in (None, 1):
        findings.append(Finding(Severity.INFO, "image-orientation",
                                f"EXIF orientation {orientation} ({_ORIENTATIONS.get(orientation, 'invalid')}): "
                                f"stored {w}x{h}, shown {dw}x{dh}"))
    if frames > 1:
        findings.append(Finding(Severity.INFO, "image-animated", f"{frames} frames; the first is shown"))
    return ImageView(img.format or "?", w, h, img.mode, orientation, dw, dh, frames, len(data),
                     _info(img), findings, img)


def _orientation(img: Image.Image, findings: list[Finding]) -> int | None:
    try:
        value = img.getexif().get(_ORIENTATION_TAG)
    except Exception as e:  # noqa: BLE001 - a corrupt EXIF block must not hide the picture
        findings.append(Finding(Severity.WARNING, "image-exif", f"EXIF block unreadable: {reason_of(e)}"))
        return None
    if value is None:
        return None
    if not isinstance(value, int) or value not in _ORIENTATIONS:
        findings.append(Finding(Severity.WARNING, "image-orientation-invalid",
                                f"EXIF orientation {value!r} is not 1-8"))
        return None
    return value


def _info(img: Image.Image) -> dict[str, Any]:
    info = img.info
    out: dict[str, Any] = {}
    for key in ("dpi", "progressive", "interlace", "gamma", "duration", "loop"):
        if key in info and isinstance(info[key], (int, float, tuple)):
            out[key] = info[key]
    if "icc_profile" in info:
        out["icc_profile_bytes"] = len(info["icc_profile"] or b"")
    if "transparency" in info or img.mode in ("RGBA", "LA", "PA"):
        out["transparency"] = True
    if img.mode == "P" and img.palette is not None:
        out["palette_colors"] = len(img.palette.colors)
    return out


def to_rgb(img: Image.Image, background: tuple[int, int, int] = (0, 0, 0)) -> Image.Image:
    """`img` as RGB, transparency composited over `background`, high bit depths scaled to 8 bits."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(np.nanmin(arr)) if arr.size else 0.0, float(np.nanmax(arr)) if arr.size else 1.0
        img = Image.fromarray(((arr - lo) / ((hi - lo) or 1.0) * 255).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA", "P", "RGBa", "La") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        base = Image.new("RGBA", rgba.size, (*background, 255))
        return Image.alpha_composite(base, rgba).convert("RGB")
    return img.convert("RGB")


def fit_pixels(img: Image.Image, max_width: int, max_height: int,
               background: tuple[int, int, int] = (0, 0, 0)) -> np.ndarray:
    """RGB pixels (height, width, 3) of `img` scaled to fit the box, keeping the aspect ratio."""
    rgb = to_rgb(img, background)
    scale = min(max_width / rgb.width, max_height / rgb.height, 1.0) if rgb.width and rgb.height else 1.0
    size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
    if size != rgb.size:
        rgb = rgb.resize(size, Image.Resampling.BOX if scale < 1 else Image.Resampling.NEAREST)
    return np.asarray(rgb, dtype=np.uint8)


def png_bytes(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    (img if img.mode in ("RGB", "RGBA", "L", "LA", "P", "1") else to_rgb(img)).save(buf, "PNG")
    return buf.getvalue()

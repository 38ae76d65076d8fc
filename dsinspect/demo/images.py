"""Deterministic, recognisable demo pictures (shapes, stripes, gradients) encoded as JPEG or PNG.

Shapes are drawn as 4x-supersampled coverage masks and composited with numpy, so edges are smooth.
``width``/``height`` are the stored pixel size; rows whose ``image_id % 16`` is 6 or 14 are JPEGs
stored rotated with an EXIF Orientation tag (6 or 8) that makes them display upright.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageOps

_SALT = 0x1A6E
_MASK = (1 << 64) - 1
_SS = 4  # supersampling factor
_ORIENTATION_TAG = 0x0112
_EXIF_IDS = {6: 6, 14: 8}  # image_id % 16 -> EXIF orientation
_STORE_ROTATION = {6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}

COLORS = {
    "red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 70), "yellow": (245, 210, 40),
    "orange": (245, 140, 30), "purple": (140, 60, 190), "white": (245, 245, 245), "black": (20, 20, 20),
    "pink": (240, 130, 180), "teal": (30, 160, 160), "gray": (128, 128, 128),
}
SCENES = ["circle", "square", "triangle", "ring", "cross", "stripes", "checkerboard", "gradient", "smiley"]
SIZES = [(32, 32), (48, 48), (64, 64), (64, 48), (48, 64), (80, 80), (96, 64), (128, 96), (160, 120)]
KINDS = [("jpeg", "RGB"), ("jpeg", "L"), ("png", "RGB"), ("png", "L"), ("png", "RGBA"), ("png", "P")]
_KIND_P = [0.3, 0.1, 0.2, 0.1, 0.15, 0.15]


def _rng(seed: int, image_id: int, salt: int = _SALT) -> np.random.Generator:
    """Per-row generator so a row depends only on (seed, image_id)."""
    return np.random.default_rng([seed & _MASK, image_id & _MASK, salt])


def _mask(scene: str, w: int, h: int, n: int, vertical: bool) -> Image.Image:
    """Coverage mask (mode L, supersampled) of the foreground for one scene."""
    W, H = w * _SS, h * _SS
    m = Image.new("L", (W, H), 0)
    d = ImageDraw.Draw(m)
    r, cx, cy = min(W, H) * 0.36, W / 2, H / 2
    box = [cx - r, cy - r, cx + r, cy + r]
    if scene in ("circle", "smiley"):
        d.ellipse(box, fill=255)
    elif scene == "square":
        d.rectangle(box, fill=255)
    elif scene == "triangle":
        d.polygon([(cx, cy - r), (cx + r, cy + r * 0.8), (cx - r, cy + r * 0.8)], fill=255)
    elif scene == "ring":
        d.ellipse(box, outline=255, width=max(1, int(r * 0.3)))
    elif scene == "cross":
        t = r * 0.3
        d.rectangle([cx - t, cy - r, cx + t, cy + r], fill=255)
        d.rectangle([cx - r, cy - t, cx + r, cy + t], fill=255)
    elif scene == "arrow":
        d.polygon([(cx, cy - r), (cx + r * 0.8, cy), (cx - r * 0.8, cy)], fill=255)
        d.rectangle([cx - r * 0.3, cy, cx + r * 0.3, cy + r], fill=255)
    elif scene == "stripes":
        step = (W if vertical else H) / (2 * n)
        for i in range(n):
            a, b = int((2 * i + 1) * step), int((2 * i + 2) * step)
            d.rectangle([a, 0, b - 1, H] if vertical else [0, a, W, b - 1], fill=255)
    elif scene == "checkerboard":
        s = max(W, H) / n
        for i in range(n):
            for j in range(n):
                if (i + j) % 2:
                    d.rectangle([int(i * s), int(j * s), int((i + 1) * s) - 1, int((j + 1) * s) - 1], fill=255)
    elif scene == "gradient":
        ramp = np.linspace(0, 255, W, dtype=np.float64).round().astype(np.uint8)
        m = Image.fromarray(np.tile(ramp, (H, 1)), "L")
    return m


def _smiley_features(w: int, h: int) -> Image.Image:
    """Mask of eyes and mouth for the smiley scene (supersampled)."""
    W, H = w * _SS, h * _SS
    m = Image.new("L", (W, H), 0)
    d = ImageDraw.Draw(m)
    r, cx, cy = min(W, H) * 0.36, W / 2, H / 2
    e = r * 0.13
    for ex in (cx - r * 0.35, cx + r * 0.35):
        d.ellipse([ex - e, cy - r * 0.35 - e, ex + e, cy - r * 0.35 + e], fill=255)
    d.arc([cx - r * 0.55, cy - r * 0.4, cx + r * 0.55, cy + r * 0.55], 20, 160, fill=255, width=max(1, int(e)))
    return m


def _down(m: Image.Image, w: int, h: int) -> np.ndarray:
    """Downsample a supersampled mask to float coverage in [0, 1]."""
    return np.asarray(m.resize((w, h), Image.Resampling.BOX), dtype=np.float64)[..., None] / 255.0


def render(scene: str, fg: str, bg: str, size: tuple[int, int], mode: str, n: int = 4,
           vertical: bool = True) -> Image.Image:
    """Draw one upright picture in the requested Pillow mode (RGBA: background transparent)."""
    w, h = size
    cov = _down(_mask(scene, w, h, n, vertical), w, h)
    f, b = np.array(COLORS[fg], np.float64), np.array(COLORS[bg], np.float64)
    rgb = (b if mode != "RGBA" else f) * (1 - cov) + f * cov
    if scene == "smiley":
        feat = _down(_smiley_features(w, h), w, h)
        rgb = rgb * (1 - feat) + np.array(COLORS["black"], np.float64) * feat
    img = Image.fromarray(np.clip(rgb.round(), 0, 255).astype(np.uint8), "RGB")
    if mode == "RGBA":
        img.putalpha(Image.fromarray((cov[..., 0] * 255).round().astype(np.uint8), "L"))
        return img
    if mode == "P":
        return img.quantize(colors=16, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    return img.convert(mode)


def encode(img: Image.Image, fmt: str, orientation: int | None = None) -> bytes:
    """Encode with fixed options (no timestamps, no optimisation passes) for reproducible bytes."""
    buf = io.BytesIO()
    if fmt == "jpeg":
        kw = {"quality": 85, "optimize": False, "progressive": False}
        if img.mode == "RGB":
            kw["subsampling"] = 2
        if orientation:
            exif = Image.Exif()
            exif[_ORIENTATION_TAG] = orientation
            kw["exif"] = exif.tobytes()
        img.save(buf, "JPEG", **kw)
    else:
        img.save(buf, "PNG", optimize=False, compress_level=9)
    return buf.getvalue()


def _shade(color: str) -> str:
    """Describe a colour's brightness in a grayscale picture."""
    y = _luma(color)
    return "white" if y > 220 else "light gray" if y > 150 else "gray" if y > 90 else "dark gray" if y > 40 else "black"


def _luma(color: str) -> float:
    """Rec. 601 luma of a named colour."""
    return float(np.dot(COLORS[color], (0.299, 0.587, 0.114)))


def _pairs() -> list[tuple[str, str]]:
    """(fg, bg) colour pairs with enough contrast to stay distinct in grayscale too."""
    return [(a, b) for a in COLORS for b in COLORS
            if a != b and abs(_luma(a) - _luma(b)) >= 60 and _shade(a) != _shade(b)]


def _a(word: str) -> str:
    """English indefinite article for ``word``."""
    return "an" if word[0] in "aeiou" else "a"


def _caption(scene: str, fg: str, bg: str, mode: str, vertical: bool) -> str:
    """Human description of a rendered picture."""
    if mode == "L":
        fg, bg = _shade(fg), _shade(bg)
    back = "a transparent background" if mode == "RGBA" else f"{_a(bg)} {bg} background"
    if scene == "stripes":
        text = f"{fg} {'vertical' if vertical else 'horizontal'} stripes on {back}"
    elif scene == "checkerboard":
        text = f"{_a(fg)} {fg} checkerboard pattern on {back}"
    elif scene == "gradient":
        text = f"a left-to-right gradient from {bg} to {fg}" if mode != "RGBA" else f"{fg} fading in from transparent"
    elif scene == "smiley":
        text = f"{_a(fg)} {fg} smiley face on {back}"
    elif scene == "arrow":
        text = f"{_a(fg)} {fg} arrow pointing up on {back}"
    else:
        text = f"{_a(fg)} {fg} {scene} on {back}"
    return text + (" (grayscale)" if mode == "L" else "")


def _one(image_id: int, seed: int) -> dict:
    """Build one image row."""
    rng = _rng(seed, image_id)
    orientation = _EXIF_IDS.get(image_id % 16)
    scene = "arrow" if orientation else SCENES[int(rng.integers(len(SCENES)))]
    pairs = _pairs()
    fg, bg = pairs[int(rng.integers(len(pairs)))]
    size = SIZES[int(rng.integers(len(SIZES)))]
    fmt, mode = ("jpeg", "RGB") if orientation else KINDS[int(rng.choice(len(KINDS), p=_KIND_P))]
    n, vertical = int(rng.integers(3, 7)), bool(rng.random() < 0.5)
    img = render(scene, fg, bg, size, mode, n, vertical)
    caption = _caption(scene, fg, bg, mode, vertical)
    if orientation:
        img = img.transpose(_STORE_ROTATION[orientation])
        caption += f" (stored rotated, EXIF orientation {orientation})"
    return {"image_id": image_id, "image": encode(img, fmt, orientation), "format": fmt,
            "label": scene, "caption": caption, "width": img.width, "height": img.height}


def image_rows(start_id: int, count: int, seed: int) -> list[dict]:
    """Rows ``image_id = start_id .. start_id+count-1`` with encoded pictures and captions."""
    return [_one(i, seed) for i in range(start_id, start_id + count)]


def _invert(img: Image.Image) -> Image.Image:
    """Invert colours, keeping alpha and the palette mode."""
    if img.mode == "RGBA":
        r, g, b, a = img.split()
        out = ImageOps.invert(Image.merge("RGB", (r, g, b)))
        out.putalpha(a)
        return out
    if img.mode == "P":
        out = ImageOps.invert(img.convert("RGB"))
        return out.quantize(colors=16, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    return ImageOps.invert(img)


def mutate_image_row(row: dict, seed: int) -> dict:
    """Return a copy with the same image_id whose picture is shrunk or colour-inverted."""
    rng = _rng(seed, row["image_id"], salt=_SALT + 1)
    src = Image.open(io.BytesIO(row["image"]))
    orientation = src.getexif().get(_ORIENTATION_TAG)
    if rng.random() < 0.5:
        w, h = max(16, src.width * 3 // 4), max(16, src.height * 3 // 4)
        img, note = src.resize((w, h), Image.Resampling.LANCZOS), f"shrunk to {w}x{h}"
    else:
        img, note = _invert(src.copy()), "colours inverted"
    data = encode(img, row["format"], orientation)
    return {**row, "image": data, "caption": f"{row['caption']}, {note}", "width": img.width, "height": img.height}

"""One-line previews of stored values for tables in the terminal, decoded only where it is cheap:
text truncated, token count and first ids, binary as size and format (from its magic bytes; an
image's size and mode from its header), a trajectory as its length and return. Shared by
`dsinspect replay` (cli) and the replay screen (tui)."""

from __future__ import annotations

import io
import json
import math
from typing import Any

from rich.cells import cell_len

from dsinspect.inspect.cells import clip
from dsinspect.inspect.sizes import human_bytes
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.format.roles import Role

__all__ = ["preview", "sniff_format"]

WIDTH = 48
_MAGIC = [
    (0, b"\x89PNG\r\n\x1a\n", "PNG"), (0, b"\xff\xd8\xff", "JPEG"), (0, b"GIF87a", "GIF"), (0, b"GIF89a", "GIF"),
    (0, b"BM", "BMP"), (0, b"II*\x00", "TIFF"), (0, b"MM\x00*", "TIFF"), (0, b"\x1aE\xdf\xa3", "WebM/MKV"),
    (0, b"OggS", "Ogg"), (0, b"fLaC", "FLAC"), (0, b"ID3", "MP3"), (0, b"%PDF", "PDF"), (0, b"PK\x03\x04", "ZIP"),
    (0, b"\x1f\x8b", "gzip"), (0, b"(\xb5/\xfd", "zstd"), (0, b"PAR1", "Parquet"), (0, b"\x93NUMPY", "NPY"),
    (0, b"ARROW1", "Arrow"), (4, b"ftyp", "MP4"),
]


def preview(value: Any, field: Field | None = None, width: int = WIDTH) -> str:
    """A one-line, human-sized summary of one stored value."""
    if value is None:
        return "null"
    role = field.role if field is not None else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _binary(bytes(value), role)
    if role is Role.TOKENS or (isinstance(value, list) and value and all(isinstance(v, int) for v in value[:8])):
        return _tokens(value, width)
    if role is Role.TRAJECTORY and isinstance(value, dict):
        return _trajectory(value)
    if isinstance(value, str):
        if role is Role.JSON:
            value = _compact_json(value)
        return _truncate(repr(value)[1:-1], width, len(value))
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return _truncate("{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}", width)
    if isinstance(value, list):
        return _truncate(f"[{len(value)}] " + ", ".join(_short(v) for v in value[:6]), width)
    return _truncate(str(value), width)


def sniff_format(data: bytes) -> str | None:
    """The file format its first bytes announce, or None."""
    for offset, magic, name in _MAGIC:
        if data[offset:offset + len(magic)] == magic:
            if name == "MP4" and data[8:12] == b"qt  ":
                return "MOV"
            return name
    if data[:4] == b"RIFF" and data[8:12] in (b"WEBP", b"WAVE", b"AVI "):
        return data[8:12].decode().strip()
    if data[:1] in (b"{", b"["):
        return "JSON?"
    return None


def _binary(data: bytes, role: Role | None) -> str:
    kind = sniff_format(data) or "binary"
    text = f"{human_bytes(len(data))} {kind}"
    if role is Role.IMAGE or kind in ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP"):
        dims = _image_header(data)
        if dims:
            text += f" {dims}"
    return text


def _image_header(data: bytes) -> str | None:
    """WxH mode from the image header alone (Pillow opens lazily: no pixel decoding)."""
    try:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            return f"{img.size[0]}x{img.size[1]} {img.mode}"
    except Exception:  # noqa: BLE001 - a preview never fails on bad bytes
        return None


def _tokens(ids: list, width: int) -> str:
    head = ", ".join(str(i) for i in ids[:8])
    return _truncate(f"{len(ids)} tokens [{head}{', …' if len(ids) > 8 else ''}]", width)


def _trajectory(value: dict) -> str:
    steps = next((len(v) for v in value.values() if isinstance(v, list)), None)
    rewards = value.get("reward", value.get("rewards"))
    text = f"{steps} steps" if steps is not None else "trajectory"
    if isinstance(rewards, list):
        total = sum(r for r in rewards if r is not None)
        text += f", return {total:.4g}" if math.isfinite(total) else ", return n/a"
    return text


def _compact_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return text


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return f"[{len(value)}]" if isinstance(value, list) else "{…}"
    return str(value)


def _truncate(text: str, width: int, chars: int | None = None) -> str:
    """`text` on one line, cut to `width` terminal cells (wide CJK characters count two), keeping at least
    8 cells of it; `chars`, the value's length, is then named."""
    suffix = f" … ({chars} chars)" if chars is not None else "…"
    return clip(text.replace("\n", "\\n"), width, suffix=suffix, measure=cell_len, min_room=8)

"""Paged hex dumps: offsets, hex bytes and an ASCII column, one page at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HexLine", "HexPage", "hex_page", "PAGE_SIZE", "WIDTH", "NARROW_WIDTH"]

PAGE_SIZE = 256
WIDTH = 16         # bytes a line shows
NARROW_WIDTH = 8   # where 16 do not fit (an 80-column terminal's side pane): lines never wrap
_ASCII = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in range(256))


@dataclass(frozen=True)
class HexLine:
    offset: int
    hex: str    # "89 50 4e 47 0d 0a 1a 0a  00 00 00 0d 49 48 44 52" (a gap after 8 bytes)
    ascii: str  # printable ASCII, "." for the rest

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "hex": self.hex, "ascii": self.ascii}


@dataclass(frozen=True)
class HexPage:
    """Page `page` (0-based) of `pages`; `offset` is the first byte shown, `total` the whole size."""

    page: int
    pages: int
    page_size: int
    offset: int
    total: int
    lines: tuple[HexLine, ...]

    def to_json(self) -> dict[str, Any]:
        return {"page": self.page, "pages": self.pages, "page_size": self.page_size, "offset": self.offset,
                "total": self.total, "lines": [line.to_json() for line in self.lines]}


def hex_page(data: bytes, page: int = 0, page_size: int = PAGE_SIZE, width: int = WIDTH) -> HexPage:
    """One page of `data` as hex lines of `width` bytes; `page` is clamped into range, negative counts
    from the end."""
    page_size = max(width, page_size - page_size % width)
    pages = max(1, -(-len(data) // page_size))
    page = min(max(page + pages if page < 0 else page, 0), pages - 1)
    start = page * page_size
    chunk = bytes(data[start:start + page_size])
    lines = tuple(_line(start + i, chunk[i:i + width]) for i in range(0, len(chunk), width))
    return HexPage(page, pages, page_size, start, len(data), lines)


def _line(offset: int, row: bytes) -> HexLine:
    left, right = row[:8].hex(" "), row[8:].hex(" ")  # a gap after each 8 bytes
    text = f"{left}  {right}" if right else left
    return HexLine(offset, text, "".join(_ASCII[b] for b in row))

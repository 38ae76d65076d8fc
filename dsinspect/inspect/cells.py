"""A stored value as the text of one table cell: one line, at most a given width, "…" where it was cut.

One formatter for every face; a face differs only by the CellStyle it passes: the TUI's narrow sample
table (NARROW: keys of a struct, list heads separated by spaces, whitespace folded) and the browser's
wider tables (WIDE: struct values, list heads separated by commas). `clip` is the one cutting rule,
also under the terminal previews of `dsinspect.term.preview`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.inspect.floats import has_narrow_floats, narrow

__all__ = ["CellStyle", "NARROW", "WIDE", "cell", "column_cells", "clip", "repr_line"]


@dataclass(frozen=True)
class CellStyle:
    """How a face writes values into its table cells."""

    width: int          # longest cell, "…" included (a size of bytes is never cut)
    items: int          # list items shown after the list's length
    sep: str            # between list items, and between a struct's entries
    more: str           # after the items when a list has more
    values: bool        # a struct shows `key: value` (a list value as `key: [n]`); else `key` (`key:n`)
    fold: bool          # runs of whitespace (newlines included) become one space


NARROW = CellStyle(width=24, items=6, sep=" ", more="", values=False, fold=True)      # the TUI's sample table
WIDE = CellStyle(width=80, items=8, sep=", ", more=", …", values=True, fold=False)    # the web app's tables


def cell(value: Any, style: CellStyle = WIDE) -> str:
    """One cell for any value (as `.as_py()` gives it, or an Arrow scalar: then float32 numbers show
    their own digits): "null", a byte size, a list's length and head, a struct's entries, else its text."""
    if isinstance(value, pa.Scalar):
        value = _head(value.as_py(), value.type, style)
    if value is None:
        return "null"
    if isinstance(value, (bytes, bytearray)):
        return _size(len(value))
    if isinstance(value, list):
        return _list(value, style)
    if isinstance(value, dict):
        return _struct(value, style)
    return _text(str(value), style)


def column_cells(column: pa.Array | pa.ChunkedArray, style: CellStyle = NARROW) -> list[str]:
    """The cells of a whole column, chosen by its Arrow type; binary values are measured, never
    copied out (a page of images costs no pixel bytes)."""
    t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        if pa.types.is_fixed_size_binary(t):
            sizes = [t.byte_width if ok else None for ok in column.is_valid().to_pylist()]
        else:
            sizes = pc.binary_length(column).to_pylist()
        return ["null" if n is None else _size(n) for n in sizes]
    values = [_head(v, t, style) for v in column.to_pylist()] if has_narrow_floats(t) else column.to_pylist()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ["null" if v is None else _list(v, style) for v in values]
    if pa.types.is_struct(t):
        return ["null" if v is None else _struct(v, style) for v in values]
    return ["null" if v is None else _text(str(v), style) for v in values]


def _head(value: Any, t: pa.DataType, style: CellStyle) -> Any:
    """`value` with the float32/float16 numbers a cell shows marked (floats.py): a list's head, a
    struct's own fields."""
    if isinstance(value, list) and (pa.types.is_list(t) or pa.types.is_large_list(t)
                                    or pa.types.is_fixed_size_list(t)):
        return narrow(value[:style.items], t) + value[style.items:]
    return narrow(value, t, shallow=True)


def clip(text: str, width: int, *, suffix: str = "…", measure: Callable[[str], int] = len, min_room: int = 0) -> str:
    """`text` if it fits in `width`, else its head and `suffix` in `width` (`measure` counts: `len` for
    characters, a terminal's cell width for wide characters); at least `min_room` of the head stays."""
    if measure(text) <= width:
        return text
    room = max(min_room, width - measure(suffix))
    if measure is len:
        return text[:max(room, 0)] + suffix
    kept = []
    for ch in text:
        room -= measure(ch)
        if room < 0:
            break
        kept.append(ch)
    return "".join(kept) + suffix


def repr_line(value: Any, width: int = 200) -> str:
    """A Python object's repr on one line, cut to `width`: what a message says a transform returned."""
    return clip(repr(value).replace("\n", " "), width)


def _size(n: int) -> str:
    return f"<{n:,} bytes>"


def _list(value: list, style: CellStyle) -> str:
    head = style.sep.join(str(v) for v in value[:style.items])
    return _text(f"[{len(value)}] {head}" + (style.more if len(value) > style.items else ""), style)


def _struct(value: dict, style: CellStyle) -> str:
    if style.values:
        entries = [f"{k}: [{len(v)}]" if isinstance(v, list) else f"{k}: {v}" for k, v in value.items()]
    else:
        entries = [f"{k}:{len(v)}" if isinstance(v, list) else str(k) for k, v in value.items()]
    return _text("{" + style.sep.join(entries) + "}", style)


def _text(text: str, style: CellStyle) -> str:
    return clip(" ".join(text.split()) if style.fold else text, style.width)

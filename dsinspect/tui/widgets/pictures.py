"""Pictures in the terminal: textual-image (Sixel / Kitty graphics where the terminal has them,
half-blocks otherwise); without textual-image, half-blocks drawn by rich."""

from __future__ import annotations

from PIL import Image
from rich.text import Text
from textual.widget import Widget
from textual.widgets import Static

__all__ = ["Picture", "picture", "set_picture", "half_block_text", "use_half_blocks", "BACKEND"]

try:  # must be imported before the app starts: it queries the terminal for graphics support
    from textual_image.renderable import Image as _AutoRenderable
    from textual_image.renderable.unicode import Image as _UnicodeRenderable
    from textual_image.widget import HalfcellImage as _Halfcell
    from textual_image.widget import Image as _Auto
    # without a TTY textual-image falls back to coarse Unicode shading; half-blocks read better
    _Widget: type[Widget] | None = _Halfcell if _AutoRenderable is _UnicodeRenderable else _Auto
    BACKEND = "textual-image"
except ImportError:  # optional: half-blocks through rich
    _Halfcell = _Widget = None
    BACKEND = "half-blocks"


def use_half_blocks() -> None:
    """Draw pictures as half-block cells whatever graphics the terminal offers: the same cells in
    every terminal (snapshot tests), or a way out when a terminal claims graphics it lacks."""
    global _Widget
    _Widget = _Halfcell


MAX_COLS, MAX_ROWS = 96, 24


class Picture(Static):
    """A picture drawn with rich half-blocks (the fallback when textual-image is missing)."""

    def __init__(self, image: Image.Image, **kwargs) -> None:
        super().__init__(**kwargs)
        self.set_image(image)

    def set_image(self, image: Image.Image) -> None:
        self.update(half_block_text(image))


def half_block_text(image: Image.Image) -> Text:
    """`image` as rows of ▀ cells, at most MAX_COLS x MAX_ROWS."""
    from dsinspect.inspect import fit_pixels
    from dsinspect.term import half_blocks

    return half_blocks(fit_pixels(image, min(MAX_COLS, image.width), 2 * MAX_ROWS))


def _size(image: Image.Image, max_rows: int = MAX_ROWS) -> tuple[int, int]:
    """Cells for an image: at most MAX_COLS x `max_rows` (≤ MAX_ROWS), aspect kept (a cell is about
    twice as tall as wide)."""
    most = max(1, min(MAX_ROWS, max_rows))
    cols = min(MAX_COLS, max(1, image.width // 2 if image.width > 2 * MAX_COLS else image.width))
    rows = max(1, round(cols * image.height / image.width / 2))
    if rows > most:
        rows, cols = most, max(1, round(most * 2 * image.width / image.height))
    return cols, rows


def picture(image: Image.Image, id: str | None = None, max_rows: int = MAX_ROWS) -> Widget:
    """A widget showing `image` whole in at most `max_rows` rows (the room its pane has);
    `set_picture(widget, image)` replaces it (video frame stepping)."""
    if _Widget is None:
        return Picture(image, id=id, classes="picture")
    widget = _Widget(image, id=id, classes="picture")
    cols, rows = _size(image, max_rows)
    widget.styles.width, widget.styles.height = cols, rows
    return widget


def set_picture(widget: Widget, image: Image.Image) -> None:
    if isinstance(widget, Picture):
        widget.set_image(image)
    else:
        widget.image = image  # type: ignore[attr-defined]

"""One field of a sample, decoded: prepared off the UI thread (`prepare`), then drawn by `FieldView`."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

from PIL import Image as PILImage
from rich.console import Group, RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from dsinspect.inspect import ErrorView, FieldInfo, FrameView, ImageView, Sample, StepRow, TokensView, VideoView, View
from dsinspect.inspect.hexdump import NARROW_WIDTH, WIDTH
from dsinspect.inspect.trajectory import TrajectoryView
from dsinspect.term import Options, findings_text, hex_panel, render_view
from dsinspect.tui.widgets.pictures import MAX_ROWS, picture
from dsinspect.tui.widgets.step_table import StepTable, step_rows
from dsinspect.tui.widgets.token_strip import TokenStrip
from dsinspect.tui.widgets.video_player import FRAME_SIDE, VideoPlayer

__all__ = ["Prepared", "prepare", "FieldView", "hashes_renderable", "hex_renderable", "short_type"]

_IMAGE_HEAD_ROWS = 3  # the field's title, the image's format line and a findings line
HEX_COLUMNS = 82  # a 16-byte line: offset 10, hex 49, ASCII 2 + 16 + 1, the panel's border and padding 4


@dataclass
class Prepared:
    """Everything needed to draw one field without further decoding on the UI thread."""

    info: FieldInfo
    view: View
    body: RenderableType | None = None
    image: PILImage.Image | None = None
    first_frame: FrameView | ErrorView | None = None
    steps: list[StepRow] | None = None  # every step of a trajectory


def prepare(sample: Sample, name: str, width: int = 90) -> Prepared:
    """Decode field `name` (slow for video: run it in a worker)."""
    info = sample.field(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
        view = sample.view(name)
        out = Prepared(info, view)
        if isinstance(view, ImageView):
            out.image = view.image()
            out.body = _image_head(view)
        elif isinstance(view, VideoView):
            out.first_frame = view.frame(0, max_side=FRAME_SIDE) if view.frame_count else None
        elif isinstance(view, TrajectoryView):
            out.steps = step_rows(view)
        elif not isinstance(view, TokensView):
            out.body = render_view(view, Options(width=width))
    return out


def _image_head(view: ImageView) -> RenderableType:
    head = Text(f"{view.format} {view.width}x{view.height} {view.mode} · {view.byte_size:,} bytes"
                + (f" · {view.frames} frames" if view.frames > 1 else "")
                + (f" · EXIF orientation {view.orientation}" if view.orientation not in (None, 1) else ""), "bold")
    return Group(head, findings_text(view.findings)) if view.findings else head


def hashes_renderable(sample: Sample, name: str) -> RenderableType:
    """The field's hash and the row's hash (shown whether or not the hex is)."""
    info = sample.field(name)
    return Text.assemble(("field hash (xxh3-128) ", "dim"), (info.hash, "bold"), "\n",
                         ("row hash ", "dim"), (sample.row_hash.stored or "(none)", "bold"),
                         ("  ✓ matches", "green") if sample.row_hash.ok else ("  ✗ MISMATCH", "bold red"))


def hex_renderable(sample: Sample, name: str, page: int = 0, columns: int = 200) -> RenderableType:
    """Hex dumps of the field's raw (and, when different, canonical) bytes: what `x` hides; 16 bytes a
    line where `columns` fit them, else 8, so a line never wraps."""
    info = sample.field(name)
    width = WIDTH if columns >= HEX_COLUMNS else NARROW_WIDTH
    parts: list[Any] = []
    if not info.raw_is_canonical and not info.null:
        parts.append(hex_panel(sample.hex(name, page, width=width), f"raw bytes ({info.size:,})"))
    parts.append(hex_panel(sample.hex(name, page, canonical=True, width=width),
                           f"canonical bytes ({info.canonical_size:,})"))
    return Group(*parts)


def short_type(arrow_type: str) -> str:
    """An Arrow type as a title shows it, on one line: `list<item: float>` as `list<float>` (the
    schema tab has the whole type)."""
    return re.sub(r"\b(item|element): ", "", str(arrow_type))


class FieldView(Vertical):
    """The decoded view of one field: a token strip, a picture, a video player, or a rich rendering."""

    DEFAULT_CSS = """
    FieldView { height: auto; }
    FieldView .field-title { text-style: bold; background: $panel; width: 100%; text-wrap: nowrap;
                             text-overflow: ellipsis; }
    """

    def __init__(self, prepared: Prepared, rows: int = MAX_ROWS + _IMAGE_HEAD_ROWS, **kwargs) -> None:
        super().__init__(**kwargs)
        self.prepared = prepared
        self.rows = rows  # the room the pane has: a picture is scaled to be seen whole

    def compose(self) -> ComposeResult:
        p, info = self.prepared, self.prepared.info
        yield Static(f"{info.name} · {info.role} · {short_type(info.type)}" + (" · null" if info.null else ""),
                     classes="field-title", markup=False)
        view = p.view
        if isinstance(view, TokensView):
            yield TokenStrip(view, id="token-strip")
            if view.findings:
                yield Static(findings_text(view.findings))
            yield Static(Text.assemble(("decoded: ", "dim"), view.text[:4000]), classes="decoded-text")
        elif isinstance(view, VideoView) and p.first_frame is not None:
            if view.findings:
                yield Static(findings_text(view.findings))
            yield VideoPlayer(view, p.first_frame, id="video-player")
        elif isinstance(view, TrajectoryView) and p.steps is not None:
            yield StepTable(view, p.steps, id="step-table")
        else:
            if p.body is not None:
                yield Static(p.body, classes="view-body")
            if p.image is not None:
                yield picture(p.image, id="image-picture", max_rows=self.rows - _IMAGE_HEAD_ROWS)
        if isinstance(view, ErrorView):
            self.add_class("broken")

"""One sequence of a replayed packed batch: its whole decoded text (documents in alternating styles,
` │ ` between them, padding dim) and its segments, each document openable in the sample view."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from dsinspect.inspect.packed import short_address
from dsinspect.term import clean
from dsinspect.tui.messages import OpenAddress
from dsinspect.tui.widgets.key_footer import KeyFooter
from dsinspect.tui.widgets.packed_batch import (
    DAMAGED,
    DOCUMENT_STYLES,
    MASKED,
    SequenceView,
    sequence_text,
)

__all__ = ["PackedSequenceScreen"]

SEGMENT_COLUMNS = ("#", "document", "tokens [start, stop)", "at", "count", "verified", "text")
_SEGMENT_TEXT = 60  # characters of a segment's text in its row (the whole text is above)


class PackedSequenceScreen(Screen):
    """Enter on a segment opens its document (dataset@version:index) in the sample view; Escape goes back."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, view: SequenceView, step: int) -> None:
        super().__init__()
        self.view, self.step = view, step

    def compose(self) -> ComposeResult:
        v = self.view
        yield Header()
        held = f"{v.width - v.pad} from {len(v.segments)} document(s) + {v.pad} padding (masked from the loss)" \
            if v.pad else f"all from {len(v.segments)} document(s)"
        summary = Text(f"step {self.step} · rank {v.rank} · slot {v.slot} · sequence {v.name} · {v.width} tokens: "
                       f"{held}\ndigest {v.digest}")
        if v.padding:
            summary.append("\na padding repeat filling the epoch's last batch: every token masked from the loss",
                           MASKED)
        if v.damaged:
            summary.append(f"\n{len(v.damaged)} document(s) no longer hash to their stored row hash", DAMAGED)
        yield Static(summary, id="packed-summary")
        yield DataTable(id="packed-segments", cursor_type="row", zebra_stripes=True)
        yield VerticalScroll(Static(sequence_text(v), id="packed-text"), id="packed-text-pane")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "packed sequence"
        table = self.query_one("#packed-segments", DataTable)
        table.add_columns(*SEGMENT_COLUMNS)
        for n, (g, text) in enumerate(zip(self.view.segments, self.view.texts)):
            damaged = g.address in self.view.damaged
            style = DAMAGED if damaged else DOCUMENT_STYLES[n % 2]
            preview = text.replace("\n", "↵")
            preview = preview if len(preview) <= _SEGMENT_TEXT else preview[:_SEGMENT_TEXT - 1] + "…"
            table.add_row(str(n), Text(short_address(g.address), style), f"[{g.start}, {g.stop})", str(g.offset),
                          str(g.stop - g.start), Text("✗ damaged", DAMAGED) if damaged else "✓",
                          Text(clean(preview), style), key=str(n))
        table.focus()

    @on(DataTable.RowSelected, "#packed-segments")
    def _open(self, event: DataTable.RowSelected) -> None:
        self.post_message(OpenAddress(self.view.segments[int(event.row_key.value)].address))


"""One changed row: each changed field's view before and after, side by side."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Label, Static

from dsinspect.tui.field_view import FieldView, prepare
from dsinspect.tui.key_footer import KeyFooter
from dsinspect.tui.messages import LoadFailed

__all__ = ["RowDiffScreen"]


class RowDiffScreen(Screen):
    """`a`/`b` are sample addresses (None for an added or removed row); `fields` the changed ones
    (all fields when empty)."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, a: str | None, b: str | None, fields: list[str]) -> None:
        super().__init__()
        self.a, self.b, self.fields = a, b, fields

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"before {self.a or '(absent)'}   →   after {self.b or '(absent)'}", id="rowdiff-summary")
        with Horizontal():
            with VerticalScroll(id="before"):
                yield Label(f"before · {self.a or 'absent'}", classes="pane-title")
            with VerticalScroll(id="after"):
                yield Label(f"after · {self.b or 'absent'}", classes="pane-title")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "row diff"
        self.load()

    @work(thread=True, exclusive=True, group="rowdiff")
    def load(self) -> None:
        try:
            sides = [self._side(address) for address in (self.a, self.b)]
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not open the changed row: {e}"))
            return
        self.app.call_from_thread(self.show, sides)

    def _side(self, address: str | None) -> list[Any]:
        if address is None:
            return []
        sample = self.app.source.sample(address)
        names = self.fields or [f.name for f in sample.fields]
        return [prepare(sample, name, width=56) for name in names if name in {f.name for f in sample.fields}]

    def show(self, sides: list[list[Any]]) -> None:
        for pane_id, prepared in zip(("#before", "#after"), sides):
            pane = self.query_one(pane_id)
            pane.mount_all([FieldView(p) for p in prepared] or [Static("(the row is absent on this side)")])

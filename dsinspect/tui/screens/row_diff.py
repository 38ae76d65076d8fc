"""One changed row: each changed field's view before and after, side by side; under them, for an
image changed in place, where the two differ (upright, as both are drawn: inspect/image_diff.py)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Label, Static

from dsinspect.tui.messages import LoadFailed
from dsinspect.tui.widgets.field_view import FieldView, prepare
from dsinspect.tui.widgets.key_footer import KeyFooter

__all__ = ["RowDiffScreen"]


class RowDiffScreen(Screen):
    """`a`/`b` are sample addresses (None for an added or removed row); `fields` the changed ones
    (all fields when empty); `details` the diff's per-field changes, said above both sides with the
    changed text or token stretch marked as the diff list marks it."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, a: str | None, b: str | None, fields: list[str], details: dict | None = None) -> None:
        super().__init__()
        self.a, self.b, self.fields, self.details = a, b, fields, details or {}

    def compose(self) -> ComposeResult:
        from dsinspect.term.changes import what_changed

        yield Header()
        summary = Text(f"before {self.a or '(absent)'}   →   after {self.b or '(absent)'}")
        if self.details:
            summary.append("\n").append_text(what_changed(self.details))
        yield Static(summary, id="rowdiff-summary")
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
            samples = [self.app.source.sample(a) if a is not None else None for a in (self.a, self.b)]
            sides = [self._side(sample) for sample in samples]
            differences = self._differences(*samples)
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not open the changed row: {e}"))
            return
        self.app.call_from_thread(self.show, sides, differences)

    def _names(self, sample: Any) -> list[str]:
        have = [f.name for f in sample.fields]
        return [name for name in (self.fields or have) if name in have]

    def _side(self, sample: Any) -> list[Any]:
        return [] if sample is None else [prepare(sample, name, width=56) for name in self._names(sample)]

    def _differences(self, a: Any, b: Any) -> list[tuple[str, Any]]:
        """(field, the difference figure) of each image field both sides hold and whose pictures agree in size."""
        from dsinspect.inspect.image_diff import difference_image
        from dsinspect.loaders.format.roles import Role

        if a is None or b is None:
            return []
        out = []
        for name in self._names(a):
            if a.version.manifest.field(name).role is Role.IMAGE and name in {f.name for f in b.fields}:
                before, after = a.value(name), b.value(name)
                if isinstance(before, bytes) and isinstance(after, bytes):
                    figure = difference_image(before, after)
                    if figure is not None:
                        out.append((name, figure))
        return out

    def show(self, sides: list[list[Any]], differences: list[tuple[str, Any]] = ()) -> None:
        from dsinspect.tui.widgets.pictures import picture

        for pane_id, prepared in zip(("#before", "#after"), sides):
            pane = self.query_one(pane_id)
            pane.mount_all([FieldView(p) for p in prepared] or [Static("(the row is absent on this side)")])
        for name, figure in differences:  # under the "after" side: where it differs from "before"
            pane = self.query_one("#after")
            pane.mount(Label(f"{name}: where before and after differ (white: the largest difference)",
                             classes="pane-title difference-title"))
            pane.mount(picture(figure))

"""The diff prompt: two addresses NAME[@REF]; dismisses with the pair, or None on escape."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from dsinspect.errors import UserError
from dsinspect.loaders.store.address import parse_address

__all__ = ["DiffPrompt"]


class DiffPrompt(ModalScreen[tuple[str, str] | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, a: str = "", b: str = "") -> None:
        super().__init__()
        self.a, self.b = a, b

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-box"):
            yield Label("Diff two versions  NAME[@REF]   e.g. demo-text@v1 → demo-text@v2")
            yield Input(self.a, placeholder="before: demo-text@v1", id="diff-a")
            yield Input(self.b, placeholder="after: demo-text@v2", id="diff-b")
            yield Label("", id="diff-error")

    @on(Input.Submitted, "#diff-a")
    def _next(self) -> None:
        self.query_one("#diff-b", Input).focus()

    @on(Input.Submitted, "#diff-b")
    def _submitted(self) -> None:
        a, b = (self.query_one(f"#diff-{s}", Input).value.strip() for s in "ab")
        try:
            parse_address(a), parse_address(b)
        except UserError as e:
            self.query_one("#diff-error", Label).update(f"[red]{e}[/red]")
            return
        self.dismiss((a, b))

    def action_cancel(self) -> None:
        self.dismiss(None)

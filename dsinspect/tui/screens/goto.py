"""The go-to-address prompt: any NAME[@REF][:INDEX]; a malformed address is refused in place."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from dsinspect.errors import UserError
from dsinspect.loaders.store.address import parse_address

__all__ = ["GoToScreen"]


class GoToScreen(ModalScreen[str | None]):
    """Dismisses with the address typed, or None on escape."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, value: str = "", title: str = "Go to address  NAME[@REF][:INDEX]   e.g. demo-text@v1:17"):
        super().__init__()
        self.value, self.title = value, title

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-box"):
            yield Label(self.title, markup=False)
            yield Input(self.value, placeholder="demo-text@v1:17", id="goto-input")
            yield Label("", id="goto-error")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        try:
            parse_address(text)
        except UserError as e:
            self.query_one("#goto-error", Label).update(Text(str(e), style="red"))  # the address typed: text
            return
        self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)

"""The diff prompt: two addresses NAME[@REF]; dismisses with the pair, or None on escape."""

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
        if self._check("a") is not None:
            self.query_one("#diff-b", Input).focus()

    @on(Input.Submitted, "#diff-b")
    def _submitted(self) -> None:
        a = self._check("a")
        b = self._check("b") if a is not None else None  # one reason at a time: the first missing
        if a is not None and b is not None:
            self.dismiss((a, b))

    def _check(self, side: str) -> str | None:
        """The address typed in one field, or None with the reason said in the prompt and that field
        focused (Enter on an empty field moved on without a word)."""
        box = self.query_one(f"#diff-{side}", Input)
        text = box.value.strip()
        which = "before" if side == "a" else "after"
        try:
            if not text:
                raise UserError(f"type the version {which} the change, e.g. demo-text@{'v1' if side == 'a' else 'v2'}")
            parse_address(text)
        except UserError as e:
            self.query_one("#diff-error", Label).update(Text(f"{which}: {e}", style="red"))  # typed text: no markup
            box.focus()
            return None
        self.query_one("#diff-error", Label).update("")
        return text

    def action_cancel(self) -> None:
        self.dismiss(None)

"""Textual's footer, recomposed only when the keys it shows (or the room it has) change, and fitted
to narrow terminals.

The stock footer rebuilds its key widgets on every focus change and every screen switch; on the
reused sample screen that was two rebuilds per opened sample, most of the time to open one. It also
cuts whatever passes the right edge, which at 80 columns was the app's own keys (`c`, `D`, `R`,
`q`, drawn last). Here, when the keys do not fit, the footer goes compact (no padding, no palette
hint: `ctrl+p` is in the help) and drops the screen's keys from the last declared until the rest fit;
the app's keys and `escape` stay, and `?` lists every key.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

__all__ = ["KeyFooter"]

_PALETTE = 13  # cells the "^p palette" key takes, with its border


class KeyFooter(Footer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple | None = None
        self._width = 0

    def bindings_changed(self, screen: Screen) -> None:
        shown = (_shown_keys(screen), self.size.width)
        if shown == self._shown and self.children:
            return
        if screen.app.app_focus:  # the stock footer skips recomposing without focus: remember only real ones
            self._shown = shown
        super().bindings_changed(screen)

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._width:
            self._width = event.size.width
            self._shown = None
            self.call_after_refresh(self.recompose)

    def compose(self):
        keys = list(super().compose())
        room = self.size.width or self.app.size.width
        if sum(_width(k, compact=False) for k in keys) + _PALETTE <= room:
            self.compact = False
            yield from keys
            return
        self.compact = True
        keys = [k for k in keys if "-command-palette" not in k.classes]
        kept = {key for b in self.app.BINDINGS for key in b.key.split(",")} | {"escape"}
        while sum(_width(k, compact=True) for k in keys) > room:
            dropped = next((k for k in reversed(keys) if k.key not in kept), None)
            if dropped is None:
                break
            keys.remove(dropped)
        yield from keys


def _width(key: FooterKey, compact: bool) -> int:
    """Cells a footer key takes: key, description and padding (compact: a space and a margin)."""
    return cell_len(key.key_display) + cell_len(key.description) + 2 + (0 if compact else 1)


def _shown_keys(screen: Screen) -> tuple:
    """What the footer draws: each shown binding's key, label, action and whether it is enabled."""
    return tuple((b.key, b.description, b.action, enabled)
                 for _node, b, enabled, _tip in screen.active_bindings.values() if b.show)

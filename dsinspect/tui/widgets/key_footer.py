"""Textual's footer, recomposed only when the keys it shows change.

The stock footer rebuilds its key widgets on every focus change and every screen switch; on the
reused sample screen that was two rebuilds per opened sample, most of the time to open one.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer

__all__ = ["KeyFooter"]


class KeyFooter(Footer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple | None = None

    def bindings_changed(self, screen: Screen) -> None:
        shown = _shown_keys(screen)
        if shown == self._shown and self.children:
            return
        if screen.app.app_focus:  # the stock footer skips recomposing without focus: remember only real ones
            self._shown = shown
        super().bindings_changed(screen)


def _shown_keys(screen: Screen) -> tuple:
    """What the footer draws: each shown binding's key, label, action and whether it is enabled."""
    return tuple((b.key, b.description, b.action, enabled)
                 for _node, b, enabled, _tip in screen.active_bindings.values() if b.show)

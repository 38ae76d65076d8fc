"""A group of LLM rollouts (the responses to one prompt) side by side with their rewards and advantages,
one of them picked (left/right) to open; drawn through dsinspect.term.rollout, as `dsinspect show --group`."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from dsinspect.inspect.rollout_view import COLOR_BY, GroupView
from dsinspect.term.rollout import findings_lines, number, pick_color_by, render_group

__all__ = ["GroupColumns"]


class GroupColumns(Widget, can_focus=True):
    """The group's responses side by side; enter asks to open the picked one (`GroupColumns.Open`)."""

    DEFAULT_CSS = """
    GroupColumns { height: auto; padding: 0 1; }
    GroupColumns:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left", "pick(-1)", "Prev rollout"),
        Binding("right", "pick(1)", "Next rollout"),
        Binding("enter", "open", "Open rollout"),
    ]

    selected = reactive(0)
    color_by: reactive[str | None] = reactive(None)

    class Open(Message):
        """Open rollout `index` (a row of the version the group is in)."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, group: GroupView, color_by: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group = group
        chosen, self.note = pick_color_by(group, color_by)
        self.set_reactive(GroupColumns.color_by, chosen)

    def action_pick(self, delta: int) -> None:
        if self.group.rows:
            self.selected = (self.selected + delta) % len(self.group.rows)

    def action_open(self) -> None:
        if self.group.rows:
            self.post_message(self.Open(self.group.rows[self.selected].index))

    def cycle(self) -> str | None:
        """Colour by the next value the group's rollouts have; returns it."""
        have = [n for n in COLOR_BY if any(n in r.color_by for r in self.group.rows)]
        if have:
            self.color_by = have[(have.index(self.color_by) + 1) % len(have)] if self.color_by in have else have[0]
        self.note = None
        return self.color_by

    def render(self) -> RenderableType:
        width = max(40, self.size.width - 2)
        body = render_group(self.group, self.color_by, width, True, self.selected)
        if self.note:
            body = Group(Text(self.note, "yellow"), body)
        if not self.group.rows:
            return body
        row = self.group.rows[self.selected]
        picked = Text.assemble(("picked ", "dim"), (f"#{row.index}", "bold reverse"),
                               (f"  key {row.key}  reward {number(self.group.rewards[self.selected])}  advantage "
                                f"{number(self.group.advantages[self.selected])}", ""), ("  · enter opens it", "dim"))
        return Group(body, picked, findings_lines(row.findings))

"""The group of a rollout: all responses to its prompt side by side with rewards and advantages; enter
opens the one picked in the sample screen below."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from dsinspect.loaders.store.address import parse_address
from dsinspect.tui.messages import LoadFailed
from dsinspect.tui.widgets.key_footer import KeyFooter
from dsinspect.tui.widgets.rollout_group import GroupColumns

__all__ = ["RolloutGroupScreen", "GroupChoice"]


@dataclass(frozen=True)
class GroupChoice:
    """What the group screen hands back: the rollout to open (None: none) and the value picked to colour by."""

    index: int | None
    color_by: str | None


class RolloutGroupScreen(Screen[GroupChoice]):
    """`version` is NAME[@REF], `index` a rollout of it: its group is read in a worker. It is dismissed
    with a GroupChoice (escape: no rollout to open)."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("v", "color_by", "Colour by"),
    ]
    DEFAULT_CSS = """
    #group-summary { height: auto; padding: 0 1; background: $boost; }
    """

    def __init__(self, version: str, index: int, color_by: str | None = None) -> None:
        super().__init__()
        self.version, self.index, self.color_by = version, index, color_by
        self.group: Any = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"reading the group of {self.version}:{self.index}…"), id="group-summary")
        yield VerticalScroll(id="group-body")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = f"group of {self.version}:{self.index}"
        self.load()

    @work(thread=True, exclusive=True, group="rollout-group")
    def load(self) -> None:
        try:
            source = self.app.source
            group = source.rollout_group(source.version(parse_address(self.version)), self.index)
        except Exception as e:  # noqa: BLE001 - any read failure becomes a notification
            self.post_message(LoadFailed(f"could not read the group of {self.version}:{self.index}: {e}"))
            self.app.call_from_thread(self._failed, str(e))
            return
        self.app.call_from_thread(self.show_group, group)

    def _failed(self, reason: str) -> None:
        self.query_one("#group-summary", Static).update(Text(reason, "bold red"))

    async def show_group(self, group: Any) -> None:
        self.group = group
        self.query_one("#group-summary", Static).update(Text.assemble(
            ("group ", "dim"), (str(group.group), "bold"), f" of {self.version}: {group.size:,} rollouts",
            ("  ←/→ pick · enter open · v colour by", "dim")))
        columns = GroupColumns(group, self.color_by, id="group-columns")
        await self.query_one("#group-body").mount(columns)
        columns.focus()

    def action_color_by(self) -> None:
        shown = self.query(GroupColumns)
        if shown:
            self.color_by = shown.first().cycle()

    def action_back(self) -> None:
        self.dismiss(GroupChoice(None, self.color_by))

    @on(GroupColumns.Open)
    def _open(self, event: GroupColumns.Open) -> None:
        """Back to the sample screen below, which opens the rollout picked."""
        self.dismiss(GroupChoice(event.index, self.color_by))

"""A rollout of LLM RL data: prompt and response tokens coloured by the value picked, turns set apart, a
cursor whose token shows its id, piece, every value and its findings, and the rollout's findings. Drawn
through dsinspect.term.rollout, as `dsinspect show` draws it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from dsinspect.inspect.rollout_view import RolloutView, TokenCell, scale
from dsinspect.term.rollout import (
    cell_detail,
    findings_lines,
    legend_text,
    pick_color_by,
    summary_text,
    texts_text,
    tokens_text,
)

__all__ = ["ROLLOUT", "RolloutInfo", "PreparedRollout", "RolloutTokens", "RolloutPane", "next_color_by"]

ROLLOUT = "⟨rollout⟩"  # the sample screen's entry for the rollout view, listed above the fields


@dataclass(frozen=True)
class RolloutInfo:
    """What the sample screen needs of a shown entry: its name (the rollout view is no stored field)."""

    name: str = ROLLOUT


@dataclass
class PreparedRollout:
    """The rollout view built off the UI thread, or why it could not be."""

    view: RolloutView | None
    error: str | None = None
    info: RolloutInfo = field(default_factory=RolloutInfo)


def next_color_by(view: RolloutView, current: str | None) -> str | None:
    """The value after `current` among those the rollout has (round and round)."""
    have = view.color_by
    if not have:
        return None
    return have[(have.index(current) + 1) % len(have)] if current in have else have[0]


class RolloutTokens(Widget, can_focus=True):
    """The rollout's tokens with a cursor (left/right; `f` the next token with a finding)."""

    DEFAULT_CSS = """
    RolloutTokens { height: auto; padding: 0 1; }
    RolloutTokens:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left", "move(-1)", "Prev token"),
        Binding("right", "move(1)", "Next token"),
        Binding("f", "finding(1)", "Next finding"),
        Binding("F", "finding(-1)", "Prev finding", show=False),
    ]

    cursor = reactive(0)
    color_by: reactive[str | None] = reactive(None)

    def __init__(self, view: RolloutView, color_by: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.view = view
        self.cells: list[tuple[str, TokenCell]] = ([("prompt", c) for c in view.prompt]
                                                   + [("response", c) for c in view.response])
        chosen, self.note = pick_color_by(view, color_by)
        self.set_reactive(RolloutTokens.color_by, chosen)
        self.set_reactive(RolloutTokens.cursor, len(view.prompt) if view.response else 0)  # the first generated

    @property
    def current(self) -> tuple[str, TokenCell] | None:
        return self.cells[self.cursor] if self.cells else None

    def action_move(self, delta: int) -> None:
        if self.cells:
            self.cursor = max(0, min(len(self.cells) - 1, self.cursor + delta))

    def action_finding(self, delta: int) -> None:
        """The next (or previous) token with a finding, round the ends."""
        marked = [i for i, (_, c) in enumerate(self.cells) if c.findings]
        if not marked:
            self.notify("no token of this rollout has a finding", severity="information")
            return
        after = [i for i in marked if (i - self.cursor) * delta > 0]
        self.cursor = (min(after) if delta > 0 else max(after)) if after else (marked[0] if delta > 0 else marked[-1])

    def cycle(self) -> str | None:
        """Colour by the next value the rollout has; returns it."""
        self.color_by, self.note = next_color_by(self.view, self.color_by), None
        return self.color_by

    def render(self) -> RenderableType:
        v, chosen = self.view, self.color_by
        lo, hi = scale(v, chosen) if chosen else (0.0, 0.0)
        parts: list[RenderableType] = [summary_text(v), legend_text(chosen, lo, hi, self.note)]
        if self.cells:
            parts.append(tokens_text(v, chosen, lo, hi, True, self.cursor))
            part, cell = self.cells[self.cursor]
            parts.append(cell_detail(cell, part))
        else:
            parts.append(texts_text(v))
        parts += [Rule(style="dim"), findings_lines(v.findings)]
        return Group(*parts)


class RolloutPane(Vertical):
    """The rollout view in the sample screen's decoded pane: a title and the tokens (or why not)."""

    DEFAULT_CSS = """
    RolloutPane { height: auto; }
    RolloutPane .field-title { text-style: bold; background: $panel; width: 100%; }
    """

    def __init__(self, prepared: PreparedRollout, color_by: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prepared, self.color_by = prepared, color_by

    def compose(self) -> ComposeResult:
        yield Static("rollout · v colour by the next value · G the group side by side · f next finding",
                     classes="field-title", markup=False)
        if self.prepared.view is None:
            yield Static(Text(self.prepared.error or "no rollout view", "bold red"))
        else:
            yield RolloutTokens(self.prepared.view, self.color_by, id="rollout-tokens")

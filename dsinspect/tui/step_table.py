"""An RL episode: its summary, reward and return sparklines with a marker at the current step, and
every step in a scrolling table (up/down, page up/down, home/end reach any step of a long episode)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from dsinspect.inspect import StepRow
from dsinspect.inspect.trajectory import TrajectoryView
from dsinspect.term import clean, findings_text, sparkline

__all__ = ["StepTable", "step_rows", "STEP_COLUMNS"]

# widths fit the decoded pane of a 120-column terminal; the marker line shows the whole observation
STEP_COLUMNS = (("step", 4), ("observation", 26), ("action", 6), ("reward", 8), ("return", 8), ("terminated", 10),
                ("truncated", 9))
EXTRA_WIDTH = 14
SPARK_WIDTH = 64  # one line in the decoded pane from about 110 terminal columns up


def step_rows(view: TrajectoryView) -> list[StepRow]:
    """Every step of the episode (built in a worker: the table needs them all to scroll freely)."""
    return replace(view, page_size=max(1, view.length)).page(0).rows


class Steps(DataTable):
    """The step table: home / end go to the first / last step (DataTable scrolls sideways on them)."""

    BINDINGS = [
        Binding("home", "scroll_top", "First step", show=False),
        Binding("end", "scroll_bottom", "Last step", show=False),
    ]


class StepTable(Vertical):
    """`rows` are all the episode's steps; the highlighted one is marked under the sparklines."""

    DEFAULT_CSS = """
    StepTable { height: auto; }
    StepTable DataTable { height: auto; max-height: 12; }
    StepTable .step-marker { color: $accent; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, view: TrajectoryView, rows: list[StepRow], **kwargs) -> None:
        super().__init__(**kwargs)
        self.view, self.rows = view, rows
        self.spark_width = max(1, min(SPARK_WIDTH, view.length))

    def compose(self) -> ComposeResult:
        v = self.view
        ret = "?" if v.episode_return is None else f"{v.episode_return:.6g}"
        end = (f"terminated at step {v.terminated_at}" if v.terminated_at is not None
               else f"truncated at step {v.truncated_at}" if v.truncated_at is not None else "no terminal flag")
        shape = "x".join(map(str, v.observation_shape or [])) or "?"
        yield Static(Text(f"episode: {v.length} steps · return {ret} · {end} · observation shape {shape}", "bold"))
        if v.findings:
            yield Static(findings_text(v.findings))
        yield Static(Text.assemble(("reward  ", "dim"), sparkline(v.rewards, self.spark_width), "\n",
                                   ("return  ", "dim"), sparkline(v.returns, self.spark_width)))
        yield Static(self._marker(0), classes="step-marker", id="step-marker")
        yield Steps(id="steps", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one("#steps", DataTable)
        extra = list(self.rows[0].extra) if self.rows else []
        for name, width in [*STEP_COLUMNS, *((k, EXTRA_WIDTH) for k in extra)]:
            table.add_column(name, width=width)  # fixed widths: no measuring every cell of a long episode
        table.add_rows(_cells(r, extra) for r in self.rows)

    def _marker(self, step: int) -> Text:
        """A ▲ under the sparkline cell holding `step`, then that step's reward and return."""
        col = min(self.spark_width - 1, step * self.spark_width // max(1, self.view.length))
        row = self.rows[step] if 0 <= step < len(self.rows) else None
        said = f"step {step + 1}/{self.view.length}" + (
            f" · reward {_num(row.reward)} · return {_num(row.cumulative)} · action {clean(str(row.action))}"
            f" · observation {clean(str(row.observation))}" if row else "")
        return Text.assemble(" " * (8 + col) + "▲\n", (said, "bold"))

    @on(DataTable.RowHighlighted, "#steps")
    def _step_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.query_one("#step-marker", Static).update(self._marker(event.cursor_row))


def _cells(row: StepRow, extra: list[str]) -> list[Any]:
    return [str(row.step), _fit(clean(str(row.observation)), 26), clean(str(row.action)), _num_text(row.reward),
            _num_text(row.cumulative), _flag(row.terminated), _flag(row.truncated),
            *(_fit(clean(str(row.extra.get(k))), EXTRA_WIDTH) for k in extra)]


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _num(x: float | None) -> str:
    return "null" if x is None else f"{x:.4g}"


def _num_text(x: float | None) -> Text:
    if x is None:
        return Text("null", "red", justify="right")
    return Text(f"{x:.4g}", "bold red" if not math.isfinite(x) else "", justify="right")


def _flag(x: bool | None) -> Text:
    return Text("-" if x is None else ("yes" if x else "no"), "bold" if x else "dim")

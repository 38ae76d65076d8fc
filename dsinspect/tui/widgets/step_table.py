"""An RL episode: its summary, reward and return sparklines with a marker at the current step, and
every step in a scrolling table (up/down, page up/down, home/end reach any step of a long episode)."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from dsinspect.inspect import StepRow
from dsinspect.inspect.trajectory import TrajectoryView
from dsinspect.term import clean, findings_text, sparkline
from dsinspect.tui.widgets.step_rows import StepRowsView

__all__ = ["StepTable", "step_rows"]

SPARK_WIDTH = 64  # one line in the decoded pane from about 110 terminal columns up


def step_rows(view: TrajectoryView) -> list[StepRow]:
    """Every step of the episode (built in a worker: the table needs them all to scroll freely)."""
    return replace(view, page_size=max(1, view.length)).page(0).rows


class StepTable(Vertical):
    """`rows` are all the episode's steps; the highlighted one is marked under the sparklines."""

    DEFAULT_CSS = """
    StepTable { height: auto; }
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
        yield StepRowsView(self.rows, id="steps")

    def _marker(self, step: int) -> Text:
        """A ▲ under the sparkline cell holding `step`, then that step's reward and return. Steps are
        0-based everywhere, as in the data, the table's step column and `dsinspect show`."""
        col = min(self.spark_width - 1, step * self.spark_width // max(1, self.view.length))
        row = self.rows[step] if 0 <= step < len(self.rows) else None
        said = f"step {step} (0..{self.view.length - 1})" + (
            f" · reward {_num(row.reward)} · return {_num(row.cumulative)} · action {clean(str(row.action))}"
            f" · observation {clean(str(row.observation))}" if row else "")
        return Text.assemble(" " * (8 + col) + "▲\n", (said, "bold"))

    @on(StepRowsView.Highlighted, "#steps")
    def _step_highlighted(self, event: StepRowsView.Highlighted) -> None:
        self.query_one("#step-marker", Static).update(self._marker(event.row))


def _num(x: float | None) -> str:
    return "null" if x is None else f"{x:.4g}"


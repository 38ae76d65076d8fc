"""A version's statistics (or two versions' side by side), per column of its query view: rows, nulls,
distinct values; few values as horizontal bars (a label's distribution), numbers as a histogram of
horizontal bars (token counts, text lengths, image sizes, episode returns). Computed by DuckDB in a
thread worker through the adapter (`inspect.stats`); two versions share each number's bins."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from dsinspect.term import clean
from dsinspect.tui.messages import LoadFailed
from dsinspect.tui.widgets.key_footer import KeyFooter

__all__ = ["StatsScreen", "bar", "column_view"]

BAR_WIDTH = 30
_EIGHTHS = " ▏▎▍▌▋▊▉█"
_LABEL = 22  # cells of a value's or a bin's label


def bar(count: int, top: int, width: int = BAR_WIDTH) -> str:
    """`count` of `top` as a horizontal bar of `width` cells, in eighths of a cell; any count > 0
    shows at least a sliver."""
    if count <= 0 or top <= 0:
        return ""
    eighths = max(1, round(count / top * width * 8))
    full, part = divmod(min(eighths, width * 8), 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def number(x: float | None) -> str:
    if x is None:
        return "-"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:.4g}"


def _label(text: str, width: int = _LABEL) -> str:
    text = clean(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def column_view(c: Any, top: int | None = None, width: int = BAR_WIDTH, label: int = _LABEL) -> RenderableType:
    """One column's statistics: a counts line, then its values as bars (when few) or its histogram
    (numbers); `top`: the count a full bar stands for (two versions drawn on one scale); `width` and
    `label`: the cells of a full bar and of a value's or a bin's label."""
    head = Text.assemble((c.name, "bold"), f"  {c.type} · {c.source}")
    counts = [f"rows {c.rows:,}", f"nulls {'-' if c.nulls is None else f'{c.nulls:,}'}"]
    if c.distinct is not None:
        counts.append(f"distinct {c.distinct:,}")
    parts: list[RenderableType] = [head, Text("  " + " · ".join(counts), "dim")]
    if c.mean is not None:  # a line of its own: two versions side by side stay line for line
        parts.append(Text(f"  min {number(c.min)} · mean {number(c.mean)} · max {number(c.max)}", "dim"))
    if c.values is not None:
        scale = top or max((n for _, n in c.values), default=0)
        for value, n in c.values:
            shown = "(null)" if value is None else str(value)
            share = f"{n / c.rows:.0%}" if c.rows else ""
            parts.append(Text.assemble(f"  {_label(shown, label):<{label}} ", (bar(n, scale, width), "cyan"),
                                       f" {n:,} {share}"))
    elif c.histogram:
        scale = top or max((n for *_, n in c.histogram), default=0)
        for i, (lo, hi, n) in enumerate(c.histogram):
            close = "]" if i == len(c.histogram) - 1 else ")"
            span = _label(f"[{number(lo)}, {number(hi)}{close}", label)
            parts.append(Text.assemble(f"  {span:<{label}} ", (bar(n, scale, width), "green"), f" {n:,}"))
    elif c.source == "in the shards":
        parts.append(Text("  kept in the shards: described by its derived values", "dim italic"))
    return Group(*parts, Text(""))


def _top(*columns: Any) -> int:
    """The largest count among the columns' values or bins (one scale for two versions)."""
    counts = [0]
    for c in columns:
        if c is None:
            continue
        counts += [n for _, n in c.values or ()] if c.values is not None else [n for *_, n in c.histogram or ()]
    return max(counts)


class StatsScreen(Screen):
    """`a` (and `b`, to compare) are NAME[@REF] addresses."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, a: str, b: str | None = None) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.stats: Any = None  # a VersionStats, or a pair of them
        self.view: RenderableType = Text("")  # what #stats-columns draws

    def compose(self) -> ComposeResult:
        yield Header()
        what = f"{self.a} and {self.b}" if self.b else self.a
        yield Static(f"computing the statistics of {what}…", id="stats-summary")
        with VerticalScroll(id="stats-body"):
            yield Static("", id="stats-columns")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = f"statistics {self.a}" + (f" vs {self.b}" if self.b else "")
        self.query_one("#stats-body").focus()
        self.compute()

    @work(thread=True, exclusive=True, group="stats")
    def compute(self) -> None:
        source = self.app.source
        try:
            if self.b:
                stats: Any = source.compare_stats(source.version(self.a), source.version(self.b))
            else:
                stats = source.stats(source.version(self.a))
        except Exception as e:  # noqa: BLE001 - one line in the UI, never a traceback
            line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            self.app.call_from_thread(self._failed, line)
            return
        self.app.call_from_thread(self.show, stats)

    def _failed(self, line: str) -> None:
        self.query_one("#stats-summary", Static).update(Text(f"no statistics: {line}", "bold red"))
        self.post_message(LoadFailed(f"no statistics of {self.a}: {line}"))

    def show(self, stats: Any) -> None:
        self.stats = stats
        summary = self.query_one("#stats-summary", Static)
        body = self.query_one("#stats-columns", Static)
        if not self.b:
            summary.update(Text.assemble(("statistics ", "bold"), f"{stats.address} · {stats.rows:,} rows · "
                                         f"{len(stats.columns)} columns (stored and derived)"))
            self.view = Group(*(column_view(c) for c in stats.columns))
            body.update(self.view)
            return
        first, second = stats
        summary.update(Text.assemble(("statistics ", "bold"), f"{first.address} ({first.rows:,} rows)  vs  "
                                     f"{second.address} ({second.rows:,} rows) · numbers on shared bins"))
        names = [c.name for c in first.columns] + [c.name for c in second.columns
                                                   if first.column(c.name) is None]
        grid = Table.grid(expand=True, padding=(0, 2))
        grid.add_column(ratio=1)
        grid.add_column(ratio=1)
        grid.add_row(Text(first.address, "bold underline"), Text(second.address, "bold underline"))
        for name in names:
            x, y = first.column(name), second.column(name)
            top = _top(x, y)
            grid.add_row(*(column_view(c, top, 16, 16) if c else Text(f"{name}: not in this version\n", "yellow")
                           for c in (x, y)))
        self.view = grid
        body.update(grid)

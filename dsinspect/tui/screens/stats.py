"""A version's statistics (or two versions' side by side), per column of its query view: rows, nulls,
distinct values; few values as horizontal bars (a label's distribution), numbers as a histogram of
horizontal bars (token counts, text lengths, image sizes, episode returns). Computed by DuckDB in a
thread worker through the adapter (`inspect.stats`); two versions share each number's bins."""

from __future__ import annotations

from dataclasses import dataclass
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

from dsinspect.inspect.stats import moved
from dsinspect.term import clean
from dsinspect.tui.messages import LoadFailed
from dsinspect.tui.widgets.key_footer import KeyFooter

__all__ = ["StatsScreen", "Layout", "bar", "column_view", "share", "value_text"]

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


def share(n: int, rows: int) -> str:
    """`n` of `rows` as a percentage to 3 significant digits: 1 of 8 is 12.5%, not 12%."""
    return f"{100 * n / rows:.3g}%" if rows else ""


def value_text(value: Any) -> str:
    """A listed value as a label: floats to 4 significant digits (0.8333333333333334 -> 0.8333)."""
    if value is None:
        return "(null)"
    return number(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Layout:
    """How a column is drawn: `top`, the count a full bar stands for; `order`, the values' rows
    (two versions: the same value on the same row); `bins`, the histogram bins shown (those empty
    on every side are left out); `other`, the other version's column (its differing rows marked)."""

    top: int | None = None
    order: list[Any] | None = None
    bins: list[int] | None = None
    other: Any = None


def column_view(c: Any, layout: Layout = Layout(), width: int = BAR_WIDTH, label: int = _LABEL) -> RenderableType:
    """One column's statistics: a counts line, then its values as bars (when few) or its histogram
    (numbers); `width` and `label`: the cells of a full bar and of a value's or a bin's label."""
    head = Text.assemble((c.name, "bold"), f"  {c.type} · {c.source}")
    counts = [f"rows {c.rows:,}", f"nulls {'-' if c.nulls is None else f'{c.nulls:,}'}"]
    if c.distinct is not None:
        counts.append(f"distinct {c.distinct:,}")
    parts: list[Text] = [head, Text("  " + " · ".join(counts), "dim")]
    if c.mean is not None:  # a line of its own: two versions side by side stay line for line
        parts.append(Text(f"  min {number(c.min)} · mean {number(c.mean)} · max {number(c.max)}", "dim"))
    if c.values is not None:
        parts += _value_rows(c, layout, width, label)
    elif c.histogram:
        parts += _bin_rows(c, layout, width, label)
    elif c.source == "in the shards":
        parts.append(Text("  kept in the shards: described by its derived values", "dim italic"))
    for part in parts:  # one line each, cut with "…": two versions side by side stay line for line
        part.no_wrap, part.overflow = True, "ellipsis"
    return Group(*parts, Text(""))


def _value_rows(c: Any, layout: Layout, width: int, label: int) -> list[Text]:
    counts = dict(c.values)
    theirs = dict(layout.other.values or ()) if layout.other is not None else None
    scale = layout.top or max(counts.values(), default=0)
    rows = []
    for value in layout.order if layout.order is not None else list(counts):
        n = counts.get(value, 0)
        mark = ("⟳" if theirs.get(value, 0) != n else " ") if theirs is not None else ""
        rows.append(Text.assemble(f"{mark or ' '} {_label(value_text(value), label):<{label}} ",
                                  (bar(n, scale, width), "cyan"), f" {n:,} {share(n, c.rows)}",
                                  style="yellow" if mark == "⟳" else ""))
    return rows


def _bin_rows(c: Any, layout: Layout, width: int, label: int) -> list[Text]:
    histogram = c.histogram
    shown = layout.bins if layout.bins is not None else [i for i, (*_, n) in enumerate(histogram) if n]
    scale = layout.top or max((n for *_, n in histogram), default=0)
    rows = []
    for i in shown:
        lo, hi, n = histogram[i]
        span = _label(f"[{number(lo)}, {number(hi)}{']' if i == len(histogram) - 1 else ')'}", label)
        rows.append(Text.assemble(f"  {span:<{label}} ", (bar(n, scale, width), "green"), f" {n:,}"))
    if len(shown) < len(histogram):  # sparse values (ids): their empty bins say nothing
        rows.append(Text(f"  {len(histogram) - len(shown)} empty bin(s) of {len(histogram)} not shown", "dim"))
    return rows


def _layout(x: Any, y: Any) -> tuple[Layout, Layout]:
    """Two versions' columns drawn row for row: one scale, one value order, the bins either has."""
    counts = [0]
    for c in (x, y):
        counts += [n for _, n in c.values or ()] if c.values is not None else [n for *_, n in c.histogram or ()]
    top = max(counts)
    order = None
    if x.values is not None and y.values is not None:
        order = list(dict.fromkeys([v for v, _ in x.values] + [v for v, _ in y.values]))
    bins = None
    if x.histogram and y.histogram and len(x.histogram) == len(y.histogram):
        bins = [i for i, (a, b) in enumerate(zip(x.histogram, y.histogram)) if a[2] or b[2]]
    return Layout(top, order, bins, y), Layout(top, order, bins, x)


def _moved_line(x: Any, y: Any) -> Text:
    """What moved in a column between the versions, as the CLI and the web app say it."""
    changes = moved(x, y)
    if changes:
        return Text.assemble(("⟳ moved: ", "bold yellow"), clean("; ".join(changes)))
    if x.source == "in the shards":
        return Text("= rows and nulls unchanged (kept in the shards: not compared further)", "dim")
    return Text("= unchanged", "dim")


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
        half = (self.query_one("#stats-columns").content_size.width or self.app.size.width) // 2 - 2
        labels = 16 if half >= 50 else 10  # a value row (mark, label, bar, count, share) fits its half
        bars = max(4, min(16, half - labels - 14))
        for name in names:
            x, y = first.column(name), second.column(name)
            if x is None or y is None:
                grid.add_row(*(column_view(c, width=bars, label=labels) if c else
                               Text(f"{name}: not in this version\n", "yellow") for c in (x, y)))
                continue
            grid.add_row(_moved_line(x, y), Text(""))
            left, right = _layout(x, y)
            grid.add_row(column_view(x, left, bars, labels), column_view(y, right, bars, labels))
        self.view = grid
        body.update(grid)

"""Every step of an episode as a scrolling table drawn with Textual's line API: only the visible rows
are rendered, so opening a long episode costs no more than a short one (a DataTable builds every row)."""

from __future__ import annotations

import math
from typing import NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from dsinspect.inspect import StepRow
from dsinspect.term import clean

__all__ = ["StepRowsView", "Cell", "step_cells", "fit_cell", "STEP_COLUMNS", "EXTRA_WIDTH"]

# widths fit the decoded pane of a 120-column terminal; the marker line shows the whole observation
# (a number is at most 10 cells in the .4g format: -1.234e+05)
STEP_COLUMNS = (("step", 4), ("observation", 26), ("action", 6), ("reward", 10), ("return", 10), ("terminated", 10),
                ("truncated", 9))
EXTRA_WIDTH = 14
GAP = 1  # blank cells before each column
NUMERIC = {"step", "reward", "return"}  # right-aligned, header too


class Cell(NamedTuple):
    text: str
    style: str = ""
    right: bool = False


def step_cells(row: StepRow, extra: list[str]) -> list[Cell]:
    """What one step shows, column by column (plain text and style; padding is the widget's job)."""
    return [Cell(str(row.step), right=True), Cell(clean(str(row.observation))), Cell(clean(str(row.action))),
            _number(row.reward), _number(row.cumulative), _flag(row.terminated), _flag(row.truncated),
            *(Cell(clean(str(row.extra.get(k)))) for k in extra)]


def _number(x: float | None) -> Cell:
    if x is None:
        return Cell("null", "red", right=True)
    return Cell(f"{x:.4g}", "bold red" if not math.isfinite(x) else "", right=True)


def _flag(x: bool | None) -> Cell:
    return Cell("-" if x is None else ("yes" if x else "no"), "bold" if x else "dim")


def fit_cell(cell: Cell, width: int) -> str:
    """The cell's text cut or padded to exactly `width` terminal cells (wide characters count two)."""
    text = cell.text
    if cell_len(text) > width:  # one "…": a cut inside a shortened vector drops that one's ", …"
        text = set_cell_size(text, width - 1).rstrip(" ,…-") + "…"
    gap = " " * (width - cell_len(text))
    return gap + text if cell.right else text + gap


class StepRowsView(ScrollView, can_focus=True):
    """A header line that stays put, then one line per step; `cursor_row` is the highlighted step.

    up/down, page up/down, home/end and a mouse click move the cursor; each move posts `Highlighted`."""

    BINDINGS = [
        Binding("up", "move(-1)", "Prev step", show=False),
        Binding("down", "move(1)", "Next step", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move_to(0)", "First step", show=False),
        Binding("end", "move_to(-1)", "Last step", show=False),
    ]
    COMPONENT_CLASSES = {"steps--header", "steps--even-row", "steps--cursor"}
    DEFAULT_CSS = """
    StepRowsView { height: auto; max-height: 12; overflow-x: auto; overflow-y: auto; background: $surface; }
    StepRowsView > .steps--header { text-style: bold; background: $panel; color: $foreground; }
    StepRowsView > .steps--even-row { background: $surface-lighten-1 50%; }
    StepRowsView:dark > .steps--even-row { background: $surface-darken-1 40%; }
    StepRowsView > .steps--cursor { background: $block-cursor-blurred-background;
                                     color: $block-cursor-blurred-foreground; }
    StepRowsView:focus > .steps--cursor { background: $block-cursor-background; color: $block-cursor-foreground;
                                          text-style: $block-cursor-text-style; }
    """

    cursor_row: reactive[int] = reactive(0, init=False)

    class Highlighted(Message):
        """The cursor moved to step `row` (0-based)."""

        def __init__(self, view: StepRowsView, row: int) -> None:
            super().__init__()
            self.view, self.row = view, row

        @property
        def control(self) -> StepRowsView:
            return self.view

    def __init__(self, rows: list[StepRow], **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows = rows
        self.extra = list(rows[0].extra) if rows else []
        self.widths = [w for _, w in STEP_COLUMNS] + [EXTRA_WIDTH] * len(self.extra)
        self.header = [Cell(name, right=name in NUMERIC) for name, _ in STEP_COLUMNS] + [Cell(k) for k in self.extra]
        self._lines: dict[int, list[tuple[str, str]]] = {}  # step -> its padded cells, built when first drawn
        self.virtual_size = Size(sum(w + GAP for w in self.widths) + GAP, len(rows) + 1)

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def row_texts(self, index: int) -> list[str]:
        """The cells step `index` shows, as drawn (without padding)."""
        return [text.strip() for text, _ in self._cells_of(index)]

    # drawing

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        base = self.rich_style
        if y == 0:
            base += self.get_component_rich_style("steps--header")
            strip = self._strip(self._padded(self.header), base)
        else:
            index = scroll_y + y - 1
            if not 0 <= index < len(self.rows):
                return Strip.blank(self.size.width, base)
            cursor = index == self.cursor_row
            if cursor or index % 2 == 0:
                base += self.get_component_rich_style("steps--cursor" if cursor else "steps--even-row")
            strip = self._strip(self._cells_of(index), base, cursor)
        return strip.crop_extend(scroll_x, scroll_x + self.size.width, base)  # the line's colours span the width

    def _cells_of(self, index: int) -> list[tuple[str, str]]:
        if index not in self._lines:
            self._lines[index] = self._padded(step_cells(self.rows[index], self.extra))
        return self._lines[index]

    def _padded(self, cells: list[Cell]) -> list[tuple[str, str]]:
        gap = " " * GAP
        return [(gap + fit_cell(c, w), c.style) for c, w in zip(cells, self.widths)]

    @staticmethod
    def _strip(cells: list[tuple[str, str]], style: Style, cursor: bool = False) -> Strip:
        # on the cursor row its colours win; elsewhere a cell's own style (red null, dim "no") shows
        return Strip([Segment(text, style + Style.parse(s) if s and not cursor else style) for text, s in cells])

    # cursor

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self.rows) - 1))

    def watch_cursor_row(self, old: int, new: int) -> None:
        self._keep_visible(new)
        self.refresh()
        self.post_message(self.Highlighted(self, new))

    def _rows_per_page(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)  # the header takes a line

    def _keep_visible(self, row: int) -> None:
        top, page = round(self.scroll_y), self._rows_per_page()
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + page:
            self.scroll_to(y=row - page + 1, animate=False)

    def action_move(self, delta: int) -> None:
        self.cursor_row += delta

    def action_page(self, direction: int) -> None:
        self.cursor_row += direction * self._rows_per_page()

    def action_move_to(self, row: int) -> None:
        self.cursor_row = row if row >= 0 else len(self.rows) - 1

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is not None and offset.y >= 1:
            index = round(self.scroll_y) + offset.y - 1
            if 0 <= index < len(self.rows):
                self.cursor_row = index

"""A virtualised sample table: draws only visible lines and asks for missing pages by message,
so a million-row version scrolls as fast as a ten-row one."""

from __future__ import annotations

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

from dsinspect.inspect.cells import clip
from dsinspect.lru import LRU
from dsinspect.term import clean

__all__ = ["SampleTable", "PAGE_ROWS"]

PAGE_ROWS = 128
_KEEP_PAGES = 64
_HEADER = Style(bold=True, reverse=True)
_CURSOR = Style(bgcolor="#2d4f7c", color="white", bold=True)
_LOADING = Style(dim=True, italic=True)
_MAX_WIDTH = 26  # a column's cells, its trailing space included


class SampleTable(ScrollView, can_focus=True):
    """Rows of a version, fetched in pages of PAGE_ROWS through `PageWanted`; Enter opens a row."""

    DEFAULT_CSS = """
    SampleTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding("enter", "open", "Open sample"),
    ]

    cursor = reactive(0)

    class PageWanted(Message):
        def __init__(self, table: "SampleTable", page: int) -> None:
            super().__init__()
            self.table, self.page = table, page

    class RowOpened(Message):
        def __init__(self, table: "SampleTable", index: int) -> None:
            super().__init__()
            self.table, self.index = table, index

    def __init__(self, columns: list[str], num_rows: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.columns = ["#", *columns]
        self.num_rows = num_rows
        self._pages: LRU[int, list[list[str]]] = LRU(_KEEP_PAGES)
        self._pending: set[int] = set()
        self._widths = [max(len(str(max(num_rows - 1, 0))), 1) + 1,
                        *(max(8, min(cell_len(c) + 2, _MAX_WIDTH)) for c in columns)]
        self.virtual_size = Size(sum(self._widths) + len(self._widths), num_rows + 1)

    # -- data in ------------------------------------------------------------------------------

    def add_page(self, page: int, cells: list[list[str]]) -> None:
        """Store a fetched page and redraw; keeps at most _KEEP_PAGES pages."""
        self._pending.discard(page)
        cells = [[clean(c) for c in row] for row in cells]  # data never drives the terminal
        self._pages.put(page, cells)
        for row in cells:
            for i, cell in enumerate(row):
                width = cell_len(cell) + 1  # terminal cells: a wide character counts two
                if width > self._widths[i] and self._widths[i] < _MAX_WIDTH:
                    self._widths[i] = min(_MAX_WIDTH, width)
        self.refresh()

    def page_failed(self, page: int) -> None:
        self._pending.discard(page)

    def row_cells(self, index: int) -> list[str] | None:
        page = self._pages.peek(index // PAGE_ROWS)  # pages leave in the order they arrived
        return None if page is None else page[index % PAGE_ROWS]

    # -- drawing ------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            return self._strip(self.columns, _HEADER, width)
        index = self.scroll_offset.y + y - 1
        if index >= self.num_rows:
            return Strip.blank(width)
        cells = self.row_cells(index)
        if cells is None:
            self._want(index // PAGE_ROWS)
            return self._strip([str(index), "…"], _LOADING, width)
        return self._strip(cells, _CURSOR if index == self.cursor else Style(), width)

    def _strip(self, cells: list[str], style: Style, width: int) -> Strip:
        """One line: each cell cut on terminal-cell width (with "…"), padded to its column."""
        text = " ".join(set_cell_size(clip(c, w - 1, measure=cell_len), w) for c, w in zip(cells, self._widths))
        return Strip([Segment(set_cell_size(text, width), style)], width)

    def _want(self, page: int) -> None:
        if page not in self._pending and page not in self._pages:
            self._pending.add(page)
            self.post_message(self.PageWanted(self, page))

    # -- moving -------------------------------------------------------------------------------

    @property
    def visible_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def watch_cursor(self, old: int, new: int) -> None:
        top = self.scroll_offset.y
        if new < top:
            self.scroll_to(y=new, animate=False)
        elif new >= top + self.visible_rows:
            self.scroll_to(y=new - self.visible_rows + 1, animate=False)
        self.refresh()

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, min(self.num_rows - 1, self.cursor + delta))

    def action_page(self, delta: int) -> None:
        self.action_move(delta * self.visible_rows)

    def action_jump(self, index: int) -> None:
        self.cursor = index if index >= 0 else max(0, self.num_rows + index)

    def action_open(self) -> None:
        if self.num_rows:
            self.post_message(self.RowOpened(self, self.cursor))

    def on_click(self, event: events.Click) -> None:
        index = self.scroll_offset.y + event.y - 1
        if event.y >= 1 and 0 <= index < self.num_rows:
            if index == self.cursor and event.chain >= 2:
                self.action_open()
            self.cursor = index

"""One dataset version: a virtualised sample table with a filter box (`/`: an SQL condition over the
query view v, as `dsinspect query --where`), its schema with roles, shards and version history."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Static, TabbedContent, TabPane

from dsinspect.term import clean, human_bytes
from dsinspect.tui.messages import LoadFailed, Matches, OpenAddress, RowsLoaded
from dsinspect.tui.widgets.key_footer import KeyFooter
from dsinspect.tui.widgets.sample_table import PAGE_ROWS, SampleTable

__all__ = ["DatasetScreen"]


class DatasetScreen(Screen):
    """`address` is NAME[@REF]; `cursor` puts the sample table's cursor on a row."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("t", "stats", "Stats"),
        Binding("d", "diff_parent", "Diff parent"),
        Binding("s", "tab('samples')", "Samples"),
        Binding("m", "tab('schema')", "Schema"),
        Binding("S", "tab('shards')", "Shards"),
        Binding("h", "tab('history')", "History"),
    ]

    AUTO_FOCUS = None  # the sample table takes focus once it is there; never the filter box first

    def __init__(self, address: str, cursor: int = 0) -> None:
        super().__init__()
        self.address, self.start_cursor = address, cursor
        self.version: Any = None
        self.info: dict[str, Any] | None = None
        self.condition = ""  # the filter the results table shows ("" = the full table)
        self._wanted = ""  # the filter last asked for (a late answer to an older one is dropped)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("loading…", id="summary")
        with TabbedContent(initial="samples"):
            with TabPane("Samples", id="samples"):
                yield Input(placeholder="filter (/): an SQL condition over v, e.g. tokens_len > 100 AND lang = 'en'",
                            id="filter", compact=True)
                yield Static("", id="filter-status").set_styles("display: none;")
                yield Static("reading the manifest…", id="table-placeholder")
            with TabPane("Schema", id="schema"):
                yield DataTable(id="schema-table", cursor_type="row")
            with TabPane("Shards", id="shards"):
                yield DataTable(id="shards-table", cursor_type="row")
            with TabPane("History", id="history"):
                yield DataTable(id="history-table", cursor_type="row")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = self.address
        self.load_version()

    @work(thread=True, exclusive=True, group="version")
    def load_version(self) -> None:
        source = self.app.source
        try:
            version = source.version(self.address)
            info = source.info(version)
            history = source.history(version.name)
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not open {self.address}: {e}"))
            self.app.call_from_thread(self.show_failure, f"could not open {self.address}: {e}")
            return
        self.app.call_from_thread(self.show_version, version, info, history)

    def show_failure(self, line: str) -> None:
        """The read failed: say so where "loading…" was, for as long as the screen is open."""
        self.query_one("#summary", Static).update(Text(line, style="bold red"))
        self.query_one("#table-placeholder", Static).update(Text("nothing to show: Escape goes back", style="dim"))

    def show_version(self, version: Any, info: dict[str, Any], history: list[dict[str, Any]]) -> None:
        self.version, self.info = version, info
        self.sub_title = info["address"]
        self.query_one("#summary", Static).update(Text.assemble(  # stored text stays text: no markup
            (info["name"], "bold"), f" @ {info['id']}  tags: ", _tags(info),
            f"\n{info['rows']:,} rows · {human_bytes(info['bytes'])} · {len(info['shards'])} shards · key "
            f"{info['key'] or '-'} · created {info['created_at'] or '-'} · {clean(info['message'])}"))
        self._fill_schema(version, info)
        self._fill_shards(info)
        self._fill_history(history, info["id"])
        table = SampleTable([f["name"] for f in info["schema"]], info["rows"], id="sample-table")
        self.query_one("#table-placeholder").remove()
        self.query_one("#samples", TabPane).mount(table)
        table.cursor = min(self.start_cursor, max(0, info["rows"] - 1))
        table.focus()

    def _fill_schema(self, version: Any, info: dict[str, Any]) -> None:
        table = self.query_one("#schema-table", DataTable)
        table.add_columns("field", "role", "type", "nullable", "options")
        for f in version.fields:
            key = " (key)" if f.name == info["key"] else ""
            opts = ", ".join(f"{k}={_option(v)}" for k, v in (f.options or {}).items())
            table.add_row(f.name + key, f.role.value, str(f.type)[:50], "yes" if f.nullable else "no", opts[:70])

    def _fill_shards(self, info: dict[str, Any]) -> None:
        table = self.query_one("#shards-table", DataTable)
        table.add_columns("#", "first row", "rows", "bytes", "sha256")
        for s in info["shards"]:
            table.add_row(str(s["index"]), f"{s['first_row']:,}", f"{s['rows']:,}", human_bytes(s["bytes"]),
                          s["sha256"])

    def _fill_history(self, history: list[dict[str, Any]], current: str) -> None:
        table = self.query_one("#history-table", DataTable)
        table.add_columns("", "version", "tags", "parent", "created", "rows", "message")
        for v in history:
            table.add_row("●" if v["id"] == current else "", v["short_id"], ", ".join(v["tags"]),
                          (v["parent"] or "-")[:12], (v["created_at"] or "-")[:19], f"{v['rows']:,}", v["message"],
                          key=v["id"])

    def action_diff_parent(self) -> None:
        """Diff this version against its parent (asks when there is none)."""
        if self.info is None:
            return
        parent = self.info.get("parent")
        here = f"{self.info['name']}@{self.info['id'][:12]}"
        if parent:
            self.app.open_diff(f"{self.info['name']}@{parent[:12]}", here)
        else:
            self.app.action_diff("", here)

    def action_stats(self) -> None:
        """This version's statistics per field (counts, nulls, value bars, histograms)."""
        from dsinspect.tui.screens.stats import StatsScreen

        if self.version is not None:
            self.app.push_screen(StatsScreen(f"{self.version.name}@{self.version.id}"))

    def action_tab(self, tab: str) -> None:
        """Show a tab and focus its table (a hidden table keeps no focus: keys would go nowhere, or
        to the filter box)."""
        self.query_one(TabbedContent).active = tab
        if tab == "samples":
            self._focus_table()
        else:
            self.query_one(f"#{tab}-table").focus()

    # -- the filter box -------------------------------------------------------------------------

    def action_filter(self) -> None:
        """Focus the filter box (on the Samples tab)."""
        self.query_one(TabbedContent).active = "samples"
        self.query_one("#filter", Input).focus()

    def action_back(self) -> None:
        """Escape: from a filter (its box or its results) back to the full table, else back a screen."""
        box = self.query_one("#filter", Input)
        if self.condition or self._wanted or box.value:
            box.value = ""
            self.clear_filter()
        elif self.focused is box:
            self._focus_table()
        else:
            self.app.pop_screen()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        condition = event.value.strip()
        if not condition:
            self.clear_filter()  # enter on an empty box: the full table, focused
        elif self.version is not None:
            self._wanted = condition
            self._status(f"filtering: {condition}…", "dim")
            self.run_filter(self.version, condition)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        if not event.value.strip() and (self.condition or self._wanted):
            self.clear_filter(focus=self.focused is not event.input)  # typing on: the box keeps the keys

    def clear_filter(self, focus: bool = True) -> None:
        """The full table again (focused, unless the box being edited keeps the focus)."""
        self.condition = self._wanted = ""
        self._status("")
        if self.query("#sample-table"):
            self.query_one("#sample-table").display = True
        if focus:
            self._focus_table(full=True)  # before the results go: their focus must not move to the box
        for old in self.query("#filter-table"):
            old.remove()

    def _focus_table(self, full: bool = False) -> None:
        tables = self.query("#sample-table") if full else (self.query("#filter-table") or self.query("#sample-table"))
        if tables:
            tables.first().focus()

    def _status(self, text: str, style: str = "") -> None:
        from rich.text import Text

        line = self.query_one("#filter-status", Static)
        line.update(Text(text, style))
        line.display = bool(text)  # no blank line over the table

    @work(thread=True, exclusive=True, group="filter")
    def run_filter(self, version: Any, condition: str) -> None:
        from dsinspect.errors import UserError

        try:
            page = self.app.source.filter(version, condition, 0, PAGE_ROWS, count=True)
        except UserError as e:
            self.app.call_from_thread(self._filter_failed, condition, str(e))
            return
        except Exception as e:  # noqa: BLE001 - one line in the UI, never a traceback
            self.app.call_from_thread(self._filter_failed, condition, f"{type(e).__name__}: {e}".splitlines()[0])
            return
        self.app.call_from_thread(self._filter_shown, condition, page)

    def _filter_failed(self, condition: str, line: str) -> None:
        if condition == self._wanted:
            self._wanted = self.condition
            self._status(line.splitlines()[0] if line else "the filter failed", "bold red")

    def _filter_shown(self, condition: str, page: Any) -> None:
        if condition != self._wanted:
            return
        self.condition = condition
        for old in self.query("#filter-table"):
            old.remove()
        total = page.total if page.total is not None else len(page.cells)
        rows = self.info["rows"] if self.info else 0
        self._status(f"{total:,} of {rows:,} samples match  {condition}   (escape: the full table)", "bold")
        table = SampleTable(page.columns[1:], total, id="filter-table")
        table.border_title = condition
        self.query_one("#sample-table").display = False
        self.query_one("#samples", TabPane).mount(table)
        if page.cells:
            table.add_page(0, page.cells)
        table.focus()

    @work(thread=True, group="filter-rows")
    def load_filter_page(self, table: SampleTable, condition: str, page: int) -> None:
        try:
            rows = self.app.source.filter(self.version, condition, page * PAGE_ROWS, PAGE_ROWS)
        except Exception as e:  # noqa: BLE001
            self.app.call_from_thread(table.page_failed, page)
            self.post_message(LoadFailed(f"could not read the filter's rows: {e}"))
            return
        self.app.call_from_thread(self._filter_page, table, condition, page, rows.cells)

    def _filter_page(self, table: SampleTable, condition: str, page: int, cells: list[list[str]]) -> None:
        if condition == self.condition and table.is_attached:
            table.add_page(page, cells)

    # -- rows ---------------------------------------------------------------------------------

    @on(SampleTable.PageWanted)
    def _page_wanted(self, event: SampleTable.PageWanted) -> None:
        if event.table.id == "filter-table":
            self.load_filter_page(event.table, self.condition, event.page)
        else:
            self.load_page(event.page)

    @work(thread=True, group="rows")
    def load_page(self, page: int) -> None:
        try:
            rows = self.app.source.rows(self.version, page * PAGE_ROWS, PAGE_ROWS)
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not read rows of {self.address}: {e}", page))
            return
        self.post_message(RowsLoaded(page, rows.cells))

    def on_rows_loaded(self, event: RowsLoaded) -> None:
        self.query_one("#sample-table", SampleTable).add_page(event.page, event.cells)

    def on_load_failed(self, event: LoadFailed) -> None:
        if isinstance(event.detail, int) and self.query("#sample-table"):
            self.query_one("#sample-table", SampleTable).page_failed(event.detail)

    @on(SampleTable.RowOpened)
    def _open_row(self, event: SampleTable.RowOpened) -> None:
        index, matches = event.index, None
        if event.table.id == "filter-table":  # a result row: its first cell is the sample's index
            cells = event.table.row_cells(event.index)
            if cells is None:
                return
            index = int(cells[0])
            matches = Matches(self.version, self.condition, event.index, event.table.num_rows)
        self.post_message(OpenAddress(f"{self.version.name}@{self.version.id}:{index}", matches))

    @on(DataTable.RowSelected, "#history-table")
    def _open_history(self, event: DataTable.RowSelected) -> None:
        if self.version is not None:
            self.post_message(OpenAddress(f"{self.version.name}@{event.row_key.value}"))


def _option(value: Any) -> str:
    """A field option in a few words: a tokenizer is its kind and a short hash or name."""
    if isinstance(value, dict):
        head = value.get("kind") or ""
        tail = value.get("name") or value.get("encoding") or str(value.get("blob") or "")[:12]
        return f"{head} {tail}".strip() or str(value)
    return str(value)


def _tags(info: dict[str, Any]) -> Text:
    if "tags_error" in info:  # a damaged tags.json: the version opens, its tags are unknown
        return Text("unknown: tags.json cannot be read", style="red")
    return Text(", ".join(info["tags"]) or "-")

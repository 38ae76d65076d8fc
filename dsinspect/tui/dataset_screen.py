"""One dataset version: a virtualised sample table, its schema with roles, shards and version history."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static, TabbedContent, TabPane

from dsinspect.term import human_bytes
from dsinspect.tui.key_footer import KeyFooter
from dsinspect.tui.messages import LoadFailed, OpenAddress, RowsLoaded
from dsinspect.tui.sample_table import PAGE_ROWS, SampleTable

__all__ = ["DatasetScreen"]


class DatasetScreen(Screen):
    """`address` is NAME[@REF]; `cursor` puts the sample table's cursor on a row."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("s", "tab('samples')", "Samples"),
        Binding("m", "tab('schema')", "Schema"),
        Binding("h", "tab('history')", "History"),
        Binding("d", "diff_parent", "Diff parent"),
    ]

    def __init__(self, address: str, cursor: int = 0) -> None:
        super().__init__()
        self.address, self.start_cursor = address, cursor
        self.version: Any = None
        self.info: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("loading…", id="summary")
        with TabbedContent(initial="samples"):
            with TabPane("Samples", id="samples"):
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
            return
        self.app.call_from_thread(self.show_version, version, info, history)

    def show_version(self, version: Any, info: dict[str, Any], history: list[dict[str, Any]]) -> None:
        self.version, self.info = version, info
        self.sub_title = info["address"]
        self.query_one("#summary", Static).update(
            f"[b]{info['name']}[/b] @ {info['id']}  tags: {', '.join(info['tags']) or '-'}\n"
            f"{info['rows']:,} rows · {human_bytes(info['bytes'])} · {len(info['shards'])} shards · key "
            f"{info['key'] or '-'} · created {info['created_at'] or '-'} · {info['message']}")
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

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    # -- rows ---------------------------------------------------------------------------------

    @on(SampleTable.PageWanted)
    def _page_wanted(self, event: SampleTable.PageWanted) -> None:
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
        self.query_one(SampleTable).add_page(event.page, event.cells)

    def on_load_failed(self, event: LoadFailed) -> None:
        if isinstance(event.detail, int) and self.query(SampleTable):
            self.query_one(SampleTable).page_failed(event.detail)

    @on(SampleTable.RowOpened)
    def _open_row(self, event: SampleTable.RowOpened) -> None:
        self.post_message(OpenAddress(f"{self.version.name}@{self.version.id}:{event.index}"))

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

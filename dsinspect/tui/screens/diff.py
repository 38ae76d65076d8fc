"""Two versions compared: a summary, schema changes, and the changed, added and removed rows; under
them, what changed in the highlighted row (in words, the changed text or token stretch marked, as
`dsinspect diff` prints it: term/changes.py)."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Label, Static

from dsinspect.tui.messages import LoadFailed
from dsinspect.tui.screens.row_diff import RowDiffScreen
from dsinspect.tui.widgets.key_footer import KeyFooter

__all__ = ["DiffScreen"]


class DiffScreen(Screen):
    """`a` and `b` are NAME[@REF] addresses; Enter on a changed row opens it before/after."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"), Binding("t", "stats", "Stats of both")]

    def __init__(self, a: str, b: str) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.result: Any = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"comparing {self.a} → {self.b}…", id="diff-summary")
        with Vertical():
            yield Label("schema changes", classes="pane-title")
            yield DataTable(id="schema-changes", cursor_type="row")
            yield Label("rows (enter: before / after)", classes="pane-title")
            yield DataTable(id="row-changes", cursor_type="row", zebra_stripes=True)
            yield Static("", id="row-change-detail")
        yield KeyFooter()

    def action_stats(self) -> None:
        """Both versions' statistics side by side, numbers on shared bins."""
        from dsinspect.tui.screens.stats import StatsScreen

        self.app.push_screen(StatsScreen(self.a, self.b))

    def on_mount(self) -> None:
        self.sub_title = f"diff {self.a} → {self.b}"
        self.query_one("#schema-changes", DataTable).add_columns("field", "change", "before", "after")
        self.query_one("#row-changes", DataTable).add_columns("change", "key", "index before", "index after", "fields")
        self.compute()

    @work(thread=True, exclusive=True, group="diff")
    def compute(self) -> None:
        try:
            result = self.app.source.diff(self.a, self.b)
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not diff {self.a} and {self.b}: {e}"))
            return
        self.app.call_from_thread(self.show, result)

    def show(self, result: Any) -> None:
        self.result = result
        r, s = result.rows, result.shards
        counts = ", ".join(f"{n} {k}" for k, n in r.counts.items())
        same = "  (no changes)" if result.empty else ""
        self.query_one("#diff-summary", Static).update(
            f"[b]{result.a}[/b] ({result.a_rows:,} rows) → [b]{result.b}[/b] ({result.b_rows:,} rows){same}\n"
            f"rows matched by {r.matched_by}{' ' + r.key if r.key else ''}: {counts} · shards: {len(s.shared)} shared, "
            f"{len(s.added)} added, {len(s.removed)} removed · changed fields: "
            + (", ".join(f"{k} ({n})" for k, n in r.fields.items()) or "-"))
        schema = self.query_one("#schema-changes", DataTable)
        for c in result.schema:
            schema.add_row(c.field, c.change, str(c.before)[:40], str(c.after)[:40])
        if not result.schema:
            schema.add_row("-", "no schema changes", "", "")
        rows = self.query_one("#row-changes", DataTable)
        for kind in ("changed", "added", "removed", "moved"):
            for i, item in enumerate(getattr(r, kind)):
                rows.add_row(kind, str(item.get("key", "-")), _idx(item.get("index_a")), _idx(item.get("index_b")),
                             ", ".join(item.get("fields", [])), key=f"{kind}:{i}")
        rows.focus()

    @on(DataTable.RowHighlighted, "#row-changes")
    def _show_change(self, event: DataTable.RowHighlighted) -> None:
        from dsinspect.term.changes import what_changed

        if self.result is None or event.row_key is None or event.row_key.value is None:
            return
        kind, i = str(event.row_key.value).split(":")
        item = getattr(self.result.rows, kind)[int(i)]
        detail = self.query_one("#row-change-detail", Static)
        detail.update(what_changed(item["details"]) if item.get("details") else f"{kind} row")

    @on(DataTable.RowSelected, "#row-changes")
    def _open_row(self, event: DataTable.RowSelected) -> None:
        kind, i = str(event.row_key.value).split(":")
        item = getattr(self.result.rows, kind)[int(i)]
        a = f"{self.result.a}:{item['index_a']}" if item.get("index_a") is not None else None
        b = f"{self.result.b}:{item['index_b']}" if item.get("index_b") is not None else None
        self.app.push_screen(RowDiffScreen(a, b, item.get("fields") or [], item.get("details")))


def _idx(value: Any) -> str:
    return "-" if value is None else f"{value:,}"

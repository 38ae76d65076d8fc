"""The catalog: datasets on the left, the chosen dataset's versions and tags on the right.

The versions' message column takes the width the other columns leave (a longer message is cut with
"…"); parent and created are short there. The highlighted version's whole message, its creation
time and parent are shown, wrapped, on the lines under the table."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Label, OptionList, Static
from textual.widgets.option_list import Option

from dsinspect.inspect.cells import clip
from dsinspect.term import clean, human_bytes
from dsinspect.tui.messages import LoadFailed, OpenAddress
from dsinspect.tui.widgets.key_footer import KeyFooter

__all__ = ["CatalogScreen"]

_BROKEN = "broken:"  # row keys of broken entries (version keys are hex ids)
VERSION_COLUMNS = ("version", "tags", "parent", "created", "rows", "bytes", "shards", "message")
_MIN_MESSAGE = 12  # cells the message column keeps however narrow the pane


def _cells_width(table: DataTable, key: Any) -> int:
    """Cells the widest of a column's label and cells takes, as the table will measure it."""
    label = table.columns[key].label
    return max([cell_len(label.plain), *(cell_len(str(cell)) for cell in table.get_column(key))])


class DatasetList(OptionList):
    """The datasets; Enter opens the highlighted one (its latest version), and the footer says so."""

    BINDINGS = [Binding("enter", "select", "Open dataset")]


class VersionTable(DataTable):
    """A dataset's versions; Enter opens the highlighted one."""

    BINDINGS = [Binding("enter", "select_cursor", "Open version")]

    def on_resize(self, event: events.Resize) -> None:
        """A new width: the message column takes what the other columns leave of it."""
        fit = getattr(self.screen, "fit_messages", None)
        if fit is not None:
            self.call_after_refresh(fit)


class CatalogScreen(Screen):
    """Datasets, versions (id, parent, created, message, rows, bytes) and tags; Enter on a dataset
    opens its latest version, Enter on a version (tab to the versions) opens that one."""

    BINDINGS = [Binding("r", "reload", "Reload")]

    def __init__(self) -> None:
        super().__init__(id="catalog")
        self.listing: dict[str, Any] | None = None
        self.messages: dict[str, str] = {}  # row key -> the version's whole message
        self.details: dict[str, str] = {}  # row key -> its id, creation time and parent, in full

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with Vertical(id="catalog-left"):
                yield Label("datasets", classes="pane-title")
                yield DatasetList(id="datasets")
            with Vertical(id="catalog-right"):
                yield Label("versions", classes="pane-title", id="versions-title")
                yield VersionTable(id="versions", cursor_type="row", zebra_stripes=True)
                yield Static(id="version-message")
                yield Static(id="tags")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "catalog"
        self.action_reload()

    def action_reload(self) -> None:
        self.load_listing()

    @work(thread=True, exclusive=True, group="listing")
    def load_listing(self) -> None:
        try:
            listing = self.app.source.listing()
        except Exception as e:  # noqa: BLE001 - any read failure becomes a notification
            self.post_message(LoadFailed(f"could not list the catalog: {e}"))
            return
        self.app.call_from_thread(self.show_listing, listing)

    def show_listing(self, listing: dict[str, Any]) -> None:
        self.listing = listing
        self.sub_title = f"catalog {listing['catalog']}"
        datasets = self.query_one("#datasets", OptionList)
        datasets.clear_options()
        datasets.add_options(Option(_dataset_label(d), id=d["name"]) for d in listing["datasets"])
        if listing["datasets"]:
            datasets.highlighted = 0
            self.show_dataset(listing["datasets"][0]["name"])
        datasets.focus()
        broken = [b for d in listing["datasets"] for b in d.get("broken", [])]
        if broken:  # listed with the rest; said once more, loudly, since nothing else would open them
            self.notify(f"{len(broken)} stored file(s) cannot be read, "
                        f"first: {broken[0]['path']}: {broken[0]['reason']}",
                        title="broken", severity="error", timeout=12, markup=False)

    @on(OptionList.OptionHighlighted, "#datasets")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.show_dataset(event.option.id)

    @on(OptionList.OptionSelected, "#datasets")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        item = self.dataset(event.option.id or "")
        if item is None:
            return
        if not item["versions"]:  # only broken entries: show them, nothing opens
            self.query_one("#versions", DataTable).focus()
            self.notify(f"{item['name']} has no readable version", severity="error", markup=False)
            return
        self.post_message(OpenAddress(item["name"] if "latest" in item["tags"] else
                                      f"{item['name']}@{_newest(item)['id']}"))

    def dataset(self, name: str) -> dict[str, Any] | None:
        return next((d for d in (self.listing or {}).get("datasets", []) if d["name"] == name), None)

    def show_dataset(self, name: str) -> None:
        item = self.dataset(name)
        if item is None:
            return
        self.current = name
        table = self.query_one("#versions", DataTable)
        table.clear(columns=True)  # new columns: their widths would otherwise keep the widest cells seen before
        for column in VERSION_COLUMNS[:-1]:
            table.add_column(column, key=column)
        table.add_column("message", key="message", width=_MIN_MESSAGE)
        self.messages, self.details = {}, {}
        for v in sorted(item["versions"], key=lambda v: v.get("created_at") or "", reverse=True):
            self.messages[v["id"]] = v["message"] or ""
            self.details[v["id"]] = (f"{v['short_id']} · created {(v['created_at'] or '-')[:19]} · parent "
                                     f"{(v['parent'] or '-')[:12]}")
            table.add_row(v["short_id"], ", ".join(v["tags"]), (v["parent"] or "-")[:8],
                          (v["created_at"] or "-")[:10], f"{v['rows']:,}", human_bytes(v["bytes"]),
                          str(v["shards"]), "", key=v["id"])
        for b in item.get("broken", []):  # a version whose manifest (or the tags.json) cannot be read
            key = f"{_BROKEN}{b['path']}"
            self.messages[key] = f"BROKEN: {b['path']}: {b['reason']}"
            table.add_row(Text(b["short_id"] or "tags.json", style="red"), ", ".join(b["tags"]), "-", "-", "", "", "",
                          "", key=key)
        self.fit_messages()
        self._show_message(table.cursor_row)
        self.query_one("#versions-title", Label).update(f"versions of {name}")
        tags = "  ".join(f"[b]{t}[/b] → {vid[:12]}" for t, vid in sorted(item["tags"].items())) or "no tags"
        self.query_one("#tags", Static).update(f"tags: {tags}")

    def fit_messages(self) -> None:
        """The message column takes the width the other columns leave; each message is cut to it."""
        table = self.query_one("#versions", DataTable)
        column = table.columns.get("message")  # type: ignore[call-overload]
        if column is None:
            return
        # measured from the cells: the table's own column widths catch up with new rows only when idle
        others = sum(_cells_width(table, key) + 2 * table.cell_padding for key in table.columns if key != "message")
        # the table's virtual width is its columns' and one cell more: no horizontal scroll
        room = max(_MIN_MESSAGE, table.scrollable_content_region.width - others - 2 * table.cell_padding - 1)
        column.width = room
        for key, message in self.messages.items():
            text = clip(clean(" ".join(message.split())), room, measure=cell_len)  # one line in the table
            table.update_cell(key, "message", Text(text, style="bold red") if key.startswith(_BROKEN) else text)
        table.refresh()

    @on(DataTable.RowHighlighted, "#versions")
    def _version_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_message(event.cursor_row)

    def _show_message(self, row: int) -> None:
        """The highlighted version's whole message, wrapped, under the table."""
        table = self.query_one("#versions", DataTable)
        line = self.query_one("#version-message", Static)
        if not 0 <= row < table.row_count:
            line.update("")
            return
        key = table.coordinate_to_cell_key((row, 0)).row_key.value or ""
        message = clean(self.messages.get(key, ""))
        detail = self.details.get(key)
        line.update(Text.assemble(*((detail + "\n", "dim"),) if detail else (), message or "(no message)"))

    @on(DataTable.RowSelected, "#versions")
    def _open_version(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value or ""
        if key.startswith(_BROKEN):
            self.notify(f"cannot open: {key[len(_BROKEN):]} is broken", severity="error", markup=False)
            return
        self.post_message(OpenAddress(f"{self.current}@{key}"))


def _newest(item: dict[str, Any]) -> dict[str, Any]:
    return max(item["versions"], key=lambda v: v.get("created_at") or "")


def _dataset_label(item: dict[str, Any]) -> str:
    broken = len(item.get("broken", []))
    count = len(item["versions"])
    return f"{item['name']}  " + (f"({count} ok, {broken} broken)" if broken
                                  else f"({count} version{'' if count == 1 else 's'})")

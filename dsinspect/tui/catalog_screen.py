"""The catalog: datasets on the left, the chosen dataset's versions and tags on the right."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Label, OptionList, Static
from textual.widgets.option_list import Option

from dsinspect.term import human_bytes
from dsinspect.tui.key_footer import KeyFooter
from dsinspect.tui.messages import LoadFailed, OpenAddress

__all__ = ["CatalogScreen"]

_BROKEN = "broken:"  # row keys of broken entries (version keys are hex ids)
VERSION_COLUMNS = ("version", "tags", "parent", "created", "rows", "bytes", "shards", "message")


class DatasetList(OptionList):
    """The datasets; Enter opens the highlighted one (its latest version), and the footer says so."""

    BINDINGS = [Binding("enter", "select", "Open dataset")]


class VersionTable(DataTable):
    """A dataset's versions; Enter opens the highlighted one."""

    BINDINGS = [Binding("enter", "select_cursor", "Open version")]


class CatalogScreen(Screen):
    """Datasets, versions (id, parent, created, message, rows, bytes) and tags; Enter on a dataset
    opens its latest version, Enter on a version (tab to the versions) opens that one."""

    BINDINGS = [Binding("r", "reload", "Reload")]

    def __init__(self) -> None:
        super().__init__(id="catalog")
        self.listing: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with Vertical(id="catalog-left"):
                yield Label("datasets", classes="pane-title")
                yield DatasetList(id="datasets")
            with Vertical(id="catalog-right"):
                yield Label("versions", classes="pane-title", id="versions-title")
                yield VersionTable(id="versions", cursor_type="row", zebra_stripes=True)
                yield Static(id="tags")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "catalog"
        self.query_one("#versions", DataTable).add_columns(*VERSION_COLUMNS)
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
        table.clear()
        for v in sorted(item["versions"], key=lambda v: v.get("created_at") or "", reverse=True):
            table.add_row(v["short_id"], ", ".join(v["tags"]), (v["parent"] or "-")[:12],
                          (v["created_at"] or "-")[:16], f"{v['rows']:,}", human_bytes(v["bytes"]),
                          str(v["shards"]), v["message"], key=v["id"])
        for b in item.get("broken", []):  # a version whose manifest (or the tags.json) cannot be read
            table.add_row(Text(b["short_id"] or "tags.json", style="red"), ", ".join(b["tags"]), "-", "-", "", "", "",
                          Text(f"BROKEN: {b['path']}: {b['reason']}", style="bold red"), key=f"{_BROKEN}{b['path']}")
        self.query_one("#versions-title", Label).update(f"versions of {name}")
        tags = "  ".join(f"[b]{t}[/b] → {vid[:12]}" for t, vid in sorted(item["tags"].items())) or "no tags"
        self.query_one("#tags", Static).update(f"tags: {tags}")

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
    return f"{item['name']}  " + (f"({len(item['versions'])} ok, {broken} broken)" if broken
                                  else f"({len(item['versions'])} versions)")

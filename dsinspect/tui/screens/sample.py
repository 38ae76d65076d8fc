"""One sample: its fields on the left; the chosen field decoded, above its hashes and raw hex."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, OptionList, Static
from textual.widgets._header import HeaderTitle
from textual.widgets.option_list import Option

from dsinspect.loaders.store.address import Address, parse_address
from dsinspect.tui.messages import LoadFailed, Matches
from dsinspect.tui.screens.rollout_group import GroupChoice, RolloutGroupScreen
from dsinspect.tui.widgets.field_view import FieldView, Prepared, hashes_renderable, hex_renderable, prepare
from dsinspect.tui.widgets.key_footer import KeyFooter
from dsinspect.tui.widgets.rollout_tokens import ROLLOUT, PreparedRollout, RolloutPane, RolloutTokens
from dsinspect.tui.widgets.token_strip import TokenStrip
from dsinspect.tui.widgets.video_player import VideoPlayer

__all__ = ["SampleScreen"]


class Pane(VerticalScroll, can_focus=False):
    """A scrolling pane that the focus skips: tab goes from the field list straight to the view."""


class SampleScreen(Screen):
    """`address` is NAME[@REF]:INDEX. Decoding happens in workers; the screen never blocks.

    Asked for another sample, the screen shows that sample's address and a placeholder at once (never
    the previous sample's fields under the new address), then the sample when its worker is done."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("n", "step(1)", "Next"),
        Binding("p", "step(-1)", "Prev"),
        Binding("x", "toggle_raw", "Hex"),
        Binding("full_stop", "frame(1)", "Next frame", show=False),
        Binding("comma", "frame(-1)", "Prev frame", show=False),
        Binding("right", "token(1)", "Next token", show=False),
        Binding("left", "token(-1)", "Prev token", show=False),
        Binding("pagedown", "hex_page(1)", "Hex page", show=False),
        Binding("pageup", "hex_page(-1)", "Hex page", show=False),
        Binding("v", "color_by", "Colour by"),
        Binding("G", "group", "Group"),
        Binding("f", "finding(1)", "Next finding", show=False),
    ]

    def __init__(self, address: str) -> None:
        super().__init__()
        self.addr: Address = parse_address(address)
        self.sample: Any = None
        self.field_name: str | None = None
        self.shown: tuple[Any, str] | None = None  # (sample, field) the decoded pane holds
        self.hex_page = 0
        self.wanted: Address = self.addr  # the sample asked for last: only its read is shown
        self.blank = True  # nothing of any sample is on screen (composed, or cleared when left)
        self.matches: Matches | None = None  # the filter results it was opened from: n/p step through them
        self.rollout_color_by: str | None = None  # what rollouts are coloured by (v), kept from sample to sample

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("reading the sample…", id="sample-summary")
        with Horizontal():
            yield OptionList(id="fields")
            with Vertical(id="sample-right"):
                yield Pane(Static("", classes="loading"), id="decoded")
                yield Static(id="hashes")
                yield Pane(Static(id="raw-body"), id="raw")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.ready = True
        self.load_sample(self.addr)

    def show_address(self, address: str) -> None:
        """Show another sample on this (reused) screen: skips composing a new screen on every open."""
        addr = parse_address(address)
        if not getattr(self, "ready", False):
            self.addr = self.wanted = addr
        elif self.blank or self.sample is None or (addr.name, addr.ref, addr.index) != (
                self.addr.name, self.addr.ref, self.sample.index):
            self.load_sample(addr)

    @property
    def address(self) -> str:
        return str(self.addr)

    def load_sample(self, addr: Address) -> None:
        """Read sample `addr` and decode the field to show, off the UI thread. Until it is shown the
        screen has `addr` as its title and a placeholder: on a blank screen both are set at once; a
        screen showing another sample first clears it, in the same frame as the new title."""
        self.wanted = addr
        if self.blank:
            self._placeholder(addr)
            self._read(addr)
        else:
            self.call_later(self._clear_then_read, addr)

    async def _clear_then_read(self, addr: Address) -> None:
        if addr != self.wanted:
            return  # asked for another since
        with self.app.batch_update():
            await self._clear()
            self._placeholder(addr)
        self._read(addr)

    def _read(self, addr: Address) -> None:
        self._read_sample(addr, self.field_name, self._decode_width())

    async def _clear(self) -> None:
        """Remove everything the last sample put on screen."""
        self.blank, self.shown = True, None
        self.query_one("#fields", OptionList).clear_options()
        self.query_one("#hashes", Static).update("")
        self.query_one("#raw-body", Static).update("")
        decoded = self.query_one("#decoded")
        await decoded.remove_children()
        await decoded.mount(Static("", classes="loading"))

    def _placeholder(self, addr: Address) -> None:
        """`addr` as the title, and a placeholder (synchronous: the next frame has both)."""
        self.addr = addr
        self.sub_title = _short(addr)
        for title in self.query(HeaderTitle):  # the header's own watcher repaints a message later
            title.update(self.app.format_title(self.title or self.app.title, self.sub_title))
        self.query_one("#sample-summary", Static).update(Text(f"reading {_short(addr)}…"))
        for line in self.query_one("#decoded").query(".loading").results(Static):
            line.update(Text(f"reading {_short(addr)}…", "dim"))

    def on_screen_suspend(self) -> None:
        """Left for good (popped, not covered by a dialog): clear it now, so the next sample it shows
        never appears under the last one's fields, even for a frame."""
        if self not in self.app.screen_stack and not self.blank:
            self.call_later(self._clear)

    def _decode_width(self) -> int:
        """Columns for rendered views; read here, on the UI thread (workers must not walk the DOM)."""
        return max(40, self.query_one("#decoded").size.width - 2)

    @work(thread=True, exclusive=True, group="sample")
    def _read_sample(self, addr: Address, wanted: str | None, width: int) -> None:
        """One worker reads the sample and decodes the field to show: one hop back to the UI."""
        try:
            sample = self.app.source.sample(addr)
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not open {addr}: {e}"))
            return
        prepared = self._prepare(sample, self._field_to_show(sample, wanted), width)
        self.app.call_from_thread(self.show_sample, addr, sample, prepared)

    def _field_to_show(self, sample: Any, wanted: str | None) -> str:
        """The field shown before (stepping through samples keeps it), else the rollout view of LLM
        rollouts, else the first interesting field."""
        names = [f.name for f in sample.fields]
        if wanted in names:
            return wanted
        return ROLLOUT if self._is_rollouts(sample) else names[self._first_interesting(sample)]

    def _is_rollouts(self, sample: Any) -> bool:
        try:
            return self.app.source.is_rollouts(sample.version)
        except Exception:  # noqa: BLE001 - fields that cannot be read as rollouts are shown as fields
            return False

    def _prepare(self, sample: Any, name: str, width: int) -> Prepared | PreparedRollout | None:
        """Decode field `name` (in a worker thread); a failure becomes a notification."""
        if name == ROLLOUT:
            try:
                return PreparedRollout(self.app.source.rollout(sample.version, sample.index))
            except Exception as e:  # noqa: BLE001 - the fields still show what is there
                return PreparedRollout(None, f"the rollout view could not be built: {e}")
        try:
            return prepare(sample, name, width)
        except Exception as e:  # noqa: BLE001 - the core should not raise; if it does, say so and carry on
            self.post_message(LoadFailed(f"could not decode {name}: {e}"))
            return None

    async def show_sample(self, addr: Address, sample: Any, prepared: Prepared | None) -> None:
        if addr != self.wanted or self not in self.app.screen_stack:
            return  # a read the person has moved on from (a thread worker runs to its end)
        self.blank = False
        self.addr, self.sample = Address(addr.name, addr.ref, sample.index), sample
        self.sub_title = sample.address
        ok = sample.row_hash.ok
        check = Text(" row hash ✓ matches the data", "green") if ok else Text(
            f" !! ROW HASH MISMATCH: stored {sample.row_hash.stored} ≠ recomputed {sample.row_hash.recomputed}",
            "bold white on red")
        self.query_one("#sample-summary", Static).update(Text.assemble(
            (sample.address, "bold"), f"  row {sample.index:,} of {sample.num_rows:,}  ", check))
        rollouts = self._is_rollouts(sample)
        names = [ROLLOUT] * rollouts + [f.name for f in sample.fields]
        self.field_name = prepared.info.name if prepared else self._field_to_show(sample, self.field_name)
        self.hex_page = 0
        self.shown = (sample, self.field_name)  # set before any await: the highlight below must not decode again
        fields = self.query_one("#fields", OptionList)
        fields.clear_options()
        if rollouts:
            fields.add_option(Option(Text.assemble(("rollout", "bold"), "\n  tokens and findings"), id=ROLLOUT))
        fields.add_options(Option(self._field_label(f), id=f.name) for f in sample.fields)
        fields.highlighted = names.index(self.field_name)  # its OptionHighlighted finds the field already shown
        fields.focus()
        self.refresh_bindings()  # v and G are there for rollouts only
        self.query_one("#raw-body", Static).update("")  # the hex is drawn just after the decoded view
        self.call_after_refresh(self._show_raw)
        if prepared is not None:
            await self.show_field(sample, prepared)

    @staticmethod
    def _field_label(f: Any) -> Text:
        size = "null" if f.null else f"{f.size:,} B"
        return Text.assemble((f.name, "bold"), f"\n  {f.role} · {size}", style="")

    @staticmethod
    def _first_interesting(sample: Any) -> int:
        """The first field that is not a scalar (the one worth looking at), else the first."""
        return next((i for i, f in enumerate(sample.fields) if f.role != "scalar"), 0)

    @on(OptionList.OptionHighlighted, "#fields")
    async def _field_chosen(self, event: OptionList.OptionHighlighted) -> None:
        name = event.option.id
        if self.sample is None or not name or self.shown == (self.sample, name):
            return
        self.field_name, self.hex_page, self.shown = name, 0, None
        decoded = self.query_one("#decoded")
        await decoded.remove_children()
        await decoded.mount(Static(f"decoding {name}…", classes="loading"))
        self.decode_field(self.sample, name, self._decode_width())
        self._show_raw()

    @work(thread=True, exclusive=True, group="decode")
    def decode_field(self, sample: Any, name: str, width: int) -> None:
        prepared = self._prepare(sample, name, width)
        if prepared is not None:
            self.app.call_from_thread(self.show_field, sample, prepared)

    async def show_field(self, sample: Any, prepared: Prepared | PreparedRollout) -> None:
        if sample is not self.sample or prepared.info.name != self.field_name:
            return  # the person has moved on
        self.shown = (sample, prepared.info.name)
        decoded = self.query_one("#decoded")
        with self.app.batch_update():  # one repaint for the swap, not one for the empty pane and one for the view
            await decoded.remove_children()
            if sample is self.sample and prepared.info.name == self.field_name:
                if isinstance(prepared, PreparedRollout):
                    await decoded.mount(RolloutPane(prepared, self.rollout_color_by, id="rollout-pane"))
                else:
                    await decoded.mount(FieldView(prepared, rows=decoded.content_size.height, id="field-view"))

    def _show_raw(self) -> None:
        if self.field_name == ROLLOUT and self.sample is not None and self.addr == self.wanted:
            check = self.sample.row_hash
            self.query_one("#hashes", Static).update(Text.assemble(
                ("row hash ", "dim"), (check.stored or "(none)", "bold"),
                ("  ✓ matches", "green") if check.ok else ("  ✗ MISMATCH", "bold red"),
                ("  · a field on the left shows its bytes and field hash", "dim")))
            self.query_one("#raw-body", Static).update("")
            return
        if self.sample is not None and self.field_name and self.addr == self.wanted:
            self.query_one("#hashes", Static).update(hashes_renderable(self.sample, self.field_name))
            columns = self.query_one("#raw-body", Static).content_size.width or self.size.width
            self.query_one("#raw-body", Static).update(hex_renderable(self.sample, self.field_name, self.hex_page,
                                                                      columns))

    def action_hex_page(self, delta: int) -> None:
        self.hex_page = max(0, self.hex_page + delta)
        self._show_raw()

    def action_frame(self, delta: int) -> None:
        players = self.query(VideoPlayer)
        if players:
            players.first().action_step(delta)

    def action_token(self, delta: int) -> None:
        for kind in (TokenStrip, RolloutTokens):
            shown = self.query(kind)
            if shown:
                shown.first().action_move(delta)
                return

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`v`, `G` and `f` only on a sample of LLM rollouts."""
        if action in ("color_by", "group", "finding"):
            return self.sample is not None and self._is_rollouts(self.sample)
        return True

    def action_color_by(self) -> None:
        """Colour the rollout's tokens by the next value it has (kept for the next samples)."""
        shown = self.query(RolloutTokens)
        if shown:
            self.rollout_color_by = shown.first().cycle()
        else:
            self.notify("the rollout view is the first entry on the left", severity="information")

    def action_finding(self, delta: int) -> None:
        shown = self.query(RolloutTokens)
        if shown:
            shown.first().action_finding(delta)

    def action_group(self) -> None:
        """The responses of this rollout's group side by side."""
        if self.sample is not None:
            self.app.push_screen(RolloutGroupScreen(f"{self.addr.name}@{self.addr.ref}", self.sample.index,
                                                    self.rollout_color_by), self._back_from_group)

    def _back_from_group(self, choice: GroupChoice | None) -> None:
        """The group screen closed: keep the value it coloured by, open the rollout picked there."""
        if choice is None:
            return
        self.rollout_color_by = choice.color_by
        if choice.index is not None:
            self.app.open_address(f"{self.addr.name}@{self.addr.ref}:{choice.index}")
            return
        for shown in self.query(RolloutTokens):
            shown.color_by = choice.color_by if choice.color_by in shown.view.color_by else shown.color_by

    def action_toggle_raw(self) -> None:
        """Hide or show the hex dumps; the hashes stay."""
        self.query_one("#raw").toggle_class("hidden")

    def action_step(self, delta: int) -> None:
        """The next or previous sample: of the version, or of the filter's matches it was opened from."""
        if self.sample is None or self.wanted.index is None:
            return
        if self.matches is not None:
            moved = self.matches.moved(delta)
            if moved is None:
                where = "next" if delta > 0 else "previous"
                self.notify(f"no {where} match: the filter {self.matches.condition} matches {self.matches.total:,}",
                            severity="warning", markup=False)
            else:
                self.matches = moved  # at once: keys pressed before the read is back keep counting from here
                self._find_match(moved)
            return
        index = self.wanted.index + delta
        if 0 <= index < self.sample.num_rows:
            self.load_sample(Address(self.addr.name, self.addr.ref, index))
        else:
            self.notify(f"no sample {index}: the version has {self.sample.num_rows:,} rows", severity="warning")

    @work(thread=True, exclusive=True, group="match")
    def _find_match(self, matches: Matches) -> None:
        try:
            index = self.app.source.filter(matches.version, matches.condition, matches.position, 1).indexes[0]
        except Exception as e:  # noqa: BLE001 - any read failure becomes a notification
            self.post_message(LoadFailed(f"could not read match {matches.position + 1}: {e}"))
            return
        self.app.call_from_thread(self._show_match, matches, index)

    def _show_match(self, matches: Matches, index: int) -> None:
        if matches == self.matches:  # else another key moved on since
            self.load_sample(Address(self.addr.name, self.addr.ref, index))


def _short(addr: Address) -> str:
    """An address as a sample's title shows it: a full version id cut to 12 characters, like `Sample.address`."""
    ref = addr.ref[:12] if len(addr.ref) == 64 and all(c in "0123456789abcdef" for c in addr.ref) else addr.ref
    return str(Address(addr.name, ref, addr.index))

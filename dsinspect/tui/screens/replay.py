"""Replay: a run spec, a step and a rank (or all ranks) → the exact batch, each sample openable.

With the job's transform (package.module:function) the highlighted sample is shown as stored and as
fed to the model, side by side; with a fingerprint log (a file or run record directory) each step is
marked as matching the log or diverging from it. Replay and the log check run in thread workers.
A run that packs documents into sequences shows its batch as rows of sequences (widgets/packed_batch.py);
Enter on one opens its segments (screens/packed_replay.py), each document openable as a sample.

Keys: in a field, every printable key is text (`D`, `R`, `[`, `]` included); Escape leaves the field
(focus to the screen), and then the screen's and the app's keys act. Tab goes spec → step → rank →
transform → log → the batch. The step field takes digits only: anything else is refused with a
message and the field keeps its last good value; an empty step is refused on enter, never read as 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Label, Static

from dsinspect.inspect.packed import short_address
from dsinspect.term.preview import preview
from dsinspect.tui.messages import LoadFailed, OpenAddress
from dsinspect.tui.widgets.key_footer import KeyFooter
from dsinspect.tui.widgets.packed_batch import PackedBatchTable, SequenceView, sequence_views

__all__ = ["ReplayScreen", "Fed"]

COLUMNS = ("rank", "pos", "index", "source", "version", "shard", "row", "row hash", "pad", "verified")
VALUE_WIDTH = 40
FORM = ("replay-spec", "replay-step", "replay-rank", "replay-transform", "replay-log")  # the tab order
HINT = ("enter a spec file, a step and a rank (or all), then press enter · escape leaves a field; "
        "then ] / [ step, D diff, R replay")
_DIGITS = re.compile(r"[0-9]+")


@dataclass
class Fed:
    """One rank's transform output, made displayable in the worker: a table when it is one, else a repr."""

    table: Any = None  # pa.Table or None
    text: str = ""


class ReplayScreen(Screen):
    """`]`/`[` step forward and back; Enter on a sample opens it (on a packed sequence: its segments);
    `r` opens the run record the spec names (shown only when it is a run record directory)."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("right_square_bracket", "step(1)", "Next step"),
        Binding("left_square_bracket", "step(-1)", "Prev step"),
        Binding("r", "open_run", "Run record"),
    ]

    AUTO_FOCUS = ""  # back from a prompt, the focus stays where Escape left it (not back in a field)

    def __init__(self, spec: str = "", step: int = 0, rank: str = "0", transform: str = "", log: str = "") -> None:
        super().__init__()
        self.spec, self.step, self.rank = spec, step, rank
        self.transform, self.log_path = transform or "", log or ""
        self.result: Any = None  # a Replay, or a PackedReplay when the run packs sequences
        self.packed: list[SequenceView] | None = None  # the packed batch's sequences, decoded
        self.fed: dict[int, Fed] = {}
        self.checks: dict[tuple[str, str, str, int], Any] = {}  # (spec, log, transform, step) -> LogCheck | error str
        self.run_record = ""  # the spec, once a replay found it to be a run record directory
        self._step_good = str(step)  # the step field's last accepted text
        self._asked_from: Any = None  # the field enter was pressed in (the results take the focus from it)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="replay-form"):
            yield Label("spec")
            yield Input(self.spec, placeholder="run.json or a run record directory", id="replay-spec")
            yield Label("step")
            yield Input(str(self.step), placeholder="0", id="replay-step")
            yield Label("rank")
            yield Input(self.rank, placeholder="0 or all", id="replay-rank")
        with Horizontal(id="replay-form2"):
            yield Label("transform")
            yield Input(self.transform, placeholder="package.module:function (optional)", id="replay-transform")
            yield Label("log")
            yield Input(self.log_path, placeholder="fingerprint log or run record dir (optional)", id="replay-log")
        yield Static("", id="replay-message", classes="hidden")
        yield Static(HINT, id="replay-summary")
        yield Static("", id="replay-check", classes="hidden")
        yield DataTable(id="replay-batch", cursor_type="row", zebra_stripes=True)
        yield PackedBatchTable(id="replay-packed", classes="hidden")
        with Horizontal(id="replay-compare", classes="hidden"):
            yield VerticalScroll(Static(id="as-stored"), id="as-stored-pane")
            yield VerticalScroll(Static(id="as-fed"), id="as-fed-pane")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "replay"
        self.query_one("#replay-batch", DataTable).add_columns(*COLUMNS)
        if self.spec:
            self.run_replay()
        else:
            self.query_one("#replay-spec", Input).focus()

    # -- keys and fields ------------------------------------------------------------------------

    def action_back(self) -> None:
        """Escape: out of a field (focus to the screen, where its keys act), else back a screen."""
        if isinstance(self.focused, Input):
            self.set_focus(None)
            self.say("keys act on the screen now: ] / [ step, D diff, R replay (tab: back to the fields)")
        else:
            self.app.pop_screen()

    def say(self, text: str, style: str = "dim") -> None:
        """A line under the form (an empty text hides it)."""
        line = self.query_one("#replay-message", Static)
        line.update(Text(text, style))
        line.set_class(not text, "hidden")

    @on(Input.Changed, "#replay-step")
    def _step_changed(self, event: Input.Changed) -> None:
        """Digits only: anything else is refused, said, and the field goes back to its last good text."""
        value = event.value
        if not value or _DIGITS.fullmatch(value):
            self._step_good = value
            return
        refused = "".join(sorted(set(value) - set("0123456789")))
        event.input.value = self._step_good
        event.input.cursor_position = len(self._step_good)
        self.say(f"the step takes digits only (0, 1, 2, …): {refused!r} refused", "bold yellow")

    @on(Input.Submitted)
    def _submitted(self) -> None:
        step = self.query_one("#replay-step", Input).value.strip()
        if not _DIGITS.fullmatch(step):
            self.say("enter a step (a number from 0) before replaying", "bold yellow")
            self.query_one("#replay-step", Input).focus()
            return
        self.say("")
        self._asked_from = self.focused
        self.spec = self.query_one("#replay-spec", Input).value.strip()
        self.step = int(step)
        self.rank = self.query_one("#replay-rank", Input).value.strip() or "0"
        self.transform = self.query_one("#replay-transform", Input).value.strip()
        self.log_path = self.query_one("#replay-log", Input).value.strip()
        self.run_replay()

    def action_step(self, delta: int) -> None:
        if self.spec:
            self.step = max(0, self.step + delta)
            self.query_one("#replay-step", Input).value = str(self.step)
            self.run_replay()

    def run_replay(self) -> None:
        self.query_one("#replay-summary", Static).update(f"replaying step {self.step}, rank {self.rank}…")
        self.compute(self.spec, self.step, self.rank, self.transform)
        self.run_check()

    # -- replay -------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="replay")
    def compute(self, spec: str, step: int, rank: str, transform: str) -> None:
        from dsinspect.inspect.runs import is_run_record

        source, fed = self.app.source, {}
        try:
            if source.packs_sequences(spec, step):
                result = source.replay_packed(spec, step, rank)
                packed = sequence_views(result, source.packed_vocab(result.spec))
            else:
                result, packed = source.replay(spec, step, rank, transform or None), None
                fed = {b.rank: _fed(b.transformed) for b in result.batches} if transform else {}
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not replay step {step} rank {rank}: {e}"))
            return
        try:
            located = self.app.source.run_location(spec)
            record = located if is_run_record(located) else ""
        except Exception:  # noqa: BLE001 - a spec file's path, or one fsspec cannot list: no run to open
            record = ""
        self.app.call_from_thread(self._record_found, record)
        if packed is None:
            self.app.call_from_thread(self.show, result, fed, transform)
        else:
            self.app.call_from_thread(self.show_packed, result, packed)

    def _record_found(self, record: str) -> None:
        if record != self.run_record:
            self.run_record = record
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return bool(self.run_record) if action == "open_run" else True

    def action_open_run(self) -> None:
        """The run record this replay reads: its steps × ranks grid, segments, gaps and check."""
        from dsinspect.tui.screens.run import RunScreen

        if self.run_record:
            self.app.push_screen(RunScreen(self.run_record, self.transform))

    def show(self, result: Any, fed: dict[int, Fed] | None = None, transform: str = "") -> None:
        if result.step != self.step:
            return
        self.result, self.fed, self.packed = result, fed or {}, None
        self._show_table(packed=False)
        fps = "  ".join(f"rank {r}: {fp}" for r, fp in result.fingerprints.items())
        bad = len(result.unverified)
        lines = (f"step {result.step} · epoch {result.epoch} · world size {result.spec.world_size} · batch size "
                 f"{result.spec.batch_size} · ranks {result.ranks}\nfingerprints  {fps}")
        if transform:
            tfps = "  ".join(f"rank {r}: {fp}" for r, fp in result.transformed_fingerprints.items())
            lines += f"\ntransformed   {tfps or '(none)'}"
            lines += f"  ({result.transform_error})" if result.transform_error else ""
        summary = Text(lines)
        if bad:
            summary.append(f"\n{bad} sample(s) no longer match their stored row hash", "bold red")
        self.query_one("#replay-summary", Static).update(summary)
        table = self.query_one("#replay-batch", DataTable)
        table.clear()
        for i, s in enumerate(result.samples):
            table.add_row(str(s.rank), str(s.position), f"{s.index:,}", s.source, s.version[:12], str(s.shard),
                          str(s.shard_row), s.row_hash.hex(), "yes" if s.padding else "",
                          {True: "✓", False: "✗ MISMATCH", None: "-"}[s.verified], key=str(i))
        self.query_one("#replay-compare").set_class(not transform, "hidden")
        self._mark_divergence()
        if result.samples:
            self._compare(0)
        if not isinstance(self.focused, Input) or self.focused is self._asked_from:
            table.focus()  # never out of a field the user went on typing in

    def show_packed(self, result: Any, views: list[SequenceView]) -> None:
        """A packed batch: its sequences a row each, the fingerprint of each rank, the documents that no
        longer verify (a job's transform is not applied: it takes rows)."""
        if result.step != self.step:
            return
        self.result, self.fed, self.packed = result, {}, views
        spec, seq = result.spec, result.spec.sequences
        labels = (" (+1 shared with the next, for labels)" if seq.overlap else " (+1 for labels)") if seq.labels else ""
        fps = "  ".join(f"rank {r}: {fp}" for r, fp in result.fingerprints.items())
        summary = Text(f"step {result.step} · epoch {result.epoch} · world size {spec.world_size} · batch size "
                       f"{spec.batch_size} · ranks {[b.rank for b in result.batches]}\nsequences of {seq.length:,} "
                       f"tokens{labels} · {seq.packing.value} · spec {spec.hash[:12]}\nfingerprints  {fps}")
        if self.transform:
            summary.append(f"\nthe transform {self.transform} is not applied: it takes rows", "dim")
        if result.damaged:
            names = ", ".join(sorted({short_address(a) for _, _, a in result.damaged}))
            summary.append(f"\n{len(result.damaged)} document reading(s) no longer match their stored row hash: "
                           f"{names}", "bold red")
        self.query_one("#replay-summary", Static).update(summary)
        self._show_table(packed=True)
        table = self.query_one("#replay-packed", PackedBatchTable)
        table.show(views)
        self._mark_divergence()
        if not isinstance(self.focused, Input) or self.focused is self._asked_from:
            table.focus()

    def _show_table(self, packed: bool) -> None:
        self.query_one("#replay-batch").set_class(packed, "hidden")
        self.query_one("#replay-packed").set_class(not packed, "hidden")
        if packed:
            self.query_one("#replay-compare").set_class(True, "hidden")

    @on(DataTable.RowSelected, "#replay-packed")
    def _open_sequence(self, event: DataTable.RowSelected) -> None:
        from dsinspect.tui.screens.packed_replay import PackedSequenceScreen

        if self.packed is not None:
            self.app.push_screen(PackedSequenceScreen(self.packed[int(event.row_key.value)], self.result.step))

    @on(DataTable.RowHighlighted, "#replay-batch")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.result is not None and event.row_key is not None and event.row_key.value is not None:
            self._compare(int(event.row_key.value))

    def _compare(self, i: int) -> None:
        """Sample `i` of the batch as stored and as fed to the model (when the run names a transform)."""
        if not self.fed or self.result is None or not 0 <= i < len(self.result.samples):
            return
        s = self.result.samples[i]
        batch = next(b for b in self.result.batches if b.rank == s.rank)
        fields = {f.name: f for f in self.result.fields}
        stored = _kv_table(f"as stored · rank {s.rank} pos {s.position} · {s.source}:{s.index}",
                           [(c, preview(batch.table.column(c)[s.position].as_py(), fields.get(c), VALUE_WIDTH))
                            for c in batch.table.column_names])
        fed = self.fed.get(s.rank, Fed(text="(no output)"))
        if fed.table is not None and fed.table.num_rows == batch.table.num_rows:
            fed_view: Any = _kv_table(f"as fed to the model · {self.transform}",
                                      [(c, preview(fed.table.column(c)[s.position].as_py(), None, VALUE_WIDTH))
                                       for c in fed.table.column_names])
        elif fed.table is not None:
            fed_view = Text(f"as fed to the model · {self.transform}\nthe transform made {fed.table.num_rows} rows "
                            f"from {batch.table.num_rows}: columns {', '.join(fed.table.column_names)}")
        else:
            fed_view = Text(f"as fed to the model · {self.transform}\n{fed.text}")
        self.query_one("#as-stored", Static).update(stored)
        self.query_one("#as-fed", Static).update(fed_view)

    @on(DataTable.RowSelected, "#replay-batch")
    def _open(self, event: DataTable.RowSelected) -> None:
        s = self.result.samples[int(event.row_key.value)]
        self.post_message(OpenAddress(f"{s.source}@{s.version}:{s.index}"))

    # -- the fingerprint log ------------------------------------------------------------------

    def _check_key(self) -> tuple[str, str, str, int]:
        return (self.spec, self.log_path, self.transform, self.step)

    def run_check(self) -> None:
        line = self.query_one("#replay-check", Static)
        line.set_class(not self.log_path, "hidden")
        if not self.log_path:
            return
        key = self._check_key()
        if key in self.checks:
            self._show_check()
            return
        line.update(Text(f"checking step {self.step} against {self.log_path}…", "dim"))
        self.check(*key)

    @work(thread=True, exclusive=True, group="check")
    def check(self, spec: str, log: str, transform: str, step: int) -> None:
        try:
            outcome: Any = self.app.source.check_step(spec, log, step, transform or None)
        except Exception as e:  # noqa: BLE001
            outcome = f"could not check step {step} against the log: {e}"
        self.app.call_from_thread(self._checked, (spec, log, transform, step), outcome)

    def _checked(self, key: tuple[str, str, str, int], outcome: Any) -> None:
        self.checks[key] = outcome
        if key == self._check_key():
            self._show_check()

    def _show_check(self) -> None:
        outcome = self.checks.get(self._check_key())
        if outcome is None:
            return
        line = self.query_one("#replay-check", Static)
        if isinstance(outcome, str):
            line.update(Text(outcome, "bold red"))
        elif outcome.checked == 0:
            line.update(Text(f"step {self.step}: the log has no line for this step", "yellow"))
        elif outcome.divergence is None:  # every line there matches; a gap names the ranks with none
            missing = f"; no line for {', '.join(str(g) for g in outcome.gaps)}" if outcome.gaps else ""
            line.update(Text(f"step {self.step}: ✓ matches the log ({outcome.checked} line(s), "
                             + ", ".join(f"{n} {side}" for side, n in outcome.sides.items()) + ")" + missing,
                             "bold green" if not missing else "yellow"))
        else:
            d = outcome.divergence
            where = f"positions {d.positions}" if d.positions else "no position attributable"
            line.update(Text(f"step {d.step}: ✗ DIVERGES from the log at rank {d.rank} ({d.of}; {where}): {d.reason}",
                             "bold white on red"))
        self._mark_divergence()

    def _mark_divergence(self) -> None:
        """Flag the batch rows the log check names as diverging."""
        outcome = self.checks.get(self._check_key()) if self.log_path else None
        if self.result is None or self.result.step != self.step or outcome is None or isinstance(outcome, str) \
                or outcome.divergence is None:
            return
        d = outcome.divergence
        if self.packed is not None:
            self.query_one("#replay-packed", PackedBatchTable).mark_diverging(d.rank, set(d.positions))
            return
        table = self.query_one("#replay-batch", DataTable)
        verified_col = table.ordered_columns[COLUMNS.index("verified")].key
        for i, s in enumerate(self.result.samples):
            if s.rank == d.rank and s.position in d.positions:
                table.update_cell(str(i), verified_col, Text("✗ DIVERGES", "bold red"))


def _fed(transformed: Any) -> Fed:
    """The transform's output as a table when it is one (see transforms.as_table), else its repr."""
    from dsinspect.errors import UserError
    from dsinspect.loaders.records.transforms import as_table

    try:
        return Fed(table=as_table(transformed))
    except UserError:
        text = repr(transformed).replace("\n", " ")
        return Fed(text=text if len(text) <= 2000 else text[:1999] + "…")


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, expand=True, box=None, padding=(0, 1))
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(name, value)
    return table

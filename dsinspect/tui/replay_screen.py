"""Replay: a run spec, a step and a rank (or all ranks) → the exact batch, each sample openable."""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Label, Static

from dsinspect.tui.messages import LoadFailed, OpenAddress

__all__ = ["ReplayScreen"]

COLUMNS = ("rank", "pos", "index", "source", "version", "shard", "row", "row hash", "pad", "verified")


class ReplayScreen(Screen):
    """`]`/`[` step forward and back; Enter on a sample opens it."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("right_square_bracket", "step(1)", "Next step"),
        Binding("left_square_bracket", "step(-1)", "Prev step"),
    ]

    def __init__(self, spec: str = "", step: int = 0, rank: str = "0") -> None:
        super().__init__()
        self.spec, self.step, self.rank = spec, step, rank
        self.result: Any = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="replay-form"):
            yield Label("spec")
            yield Input(self.spec, placeholder="run.json or a run record directory", id="replay-spec")
            yield Label("step")
            yield Input(str(self.step), id="replay-step", type="integer")
            yield Label("rank")
            yield Input(self.rank, placeholder="0 or all", id="replay-rank")
        yield Static("enter a spec file, a step and a rank (or all), then press enter", id="replay-summary")
        yield DataTable(id="replay-batch", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "replay"
        self.query_one("#replay-batch", DataTable).add_columns(*COLUMNS)
        if self.spec:
            self.run_replay()
        else:
            self.query_one("#replay-spec", Input).focus()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.spec = self.query_one("#replay-spec", Input).value.strip()
        step = self.query_one("#replay-step", Input).value.strip() or "0"
        self.step = int(step) if step.lstrip("-").isdigit() else 0
        self.rank = self.query_one("#replay-rank", Input).value.strip() or "0"
        self.run_replay()

    def action_step(self, delta: int) -> None:
        if self.spec:
            self.step = max(0, self.step + delta)
            self.query_one("#replay-step", Input).value = str(self.step)
            self.run_replay()

    def run_replay(self) -> None:
        self.query_one("#replay-summary", Static).update(f"replaying step {self.step}, rank {self.rank}…")
        self.compute(self.spec, self.step, self.rank)

    @work(thread=True, exclusive=True, group="replay")
    def compute(self, spec: str, step: int, rank: str) -> None:
        try:
            result = self.app.source.replay(spec, step, rank)
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not replay step {step} rank {rank}: {e}"))
            return
        self.app.call_from_thread(self.show, result)

    def show(self, result: Any) -> None:
        if result.step != self.step:
            return
        self.result = result
        fps = "  ".join(f"rank {r}: {fp}" for r, fp in result.fingerprints.items())
        bad = len(result.unverified)
        self.query_one("#replay-summary", Static).update(
            f"step {result.step} · epoch {result.epoch} · world size {result.spec.world_size} · batch size "
            f"{result.spec.batch_size} · ranks {result.ranks}\nfingerprints  {fps}"
            + (f"\n[bold red]{bad} sample(s) no longer match their stored row hash[/]" if bad else ""))
        table = self.query_one("#replay-batch", DataTable)
        table.clear()
        for i, s in enumerate(result.samples):
            table.add_row(str(s.rank), str(s.position), f"{s.index:,}", s.source, s.version[:12], str(s.shard),
                          str(s.shard_row), s.row_hash.hex(), "yes" if s.padding else "",
                          {True: "✓", False: "✗ MISMATCH", None: "-"}[s.verified], key=str(i))
        table.focus()

    @on(DataTable.RowSelected, "#replay-batch")
    def _open(self, event: DataTable.RowSelected) -> None:
        s = self.result.samples[int(event.row_key.value)]
        self.post_message(OpenAddress(f"{s.source}@{s.version}:{s.index}"))

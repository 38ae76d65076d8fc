"""A run record: its summary, segments and gaps, and a grid of steps × ranks (one glyph per cell:
kept, gap, superseded only, the check's divergence). Enter on a cell opens that batch's replay,
checked against the record (a stream learner's record: the rollouts that step consumed,
screens/learner_step.py); `k` checks the whole record (a learner's against its stream); `z` / `Z` zoom
into the highlighted bucket and back out. Reading the record, drawing a grid and the check run in
thread workers.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Label, Static

from dsinspect.tui.screens.learner_step import LearnerStepScreen, learner_check_text
from dsinspect.tui.widgets.key_footer import KeyFooter

__all__ = ["RunScreen"]

STYLES = {"kept": "green", "gap": "bold red", "superseded": "yellow", "none": "", "diverged": "bold white on red"}
SEGMENT_COLUMNS = ("segment", "parent", "start", "world", "batch", "lines", "steps", "kept", "wait/step")
GAPS_SHOWN = 5
PROGRESS_UPDATES = 100  # at most this many progress redraws per check, however long the record


class RunScreen(Screen):
    """Enter on a cell replays it; `k` checks the record; `z`/`Z` zoom; `n`/`p` the next ranks."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("k", "check", "Check the run"),
        Binding("z", "zoom", "Zoom in"),
        Binding("Z", "zoom_out", "Whole run"),
        Binding("n", "ranks(1)", "Next ranks"),
        Binding("p", "ranks(-1)", "Prev ranks"),
        Binding("R", "replay", "Replay"),  # this run's replay form, not the app's empty one
    ]

    def __init__(self, path: str = "", transform: str = "") -> None:
        super().__init__()
        self.path, self.transform = path, transform or ""
        self.view: Any = None          # dsinspect.inspect.runs.RunView
        self.grid: Any = None          # the RunGrid shown
        self.steps: range | None = None  # the zoom (None: the whole run)
        self.rank_page = 0
        self.check_result: Any = None  # a LogCheck once `k` finished
        self.checking = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="run-form"):
            yield Label("run record")
            yield Input(self.path, placeholder="a run record directory (specs/, fingerprints/)", id="run-path")
        yield Static("enter a run record directory, then press enter", id="run-summary")
        yield DataTable(id="run-segments", cursor_type="row", zebra_stripes=True)
        yield Static("", id="run-check", classes="hidden")
        yield Static("", id="run-axis")
        yield DataTable(id="run-grid", cursor_type="cell", show_header=False, cell_padding=0)
        yield Static("", id="run-cell")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = "run"
        self.query_one("#run-segments", DataTable).add_columns(*SEGMENT_COLUMNS)
        if self.path:
            self.load(self.path)
        else:
            self.query_one("#run-path", Input).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("check", "zoom", "zoom_out") and self.view is None:
            return None  # shown, disabled until a record is open
        if action == "ranks":
            return self.view is not None and self.view.rank_count() > len(self.grid.ranks if self.grid else [])
        return True

    @on(Input.Submitted, "#run-path")
    def _submitted(self, event: Input.Submitted) -> None:
        path = event.value.strip()
        if path:
            self.load(path)

    # -- the record ---------------------------------------------------------------------------

    def load(self, path: str) -> None:
        self.path, self.steps, self.rank_page, self.check_result = path, None, 0, None
        self.query_one("#run-summary", Static).update(Text(f"reading {path}…", "dim"))
        self.query_one("#run-check", Static).set_class(True, "hidden")
        self.read(path)

    @work(thread=True, exclusive=True, group="run-read")
    def read(self, path: str) -> None:
        from dsinspect.tui.messages import LoadFailed

        try:
            view = self.app.source.run_view(path)
            summary, grid = view.summary(), view.grid()
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not open the run record {path}: {e}"))
            self.app.call_from_thread(self.query_one("#run-summary", Static).update,
                                      Text(f"could not open {path}: {e}", "bold red"))
            return
        self.app.call_from_thread(self._loaded, path, view, summary, grid)

    def _loaded(self, path: str, view: Any, summary: Any, grid: Any) -> None:
        if path != self.path:
            return
        self.view = view
        self.query_one("#run-summary", Static).update(_summary_text(summary))
        table = self.query_one("#run-segments", DataTable)
        table.clear()
        for s in summary.segments:
            table.add_row(s.id, s.parent or "-", f"{s.start:,}", str(s.world_size), str(s.batch_size),
                          f"{s.lines:,}", f"{s.steps[0]:,}..{s.steps[1]:,}" if s.steps else "-",
                          "yes" if s.kept else Text("abandoned", "yellow"), _wait(s.wait_per_step))
        table.styles.height = min(len(summary.segments), 6) + 1
        self._show_grid(grid)
        self.refresh_bindings()
        self.query_one("#run-grid", DataTable).focus()

    # -- the grid -----------------------------------------------------------------------------

    def redraw(self) -> None:
        if self.view is not None:
            self.draw(self.view, self.steps, self.rank_page, self.check_result)

    @work(thread=True, exclusive=True, group="run-grid")
    def draw(self, view: Any, steps: range | None, page: int, check: Any) -> None:
        from dsinspect.inspect.runs import MAX_ROWS

        ranks = range(page * MAX_ROWS, min(view.rank_count(), (page + 1) * MAX_ROWS))
        grid = view.grid(steps, ranks, check=check)
        self.app.call_from_thread(self._show_grid, grid)

    def _show_grid(self, grid: Any) -> None:
        from dsinspect.inspect.runs import GLYPHS

        self.grid = grid
        table = self.query_one("#run-grid", DataTable)
        table.clear(columns=True)
        for j in range(len(grid.columns)):  # one character each: the header (hidden) would widen them
            table.add_column(" ", width=1, key=str(j))
        for rank, row in zip(grid.ranks, grid.cells):
            table.add_row(*(Text(GLYPHS[c], STYLES[c]) for c in row), label=f"rank {rank} ", key=str(rank))
        if grid.columns:
            per = f"{grid.bucket:,} steps per column" if grid.bucket > 1 else "one step per column"
            ranks = f" · ranks {grid.ranks[0]}..{grid.ranks[-1]} of {grid.all_ranks}" \
                if grid.all_ranks > len(grid.ranks) else ""
            axis = Text.assemble((f"steps {grid.columns[0][0]:,}..{grid.columns[-1][1]:,} ({per}){ranks}   ", "bold"),
                                 *((f"{GLYPHS[k]} {k}  ", STYLES[k]) for k in ("kept", "gap", "superseded")))
        else:
            axis = Text("the record has no step lines", "yellow")
        self.query_one("#run-axis", Static).update(axis)
        self._describe(table.cursor_coordinate.row, table.cursor_coordinate.column)
        self.refresh_bindings()

    @on(DataTable.CellHighlighted, "#run-grid")
    def _highlighted(self, event: DataTable.CellHighlighted) -> None:
        self._describe(event.coordinate.row, event.coordinate.column)

    def _cell(self, row: int, col: int) -> tuple[int, tuple[int, int], str, int | None] | None:
        """(rank, (first, last) steps, status, step Enter opens) of a grid cell."""
        g = self.grid
        if g is None or not 0 <= row < len(g.ranks) or not 0 <= col < len(g.columns):
            return None
        return g.ranks[row], g.columns[col], g.cells[row][col], g.targets[row][col]

    def _describe(self, row: int, col: int) -> None:
        cell = self._cell(row, col)
        line = self.query_one("#run-cell", Static)
        if cell is None:
            line.update("")
            return
        rank, (first, last), status, target = cell
        steps = f"step {first:,}" if first == last else f"steps {first:,}..{last:,}"
        said = {"kept": "logged by the kept history", "gap": "a gap: no kept line",
                "superseded": "only superseded lines (a segment the job did not keep)", "none": "no such rank here",
                "diverged": "the check's first divergence"}[status]
        opens = f" · enter: replay step {target:,}, rank {rank}" if target is not None else ""
        line.update(Text.assemble((f"rank {rank}, {steps}: ", "bold"), (said, STYLES[status]), opens))

    @on(DataTable.CellSelected, "#run-grid")
    def _selected(self, event: DataTable.CellSelected) -> None:
        cell = self._cell(event.coordinate.row, event.coordinate.column)
        if cell is not None and cell[3] is not None:
            self._replay(cell[3], cell[0])

    def action_replay(self) -> None:
        """The replay form filled in with this run: the highlighted cell's step and rank (step 0,
        rank 0 when the cell has none)."""
        if not self.path:
            self.app.action_replay()
            return
        table = self.query_one("#run-grid", DataTable)
        cell = self._cell(table.cursor_coordinate.row, table.cursor_coordinate.column)
        if cell is not None and cell[3] is not None:
            self._replay(cell[3], cell[0])
        else:
            self._replay(0, 0)

    def _replay(self, step: int, rank: int) -> None:
        """The replay of (step, rank), checked against this run's record; a learner's: its rollouts."""
        if self._learner():
            self.app.push_screen(LearnerStepScreen(self.path, step, str(rank)))
            return
        self.app.action_replay(self.path, step, str(rank), log=self.path)

    def _learner(self) -> bool:
        """The record open is a stream learner's (its lines name rollouts, not rows of a version)."""
        return self.view is not None and self.view.learner is not None

    def action_zoom(self) -> None:
        table = self.query_one("#run-grid", DataTable)
        cell = self._cell(table.cursor_coordinate.row, table.cursor_coordinate.column)
        if cell is not None and self.grid.bucket > 1:
            first, last = cell[1]
            self.steps = range(first, last + 1)
            self.redraw()

    def action_zoom_out(self) -> None:
        if self.steps is not None:
            self.steps = None
            self.redraw()

    def action_ranks(self, delta: int) -> None:
        from dsinspect.inspect.runs import MAX_ROWS

        if self.view is None:
            return
        pages = -(-self.view.rank_count() // MAX_ROWS)
        page = min(max(0, self.rank_page + delta), pages - 1)
        if page != self.rank_page:
            self.rank_page = page
            self.redraw()

    # -- the check ----------------------------------------------------------------------------

    def action_check(self) -> None:
        if self.view is None or self.checking:
            return
        self.checking = True
        line = self.query_one("#run-check", Static)
        line.set_class(False, "hidden")
        against = "its stream (the selection run again from the first step)" if self._learner() else "the catalog"
        line.update(Text(f"checking {self.path} against {against}…", "dim"))
        self.check(self.path, self.transform, self._learner())

    @work(thread=True, exclusive=True, group="run-check")
    def check(self, path: str, transform: str, learner: bool = False) -> None:
        """The record against the catalog; a learner's against its stream (in one go: no progress)."""
        step = [0]

        def progress(done: int, total: int) -> None:
            if done == total or done >= step[0]:
                step[0] = done + max(1, total // PROGRESS_UPDATES)
                self.app.call_from_thread(self.query_one("#run-check", Static).update,
                                          Text(f"checking: {done:,} of {total:,} lines…", "dim"))

        try:
            source = self.app.source
            outcome: Any = (source.check_learner(path) if learner
                            else source.check_run(path, transform or None, progress))
        except Exception as e:  # noqa: BLE001
            outcome = f"could not check the run: {e}"
        self.app.call_from_thread(self._checked, path, outcome)

    def _checked(self, path: str, outcome: Any) -> None:
        self.checking = False
        if path != self.path:
            return
        line = self.query_one("#run-check", Static)
        if isinstance(outcome, str):
            line.update(Text(outcome, "bold red"))
            return
        from dsinspect.inspect.learner_view import LearnerCheckView

        self.check_result = outcome
        line.update(learner_check_text(outcome) if isinstance(outcome, LearnerCheckView) else _check_text(outcome))
        if outcome.divergence is not None:
            self.redraw()


def _summary_text(s: Any) -> Text:
    sizes = " → ".join(str(n) for i, n in enumerate(s.world_sizes) if i == 0 or s.world_sizes[i - 1] != n)
    steps = f"{s.steps[0]:,}..{s.steps[1]:,}" if s.steps else "-"
    text = Text.assemble((f"run {s.name}", "bold"), f"  {s.path}\n",
                         f"sources {', '.join(s.sources) or '-'} · ranks {sizes or '-'} · steps {steps} · "
                         f"{s.lines:,} kept lines · {s.superseded:,} superseded · wait/step {_wait(s.wait_per_step)}\n")
    if s.gaps:
        shown = "; ".join(str(g) for g in s.gaps[:GAPS_SHOWN]) + (" …" if len(s.gaps) > GAPS_SHOWN else "")
        text.append(f"gaps: {len(s.gaps)} range(s), {s.missing:,} (step, rank) pair(s): {shown}", "bold red")
    else:
        text.append("gaps: none", "green")
    return text


def _check_text(c: Any) -> Text:
    span = f"steps {c.steps[0]:,}..{c.steps[1]:,}" if c.steps else "no steps"
    extra = f" · {c.superseded:,} superseded line(s) not evidence"
    if c.divergence is not None:
        d = c.divergence
        where = f"positions {d.positions}" if d.positions else "no position attributable"
        return Text(f"✗ first divergence at step {d.step}, rank {d.rank} ({d.of}; {where}): {d.reason}",
                    "bold white on red")
    if c.gaps:
        return Text(f"✗ {c.checked:,} kept line(s) match ({span}), but {len(c.gaps)} gap range(s): "
                    + "; ".join(str(g) for g in c.gaps[:GAPS_SHOWN]) + extra, "bold red")
    return Text(f"✓ {c.checked:,} kept line(s) match the catalog ({span}){extra}", "bold green")


def _wait(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"

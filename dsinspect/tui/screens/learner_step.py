"""A stream learner's step: the rollouts a rank (or every rank) consumed, read back from the commits its
record names however far the stream has moved on, each with its staleness against the bound; the step's
setup, what it dropped as stale, and each rank's fingerprint recorded beside the one its rows give now.

Opened by Enter or `R` on a cell of a learner record's run screen. `]`/`[` step, `a` toggles all ranks
(the Loader replay's `all`), Enter on a rollout opens it in the sample screen's rollout view: the stream up
to the last commit the step read, as an unpublished version (`ConsumedStep.version`). Reads run in workers.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from dsinspect.term import clean
from dsinspect.term.rollout import number
from dsinspect.tui.messages import LoadFailed, OpenAddress
from dsinspect.tui.widgets.consumed_rollouts import ConsumedTable, staleness_text, step_header
from dsinspect.tui.widgets.key_footer import KeyFooter

__all__ = ["LearnerStepScreen", "learner_check_text"]

SHOWN_DIVERGENCES = 3


class LearnerStepScreen(Screen):
    """`path` is a learner record (a path, or its name in `<catalog>/runs`); `rank` a number or "all"."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("a", "all_ranks", "All ranks"),  # before the steps: a narrow footer drops keys from the last
        Binding("right_square_bracket", "step(1)", "Next step"),
        Binding("left_square_bracket", "step(-1)", "Prev step"),
    ]
    DEFAULT_CSS = """
    #learner-summary { height: auto; padding: 0 1; background: $boost; }
    #learner-rollout { height: auto; padding: 0 1; background: $boost; }
    """

    def __init__(self, path: str, step: int = 0, rank: str = "0") -> None:
        super().__init__()
        self.path, self.step, self.rank = path, step, rank
        self.one_rank = rank if rank != "all" else "0"  # the rank `a` comes back to
        self.run: Any = None     # the record (LearnerRun), read once
        self.result: Any = None  # the LearnerStep shown (inspect.learner_view)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="learner-summary")
        yield ConsumedTable(id="learner-rollouts")
        yield Static("", id="learner-rollout")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.sub_title = f"learner step · {self.path}"
        self.load()

    def load(self) -> None:
        who = "all ranks" if self.rank == "all" else f"rank {self.rank}"
        self.query_one("#learner-summary", Static).update(Text(f"reading learner step {self.step:,}, {who}…", "dim"))
        self.compute(self.path, self.step, self.rank)

    @work(thread=True, exclusive=True, group="learner-step")
    def compute(self, path: str, step: int, rank: str) -> None:
        source = self.app.source
        try:
            run = self.run or source.learner_run(path)
            result = source.learner_step(run, step, rank)
        except Exception as e:  # noqa: BLE001 - any read failure is said on the screen
            self.app.call_from_thread(self._failed, step, rank, f"learner step {step:,}, rank {rank}: {e}")
            return
        self.app.call_from_thread(self.show, run, rank, result)

    def _failed(self, step: int, rank: str, line: str) -> None:
        if (step, rank) != (self.step, self.rank):
            return
        self.result = None
        self.query_one("#learner-summary", Static).update(Text(line, "bold red"))
        self.query_one(ConsumedTable).clear()  # never another step's rollouts under this step's error
        self.query_one("#learner-rollout", Static).update("")

    def show(self, run: Any, rank: str, result: Any) -> None:
        self.run = run
        if (result.step, rank) != (self.step, self.rank):
            return  # the person has moved on
        self.result = result
        self.query_one("#learner-summary", Static).update(step_header(result))
        table = self.query_one(ConsumedTable)
        table.show(result)
        table.focus()
        self._describe(0)

    @on(DataTable.RowHighlighted, "#learner-rollouts")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self._describe(int(event.row_key.value))

    def _describe(self, i: int) -> None:
        """The highlighted rollout: where it came from, its key, staleness and response preview (the table
        may be wider than the screen)."""
        line = self.query_one("#learner-rollout", Static)
        if self.result is None or not 0 <= i < len(self.result.rollouts):
            line.update("")
            return
        r = self.result.rollouts[i]
        line.update(Text.assemble(
            (f"rank {r.rank} slot {r.slot}: ", "bold"), f"commit {r.commit} row {r.row} · {self.result.key or 'key'} ",
            (clean(number(r.key)), "bold"), f" · policy version {clean(number(r.policy_version))} · staleness ",
            staleness_text(r.staleness, r.mark), ("  · enter opens it in the rollout view", "dim"),
            "\nresponse ", (clean(r.response), "bold")))

    @on(DataTable.RowSelected, "#learner-rollouts")
    def _selected(self, event: DataTable.RowSelected) -> None:
        if self.result is not None and event.row_key.value is not None:
            self.open_rollout(self.result, int(event.row_key.value))

    @work(thread=True, exclusive=True, group="learner-open")
    def open_rollout(self, result: Any, i: int) -> None:
        """The rollout's address in the stream as the step read it (a version held by the data source)."""
        r = result.rollouts[i]
        try:
            address = self.app.source.consumed_address(result, r.rank, r.slot)
        except Exception as e:  # noqa: BLE001
            self.post_message(LoadFailed(f"could not open rank {r.rank} slot {r.slot} of step {result.step}: {e}"))
            return
        self.post_message(OpenAddress(address))

    def action_step(self, delta: int) -> None:
        step = max(0, self.step + delta)
        if step != self.step:
            self.step = step
            self.load()

    def action_all_ranks(self) -> None:
        """All ranks of the step, or back to the one rank it was opened on."""
        self.rank = self.one_rank if self.rank == "all" else "all"
        self.load()


def learner_check_text(view: Any) -> Text:
    """A learner record's check (inspect.learner_view.LearnerCheckView) in a few lines."""
    c = view.check
    span = f"steps {c.steps.start:,}..{c.steps.stop - 1:,}" if len(c.steps) else "no steps"
    how = "the selection run again from the first step" if c.replayed else "each line on its own (gaps)"
    counts = (f"{c.lines:,} kept line(s) ({span}): {c.consumed:,} rollouts consumed, {c.dropped:,} dropped as stale, "
              f"{c.superseded:,} superseded line(s) not evidence; {how}")
    if c.ok:
        return Text(f"✓ the record matches the stream: {counts}", "bold green")
    text = Text(f"✗ {c.divergences[0]}", "bold white on red")
    for line in c.divergences[1:SHOWN_DIVERGENCES]:
        text.append(f"\n✗ {line}", "bold red")
    if len(c.divergences) > SHOWN_DIVERGENCES:
        text.append(f"\n… {len(c.divergences) - SHOWN_DIVERGENCES} more", "red")
    text.append(f"\n{counts}", "dim")
    return text

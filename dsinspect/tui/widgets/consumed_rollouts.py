"""The rollouts a stream learner's step consumed: a row per rollout (rank, slot, commit, row, key, policy
version, staleness, reward, response preview, row hash), a staleness beyond the bound or negative marked;
and the step's header. Every stored value is drawn as text, never markup."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from dsinspect.inspect.learner_view import BEYOND, NEWER, LearnerStep, position_runs
from dsinspect.term import clean
from dsinspect.term.rollout import number

__all__ = ["ConsumedTable", "step_header", "STALENESS_STYLES"]

STALENESS_STYLES = {BEYOND: "bold white on red", NEWER: "bold yellow"}
_SAID = {BEYOND: " ✗ beyond the bound", NEWER: " newer"}  # newer: sampled by a policy ahead of the learner


class ConsumedTable(DataTable):
    """A step's consumed rollouts; each row's key is its index in `LearnerStep.rollouts`."""

    DEFAULT_CSS = """
    ConsumedTable { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)

    def show(self, step: LearnerStep) -> None:
        self.clear(columns=True)
        self.add_columns("rank", "slot", "commit", "row", step.key or "key", "policy", "staleness", "reward",
                         "response", "row hash")
        for i, r in enumerate(step.rollouts):
            self.add_row(str(r.rank), str(r.slot), str(r.commit), str(r.row), _text(r.key), _text(r.policy_version),
                         staleness_text(r.staleness, r.mark), _text(r.reward), Text(clean(r.response)),
                         r.row_hash[:16], key=str(i))


def staleness_text(staleness: int | None, mark: str) -> Text:
    """A staleness cell: the number, and beyond the bound or negative, said and coloured."""
    return Text(number(staleness) + _SAID.get(mark, ""), STALENESS_STYLES.get(mark, ""))


def step_header(step: LearnerStep) -> Text:
    """The step's setup, what it dropped as stale, and each rank's fingerprint recorded beside the one its
    rows give now."""
    who = "all ranks" if len(step.ranks) > 1 else f"rank {step.ranks[0]}"
    bound = "none" if step.staleness_bound is None else str(step.staleness_bound)
    text = Text.assemble((f"learner step {step.step:,}", "bold"), f" · {who} of {step.world_size} · "
                         f"{step.batch_size} rollouts a rank · stream ", (clean(step.dataset), "bold"),
                         f" in {step.order} order\npolicy version {number(step.learner_version)} · "
                         f"staleness bound {bound} · ")
    if step.dropped:
        text.append(f"{len(step.dropped)} rollout(s) dropped as stale at this step (all ranks): "
                    f"{position_runs(step.dropped)}", "yellow")
    else:
        text.append("no rollout dropped as stale at this step", "dim")
    for c in step.consumed:
        text.append(f"\nfingerprint rank {c.rank}: recorded {c.fingerprint}, recomputed {c.recomputed} ")
        text.append("✓ matches" if c.ok else "✗ DIFFERS: the rows no longer give the recorded fingerprint",
                    "bold green" if c.ok else "bold white on red")
    return text


def _text(value: Any) -> Text:
    return Text(clean(number(value)))

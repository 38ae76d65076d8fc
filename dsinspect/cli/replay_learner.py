"""`dsinspect replay` of a stream learner's record: the rollouts a (step, rank) consumed, read back from the
commits it names (however far the stream moved on), each with its commit and row, key, policy version,
staleness, reward and a response preview; the fingerprint recorded and recomputed. With --check-log:
the whole record against the stream (the selection run again, loaders/stream/learner_record.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from dsinspect.cli.output import emit_json, fail, out
from dsinspect.inspect.learner_view import BEYOND, NEWER, learner_step, position_runs

if TYPE_CHECKING:
    from rich.table import Table

    from dsinspect.inspect.learner_view import LearnerStep
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["replay_learner_cmd", "check_learner_cmd"]


def replay_learner_cmd(catalog: Catalog, directory: str, step: int, rank: str, as_json: bool) -> None:
    from dsinspect.loaders.stream.learner_record import read_learner_run

    shown = learner_step(catalog, read_learner_run(directory), step, rank)
    if as_json:
        emit_json({"run": directory, "step": step, "world_size": shown.world_size,
                   "ranks": [{**c.to_json(), "rollouts": [asdict(r) for r in shown.rollouts if r.rank == c.rank]}
                             for c in shown.consumed]})
    else:
        _print(shown)
    bad = [c for c in shown.consumed if not c.ok]
    if bad:
        fail(f"step {step}, rank {bad[0].rank}: recorded fingerprint {bad[0].fingerprint}, the rows it names give "
             f"{bad[0].recomputed}", 1)


def check_learner_cmd(catalog: Catalog, directory: str, steps: range | None, allow_gaps: bool,
                      as_json: bool) -> None:
    from dsinspect.loaders.stream.learner_record import check_learner_run, read_learner_run

    result = check_learner_run(catalog, read_learner_run(directory), steps, allow_gaps=allow_gaps)
    if as_json:
        emit_json(result.to_json())
    else:
        how = ("the selection run again from the first step: every line is what its rank was given"
               if result.replayed else "each line on its own (gaps before or inside the range)")
        span = f"steps {result.steps.start}..{result.steps.stop - 1}" if len(result.steps) else "no steps"
        out.print(f"{directory}: {result.lines:,} lines over {span}: {result.consumed:,} rollouts consumed, "
                  f"{result.dropped:,} dropped as stale, {result.superseded:,} lines superseded by a resume",
                  markup=False)
        out.print(f"checked {how}")
        for gap in result.gaps:
            out.print(f"gap: {gap}", markup=False)
        for line in result.divergences:
            out.print(f"✗ {line}", markup=False, highlight=False)
        if result.ok:
            out.print("[green]✓[/] the record matches the stream")
    if not result.ok:
        fail(f"{directory}: {result.divergences[0]}", 1)
    if result.lines == 0:
        fail(f"{directory}: no lines in the steps asked for", 2)


def _print(shown: LearnerStep) -> None:
    bound = f", staleness bound {shown.staleness_bound}" if shown.staleness_bound is not None else ""
    who = "all ranks" if len(shown.ranks) > 1 else f"rank {shown.ranks[0]}"
    out.print(f"[bold]learner step {shown.step}[/] · {who} of {shown.world_size} · {shown.batch_size} rollouts a "
              f"rank · stream {shown.dataset!r} in {shown.order} order · policy version {shown.learner_version}{bound}",
              highlight=False)
    if shown.dropped:
        out.print(f"{len(shown.dropped)} rollouts dropped as stale at this step (all ranks): "
                  f"{position_runs(shown.dropped)}", highlight=False)
    for c in shown.consumed:
        out.print(_table(shown, c.rank, len(shown.ranks) > 1))
        mark = "[green]✓ matches[/]" if c.ok else f"[red]✗ the rows give {c.recomputed}[/]"
        out.print(f"fingerprint (recorded) rank {c.rank}: [bold]{c.fingerprint}[/] {mark}", highlight=False)


def _table(shown: LearnerStep, rank: int, many: bool) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"rank {rank}" if many else None, title_justify="left")
    for name in ("#", "commit", "row", shown.key or "key", "policy", "stale", "reward", "response", "row hash"):
        table.add_column(name, overflow="fold")
    for r in (r for r in shown.rollouts if r.rank == rank):
        stale = _number(r.staleness) + {BEYOND: " ✗ beyond the bound", NEWER: " newer"}.get(r.mark, "")
        table.add_row(str(r.slot), str(r.commit), str(r.row), Text(_number(r.key)), Text(_number(r.policy_version)),
                      Text(stale, style="red" if r.mark == BEYOND else ""), Text(_number(r.reward)),
                      Text(r.response), r.row_hash[:16])
    return table


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else "" if value is None else str(value)

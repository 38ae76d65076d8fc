"""`dsinspect replay` of a stream learner's record: the rollouts a (step, rank) consumed, read back from the
commits it names (however far the stream moved on), each with its commit and row, key, policy version,
staleness, reward and a response preview; the fingerprint recorded and recomputed. With --check-log:
the whole record against the stream (the selection run again, loaders/stream/learner_record.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsinspect.cli.output import emit_json, fail, out
from dsinspect.errors import UserError

if TYPE_CHECKING:
    from rich.table import Table

    from dsinspect.loaders.store.catalog import Catalog
    from dsinspect.loaders.stream.learner_record import ConsumedStep, LearnerRun

__all__ = ["replay_learner_cmd", "check_learner_cmd"]

_PREVIEW = 48  # characters of a response shown per rollout


def replay_learner_cmd(catalog: Catalog, directory: str, step: int, rank: str, as_json: bool) -> None:
    from dsinspect.loaders.audit.replay import parse_rank
    from dsinspect.loaders.stream.learner_record import consumed_step, read_learner_run

    run = read_learner_run(directory)
    world = run.spec_at(step).world_size
    ranks = list(range(world)) if rank.strip().lower() == "all" else parse_rank(rank)
    if not 0 <= ranks[0] < world:
        raise UserError(f"rank {ranks[0]} is outside step {step}'s world size {world}")
    consumed = [consumed_step(catalog, run, step, r) for r in ranks]
    if as_json:
        emit_json({"run": directory, "step": step, "world_size": world,
                   "ranks": [{**c.to_json(), "rollouts": _rollouts(c)} for c in consumed]})
    else:
        _print(run, consumed)
    bad = [c for c in consumed if not c.ok]
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
                  f"{result.dropped:,} dropped as stale, {result.superseded:,} lines superseded by a resume")
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


def _rollouts(consumed: ConsumedStep) -> list[dict]:
    """Each consumed rollout as `replay` shows it: where it came from and its key values."""
    cols = _columns(consumed)

    def get(row: dict, name: str) -> object:
        return row.get(cols[name]) if cols[name] else None

    return [{"commit": seq, "row": offset, "key": get(row, "key"), "policy_version": get(row, "policy_version"),
             "staleness": staleness, "reward": get(row, "reward"),
             "response": _preview(get(row, "response_text"), get(row, "response_tokens")),
             "row_hash": row["__dsinspect_row_hash"].hex()}
            for (seq, offset), staleness, row in zip(consumed.positions, consumed.staleness, consumed.rows.to_pylist())]


def _columns(consumed: ConsumedStep) -> dict[str, str | None]:
    """The columns a preview shows, by their rollout meaning (declared or inferred; by name when the
    stream's fields are not rollouts of a language model)."""
    from dsinspect.inspect.rollout_dataset import rollout_columns

    names = set(consumed.rows.column_names)
    meanings = rollout_columns(consumed.fields)

    def column(meaning: str) -> str | None:
        found = meanings.get(meaning) if meanings is not None else meaning
        return found if found in names else None

    return {"key": consumed.key, "policy_version": column("policy_version"), "reward": column("reward"),
            "response_text": column("response_text"), "response_tokens": column("response_tokens")}


def _print(run: LearnerRun, consumed: list[ConsumedStep]) -> None:
    first = consumed[0]
    spec = run.spec_at(first.step)
    bound = f", staleness bound {spec.staleness_bound}" if spec.staleness_bound is not None else ""
    who = "all ranks" if len(consumed) > 1 else f"rank {first.rank}"
    out.print(f"[bold]learner step {first.step}[/] · {who} of {spec.world_size} · {spec.batch_size} rollouts a rank · "
              f"stream {spec.dataset!r} in {spec.order} order · policy version {first.learner_version}{bound}",
              highlight=False)
    if first.dropped:
        out.print(f"{len(first.dropped)} rollouts dropped as stale at this step (all ranks)", highlight=False)
    for c in consumed:
        out.print(_table(c, len(consumed) > 1))
        mark = "[green]✓ matches[/]" if c.ok else f"[red]✗ the rows give {c.recomputed}[/]"
        out.print(f"fingerprint (recorded) rank {c.rank}: [bold]{c.fingerprint}[/] {mark}", highlight=False)


def _table(consumed: ConsumedStep, many: bool) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"rank {consumed.rank}" if many else None, title_justify="left")
    for name in ("#", "commit", "row", consumed.key or "key", "policy", "stale", "reward", "response", "row hash"):
        table.add_column(name, overflow="fold")
    for i, r in enumerate(_rollouts(consumed)):
        table.add_row(str(i), str(r["commit"]), str(r["row"]), Text(_number(r["key"])),
                      Text(_number(r["policy_version"])), Text(_number(r["staleness"])), Text(_number(r["reward"])),
                      Text(r["response"]), r["row_hash"][:16])
    return table


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else "" if value is None else str(value)


def _preview(text: object, tokens: object) -> str:
    if isinstance(text, str):
        shown = text.replace("\n", "⏎")
    elif isinstance(tokens, list):
        shown = " ".join(map(str, tokens))
    else:
        return ""
    return shown if len(shown) <= _PREVIEW else shown[:_PREVIEW - 1] + "…"

"""A stream learner's step as a viewer shows it: the rollouts each rank consumed, read back with
`consumed_step` (slot, commit, row, key, policy version, staleness marked against the bound, reward, a
response preview, row hash), and the record's check with the (step, rank) of its first divergence.

Plain data, no UI: `dsinspect replay` (cli/replay_learner.py), the terminal UI (tui/screens/learner_step.py)
and the web app (web/models/learner.py) show it. The commits a step reads are
read whole, so what they weigh is checked before any row is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsinspect.errors import UserError
from dsinspect.inspect.floats import narrow
from dsinspect.loaders.audit.replay import parse_rank
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.format.rollout_fields import rollout_columns
from dsinspect.loaders.format.rollout_meanings import Meaning
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.stream import check_learner_run, consumed_step, open_stream
from dsinspect.loaders.stream.learner_record import ConsumedStep, LearnerCheck, LearnerRun
from dsinspect.loaders.stream.selection import ranges_of, rows_of

__all__ = ["PREVIEW", "BEYOND", "NEWER", "ConsumedRollout", "LearnerStep", "learner_step", "staleness_mark",
           "LearnerDivergence", "LearnerCheckView", "learner_check", "position_runs", "consumed_rollouts",
           "commit_bytes"]

PREVIEW = 48        # characters of a response shown per rollout (as `dsinspect replay`)
BEYOND = "beyond"   # staler than the bound: the selection never takes one, so the record is wrong
NEWER = "newer"     # sampled by a policy newer than the learner's (negative staleness; order="commit" takes it)


@dataclass(frozen=True)
class ConsumedRollout:
    """One consumed rollout, as a table row shows it (values as stored; float32 keeps its digits)."""

    rank: int
    slot: int              # its place in the rank's batch
    commit: int
    row: int               # within the commit
    key: Any
    policy_version: Any
    staleness: int | None  # learner version - policy version
    mark: str              # BEYOND, NEWER or ""
    reward: Any
    response: str          # one line, at most PREVIEW characters
    row_hash: str          # hex


@dataclass
class LearnerStep:
    """What `ranks` consumed at `step` of a learner's record, and the step's setup."""

    step: int
    ranks: list[int]
    world_size: int
    batch_size: int
    dataset: str
    order: str
    learner_version: int | None
    staleness_bound: int | None
    dropped: list[tuple[int, int]]       # (commit, row) the step dropped as stale, all ranks'
    key: str | None                      # the stream's key field (a rollout id)
    consumed: list[ConsumedStep]         # one per rank, in `ranks` order
    rollouts: list[ConsumedRollout]      # every rank's, in order

    @property
    def ok(self) -> bool:
        """Every rank's recorded fingerprint is the one its rows give now."""
        return all(c.ok for c in self.consumed)

    def consumed_by(self, rank: int) -> ConsumedStep:
        return next(c for c in self.consumed if c.rank == rank)


def learner_step(catalog: Catalog, run: LearnerRun, step: int, rank: str, max_bytes: int | None = None
                 ) -> LearnerStep:
    """The rollouts `rank` (a number, or "all") consumed at `step`. With `max_bytes`, commits (each read
    whole) weighing more are refused in one line before a row is read."""
    spec = run.spec_at(step)
    ranks = list(range(spec.world_size)) if rank.strip().lower() == "all" else parse_rank(rank)
    if not 0 <= ranks[0] < spec.world_size:
        raise UserError(f"rank {ranks[0]} is outside step {step}'s world size {spec.world_size}")
    if max_bytes is not None and (size := commit_bytes(catalog, run, step, ranks)) > max_bytes:
        raise UserError(f"step {step}'s rollouts sit in commits of {size:,} bytes (more than {max_bytes:,}): pick one "
                        f"rank, or read it with dsinspect replay --spec RUN --step {step} --rank R --json")
    consumed = [consumed_step(catalog, run, step, r) for r in ranks]
    first = consumed[0]
    return LearnerStep(step, ranks, spec.world_size, spec.batch_size, spec.dataset, spec.order, first.learner_version,
                       spec.staleness_bound, first.dropped, first.key, consumed,
                       [r for c in consumed for r in consumed_rollouts(c)])


def staleness_mark(staleness: int | None, bound: int | None) -> str:
    """BEYOND for a rollout staler than the bound, NEWER for a negative staleness, else ""."""
    if staleness is None:
        return ""
    if bound is not None and staleness > bound:
        return BEYOND
    return NEWER if staleness < 0 else ""


def position_runs(positions: list[tuple[int, int]]) -> str:
    """(commit, row) positions in words: `commit 7 rows 0..3, commit 8 row 5`."""
    return ", ".join(f"commit {seq} row {offset}" if count == 1 else f"commit {seq} rows {offset}..{offset + count - 1}"
                     for seq, offset, count in ranges_of(positions))


def commit_bytes(catalog: Catalog, run: LearnerRun, step: int, ranks: list[int]) -> int:
    """What the commits `ranks` read at `step` weigh (each is read whole): known before a row is read."""
    seqs = {seq for r in ranks for seq, _ in rows_of(run.line(step, r).get("rows") or [])}
    stream = open_stream(catalog, run.spec_at(step).dataset)
    return sum(s.bytes for seq in sorted(seqs) if (c := stream.commit(seq)) is not None for s in c.shards)


def consumed_rollouts(consumed: ConsumedStep) -> list[ConsumedRollout]:
    """Each rollout of one rank, by its columns' rollout meanings (by name when the stream is not rollouts)."""
    table = consumed.rows
    meanings = rollout_columns(consumed.fields)

    def values(name: str | None) -> list[Any]:
        if name is None or name not in table.column_names:
            return [None] * table.num_rows
        column = table.column(name)
        return [narrow(v, column.type) for v in column.to_pylist()]

    def meant(meaning: Meaning) -> str | None:
        return meanings.get(meaning) if meanings is not None else meaning.value

    keys, policies, rewards = values(consumed.key), values(meant(Meaning.POLICY_VERSION)), values(meant(Meaning.REWARD))
    texts, tokens = values(meant(Meaning.RESPONSE_TEXT)), values(meant(Meaning.RESPONSE_TOKENS))
    hashes = table.column(HASH_COLUMN).to_pylist()
    return [ConsumedRollout(consumed.rank, i, seq, offset, keys[i], policies[i], consumed.staleness[i],
                            staleness_mark(consumed.staleness[i], consumed.staleness_bound), rewards[i],
                            _preview(texts[i], tokens[i]), hashes[i].hex())
            for i, (seq, offset) in enumerate(consumed.positions)]


def _preview(text: object, tokens: object) -> str:
    if isinstance(text, str):
        shown = text.replace("\r", "").replace("\n", "⏎")
    elif isinstance(tokens, list):
        shown = " ".join(map(str, tokens))
    else:
        return ""
    return shown if len(shown) <= PREVIEW else shown[:PREVIEW - 1] + "…"


# -- the check -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LearnerDivergence:
    """The (step, rank) the check's first divergence names, for a grid to mark."""

    step: int
    rank: int


@dataclass
class LearnerCheckView:
    """A learner record's check (`check`) and the (step, rank) of its first divergence, when it is one rank's."""

    check: LearnerCheck
    divergence: LearnerDivergence | None


def learner_check(catalog: Catalog, run: LearnerRun) -> LearnerCheckView:
    """The whole record checked against its stream (the selection run again from the first step)."""
    result = check_learner_run(catalog, run)
    first = result.first  # (step, rank), or (step, None) when the whole step diverges: no one cell to mark
    return LearnerCheckView(result, LearnerDivergence(*first) if first and first[1] is not None else None)

"""Which rollouts a learner step takes from a stream: a pure function of the stream's commits (immutable
once they exist), the learner's position and the policy version it trains at.

Rows are addressed by (commit, offset). A step scans the rows it has not consumed in commit order,
first the ones an earlier step left waiting, then from its cursor on, and sorts each into:

- **stale**: sampled by a policy older than `learner_version - staleness_bound`; dropped (recorded);
- **newer**: sampled by a policy newer than the learner's (only with `order="policy"`: a sampler that
  already has weights the learner has not reached); left waiting for a later step, in order;
- **taken**: the rest, until the step has `batch_size × world_size` rows; rank r gets the r-th slice.

Rows without a policy version (no such column, or null) are always taken. Every rank computes the
same global batch from the same commits, with no communication; the state after a step (cursor and
waiting rows) is all a resume needs, in any world size. Deterministic: the same commits and learner
versions always give the same batches, however late the commits arrived, which is what makes a
learner's record checkable by running the selection again (`learner_record.check_learner_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["ORDERS", "Position", "Selection", "select", "ranges_of", "rows_of"]

ORDERS = ("commit", "policy")


@dataclass(frozen=True)
class Position:
    """Where a learner is: the first row of the stream it has not scanned, and the rows it scanned but
    left waiting (newer than its policy), in stream order."""

    seq: int = 0
    offset: int = 0
    waiting: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict:
        return {"seq": self.seq, "offset": self.offset, "waiting": [list(r) for r in ranges_of(self.waiting)]}

    @classmethod
    def from_json(cls, obj: dict) -> "Position":
        seq, offset = int(obj["seq"]), int(obj["offset"])
        if seq < 0 or offset < 0:
            raise ValueError(f"a stream position is never negative: {seq}, {offset}")
        return cls(seq, offset, tuple(rows_of(obj.get("waiting", []))))


@dataclass
class Selection:
    """One step's outcome: the rows taken (global batch order), dropped as stale, and where it leaves the
    learner. `complete` is False when the stream does not hold enough rows yet (then `taken` is partial
    and nothing of it may be used: the step waits and selects again)."""

    taken: list[tuple[int, int]] = field(default_factory=list)
    dropped: list[tuple[int, int]] = field(default_factory=list)
    position: Position = Position()
    complete: bool = False


def select(position: Position, versions: Callable[[int], np.ndarray | None], need: int,
           learner_version: int | None = None, staleness_bound: int | None = None,
           order: str = "commit") -> Selection:
    """The next `need` rows from `position`. `versions(seq)`: commit seq's policy version per row (float,
    NaN for none), or None when commit seq does not exist (yet)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    low = learner_version - staleness_bound if learner_version is not None and staleness_bound is not None else None
    high = learner_version if order == "policy" and learner_version is not None else None
    out = Selection()
    waiting: list[tuple[int, int]] = []

    def sort(seq: int, offsets: np.ndarray, pv: np.ndarray) -> int:
        """Sort rows `offsets` of commit seq (versions `pv`); the count scanned before the batch filled."""
        stale = pv < low if low is not None else np.zeros(len(pv), bool)
        newer = pv > high if high is not None else np.zeros(len(pv), bool)
        take = ~stale & ~newer
        room = need - len(out.taken)
        cumulative = np.cumsum(take)
        scanned = len(pv) if cumulative[-1] < room else int(np.searchsorted(cumulative, room)) + 1
        s = slice(0, scanned)
        out.taken += [(seq, int(o)) for o in offsets[s][take[s]]]
        out.dropped += [(seq, int(o)) for o in offsets[s][stale[s]]]
        waiting.extend((seq, int(o)) for o in offsets[s][newer[s]])
        return scanned

    pending = list(position.waiting)
    for i, (seq, offset) in enumerate(pending):  # rows left waiting come first: they are earlier
        if len(out.taken) == need:
            waiting.extend(pending[i:])
            break
        pv = versions(seq)
        sort(seq, np.array([offset]), pv[offset:offset + 1])
    seq, offset = position.seq, position.offset
    while len(out.taken) < need:
        pv = versions(seq)
        if pv is None:
            break
        if offset < len(pv):
            scanned = sort(seq, np.arange(offset, len(pv)), pv[offset:])
            offset += scanned
        if offset >= len(pv):
            seq, offset = seq + 1, 0
    out.complete = len(out.taken) == need
    out.position = Position(seq, offset, tuple(waiting))
    return out


def ranges_of(rows: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> list[tuple[int, int, int]]:
    """(commit, offset) rows as runs (commit, first offset, count), in their order."""
    runs: list[list[int]] = []
    for seq, offset in rows:
        if runs and runs[-1][0] == seq and runs[-1][1] + runs[-1][2] == offset:
            runs[-1][2] += 1
        else:
            runs.append([seq, offset, 1])
    return [tuple(r) for r in runs]


def rows_of(runs: list) -> list[tuple[int, int]]:
    """The inverse of `ranges_of`; refuses what is not a list of non-negative (commit, offset, count)."""
    rows: list[tuple[int, int]] = []
    for run in runs:
        seq, offset, count = (int(v) for v in run)
        if seq < 0 or offset < 0 or count < 1 or len(run) != 3:
            raise ValueError(f"not a run of stream rows: {run!r}")
        rows += [(seq, offset + k) for k in range(count)]
    return rows

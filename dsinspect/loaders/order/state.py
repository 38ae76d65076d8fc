"""Loader state: a few integers and hashes, JSON-able, O(1) to save and to restore.

The position is global (world-size independent), so a state restores into any number of ranks,
workers or batch size. The order hash refuses a state from another data order; the receipt (a
hash of the next samples) proves the restored loader continues exactly where the saved one stood.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
import xxhash

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.order.plan import locate_step, samples_at
from dsinspect.loaders.order.spec import RunSpec, Start

__all__ = ["LoaderState", "STATE_FORMAT", "ResumePoint", "receipt", "check_states", "disagreement"]

STATE_FORMAT = "dsinspect.loader-state/1"
RECEIPT_SAMPLES = 16


def receipt(spec: RunSpec, step: int, epoch: int, position: int) -> str:
    """Hash of where the run stands (step, epoch, position) and of the (source, index) of the next
    samples from there: world-size free, and any edit to the state shows."""
    positions = np.arange(position, min(position + RECEIPT_SAMPLES, spec.epoch_length), dtype=np.int64)
    sources, indices = samples_at(spec, epoch, positions)
    where = np.array([step, epoch, position], dtype=np.int64)
    return xxhash.xxh3_64_hexdigest(np.concatenate([where, sources.astype(np.int64), indices]).tobytes())


@dataclass(frozen=True)
class LoaderState:
    order_hash: str
    step: int
    epoch: int
    position: int
    receipt: str
    world_size: int
    batch_size: int
    rank: int
    segment: str | None = None  # the run record segment that saved it (docs/RUN_RECORDS.md), if recording

    @classmethod
    def at(cls, spec: RunSpec, step: int, rank: int, segment: str | None = None) -> "LoaderState":
        """The state of a loader whose next batch is `step`."""
        epoch, position = locate_step(spec, step)
        return cls(spec.order_hash, step, epoch, position, receipt(spec, step, epoch, position),
                   spec.world_size, spec.batch_size, rank, segment)

    def to_json(self) -> dict[str, Any]:
        data = {"format": STATE_FORMAT, **asdict(self)}
        if self.segment is None:  # a loader that does not record: the state as it always was
            del data["segment"]
        return data

    @classmethod
    def from_json(cls, data: Any) -> "LoaderState":
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise UserError(f"not a dsinspect loader state (expected format {STATE_FORMAT!r})")
        try:
            state = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k != "segment"},
                        segment=data.get("segment"))
        except KeyError as e:
            raise UserError(f"loader state is missing {e}") from None
        ints = ("step", "epoch", "position", "world_size", "batch_size", "rank")
        if not all(isinstance(getattr(state, k), int) and not isinstance(getattr(state, k), bool)
                   and 0 <= getattr(state, k) < 2 ** 63 for k in ints):  # beyond int64: nonsense, and numpy overflows
            raise UserError(f"loader state has a non-integer or negative field among {ints}")
        if not isinstance(state.order_hash, str) or not isinstance(state.receipt, str):
            raise UserError("loader state has a malformed order_hash or receipt")
        if state.segment is not None and not (isinstance(state.segment, str) and len(state.segment) <= 64):
            raise UserError("loader state has a malformed segment")
        return state

    def resume_spec(self, spec: RunSpec) -> RunSpec:
        """`spec` (any world size and batch size) continuing from this state; refuses another order."""
        if self.order_hash != spec.order_hash:
            raise UserError(f"loader state belongs to another data order (state {self.order_hash[:12]}, "
                            f"run {spec.order_hash[:12]}): same versions, seed, shuffle and mixture are required")
        if self.position >= spec.epoch_length:
            raise UserError(f"loader state position {self.position} is outside the epoch ({spec.epoch_length})")
        resumed = spec.replace(start=Start(self.step, self.epoch, self.position))
        if receipt(resumed, self.step, self.epoch, self.position) != self.receipt:
            raise IntegrityError(f"resume receipt mismatch at step {self.step}: the restored order would not "
                                 "continue with the samples the saved loader was about to read")
        return resumed

    def point(self) -> ResumePoint:
        """What ranks resuming from this state together must agree on (check_states)."""
        return ResumePoint(self.step, self.epoch, self.position, self.order_hash, "", self.segment or "")


def check_states(states: Sequence[dict[str, Any]] | dict[int, dict[str, Any]]) -> None:
    """Refuse a set of states that ranks are about to resume from unless they are the states of one
    checkpoint: one data order, step and in-epoch position, and one record segment. Ranks resuming
    from different checkpoints would lose or repeat samples and get different numbers of steps (the
    next collective of the job hangs), even at one step: a run resumed with another global batch
    stands elsewhere at the same step. `states`: a list in rank order, or {rank: state}. The error
    names what differs and the ranks on each side."""
    items = states.items() if isinstance(states, dict) else enumerate(states)
    points = {int(rank): LoaderState.from_json(state).point() for rank, state in items}
    problem = disagreement(points)
    if problem:
        raise UserError(problem)


@dataclass(frozen=True)
class ResumePoint:
    """Where a rank's next batch comes from, as ranks compare it before they start: the step, its
    epoch and in-epoch position, the data order's hash, the run spec's hash ("" when not compared)
    and the record segment the rank's state came from ("" for none)."""

    step: int
    epoch: int
    position: int
    order: str
    spec: str = ""
    segment: str = ""


_ASPECTS = (  # (what differs, its words in the error, how a side shows it)
    ("order", "data orders", lambda p: f"order {p.order[:12]}"),
    ("step", "steps", lambda p: f"step {p.step}"),
    ("position", "positions in the order", lambda p: f"step {p.step} at epoch {p.epoch}, position {p.position}"),
    ("spec", "run specs", lambda p: f"spec {p.spec[:12]}"),
    ("segment", "record segments", lambda p: f"segment {p.segment[:12] or 'none'}"),
)


def disagreement(points: dict[int, ResumePoint]) -> str | None:
    """One line naming what the ranks' points disagree on and the ranks on each side, or None when
    they all agree. Positions are named when ranks stand at one step but elsewhere in the order."""
    sides: dict[ResumePoint, list[int]] = {}
    for rank, point in sorted(points.items()):
        sides.setdefault(point, []).append(rank)
    if len(sides) < 2:
        return None
    at_step: dict[int, set[tuple[int, int]]] = {}
    for point in sides:
        at_step.setdefault(point.step, set()).add((point.epoch, point.position))
    differs = {name: len({getattr(point, name) for point in sides}) > 1
               for name in ("order", "step", "spec", "segment")}
    differs["position"] = any(len(places) > 1 for places in at_step.values())
    # another order, step or position is another spec (its start): the spec is named when nothing else differs
    differs["spec"] = differs["spec"] and not (differs["order"] or differs["step"] or differs["position"])
    what = [words for key, words, _ in _ASPECTS if differs[key]]
    shown = [show for key, _, show in _ASPECTS if differs[key] and not (key == "step" and differs["position"])]
    found = "; ".join(", ".join(show(point) for show in shown)
                      + f" on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
                      for point, ranks in sorted(sides.items(), key=lambda side: (side[0].step, side[1])))
    what = " and ".join(what) if len(what) < 3 else ", ".join(what[:-1]) + " and " + what[-1]
    return (f"ranks resume from states saved at different {what} ({found}): load the states of one "
            "checkpoint on every rank")


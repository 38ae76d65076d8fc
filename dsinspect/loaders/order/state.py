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

__all__ = ["LoaderState", "STATE_FORMAT", "receipt", "check_states"]

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


def check_states(states: Sequence[dict[str, Any]] | dict[int, dict[str, Any]]) -> None:
    """Refuse a set of states that ranks are about to resume from unless they stand at one step of
    one data order: ranks resuming from different checkpoints would lose or repeat samples and get
    different numbers of steps (the next collective of the job hangs). `states`: a list in rank
    order, or {rank: state}. The error names every distinct step and the ranks at it."""
    items = states.items() if isinstance(states, dict) else enumerate(states)
    parsed = {int(rank): LoaderState.from_json(state) for rank, state in items}
    where: dict[tuple[str, int], list[int]] = {}
    for rank, state in sorted(parsed.items()):
        where.setdefault((state.order_hash, state.step), []).append(rank)
    if len(where) > 1:
        raise UserError(states_disagree({key[1]: ranks for key, ranks in where.items()},
                                        len({key[0] for key in where}) > 1))


def states_disagree(steps: dict[int, list[int]], orders: bool = False) -> str:
    """One line naming the steps the ranks stand at: {step: [ranks]}."""
    found = "; ".join(f"step {step} on rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}"
                      for step, r in sorted(steps.items()))
    what = "different data orders and steps" if orders else "different steps"
    return (f"ranks resume from states saved at {what} ({found}): load the states of one checkpoint on "
            "every rank")

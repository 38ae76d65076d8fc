"""Loader state: a few integers and hashes, JSON-able, O(1) to save and to restore.

The position is global (world-size independent), so a state restores into any number of ranks,
workers or batch size. The order hash refuses a state from another data order; the receipt (a
hash of the next samples) proves the restored loader continues exactly where the saved one stood.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import xxhash

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.order.plan import locate_step, samples_at
from dsinspect.loaders.order.spec import RunSpec, Start

__all__ = ["LoaderState", "STATE_FORMAT", "receipt"]

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

    @classmethod
    def at(cls, spec: RunSpec, step: int, rank: int) -> "LoaderState":
        """The state of a loader whose next batch is `step`."""
        epoch, position = locate_step(spec, step)
        return cls(spec.order_hash, step, epoch, position, receipt(spec, step, epoch, position),
                   spec.world_size, spec.batch_size, rank)

    def to_json(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any) -> "LoaderState":
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise UserError(f"not a dsinspect loader state (expected format {STATE_FORMAT!r})")
        try:
            state = cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except KeyError as e:
            raise UserError(f"loader state is missing {e}") from None
        ints = ("step", "epoch", "position", "world_size", "batch_size", "rank")
        if not all(isinstance(getattr(state, k), int) and not isinstance(getattr(state, k), bool)
                   and 0 <= getattr(state, k) < 2 ** 63 for k in ints):  # beyond int64: nonsense, and numpy overflows
            raise UserError(f"loader state has a non-integer or negative field among {ints}")
        if not isinstance(state.order_hash, str) or not isinstance(state.receipt, str):
            raise UserError("loader state has a malformed order_hash or receipt")
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

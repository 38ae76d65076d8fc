"""The stateful loader of packed sequences: one rank's `PackedBatch`es in the order the run spec fixes,
resumable in O(1) into any world size or batch size, recording what it read (docs/PRETRAINING.md).

The same contract as `Loader` for rows: iterating yields the rest of the current epoch; a state is a
few integers (a position in the order of sequences) with a receipt; a run record holds a line per
step whose per-sample digests are the sequences' (sequences/digests.py).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Iterator, Sequence

from dsinspect.errors import UserError
from dsinspect.loaders.order.plan import BatchPlan, epoch_end, locate_step, plan_batch, plan_steps
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.read.packed_reader import PackedReader
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["PackedLoader"]

_AHEAD = 8  # steps whose shards are fetched ahead of the one read
_PLAN_CHUNK = 64  # steps planned per vectorised pass
_RUN = 16  # steps read together (runs grow 1, 2, 4, ... after a start or jump)


class PackedLoader:
    """One rank's packed batches. `cache` is the node-local shard cache (default: $DSINSPECT_CACHE);
    `record_dir` writes run records (docs/RUN_RECORDS.md) with per-sequence digests (`record_samples`:
    True, False or "auto"); `fill=False` fetches nothing ahead."""

    def __init__(self, spec: RunSpec, rank: int = 0, catalog: Catalog | None = None, *,
                 cache: ShardCache | None = None, record_dir: str | None = None,
                 record_samples: bool | str = "auto", fill: bool = True):
        if catalog is None:
            raise UserError("PackedLoader needs a catalog: PackedLoader(spec, rank, catalog=Catalog(url))")
        if not 0 <= rank < spec.world_size:
            raise UserError(f"rank {rank} is outside the world size {spec.world_size}")
        self.spec, self.rank, self.catalog = spec, rank, catalog
        self._reader = PackedReader(catalog, spec, cache, fill=fill)
        self._step = spec.start.step
        self._recorder = RunRecorder(record_dir, rank, samples=record_samples) if record_dir else None
        self._parent: str | None = None  # the segment whose state this loader resumed from
        self._warmed = 0  # the steps before it had their shards looked ahead at
        self._plans: dict[int, BatchPlan] = {}
        self._run: deque[PackedBatch] = deque()  # batches read with an earlier step's, not yet yielded
        self._run_len, self._run_next = 0, -1  # the last run's length, and the step after it

    @property
    def step(self) -> int:
        """The step of the next batch."""
        return self._step

    @property
    def epoch(self) -> int:
        """The epoch of the next batch."""
        return locate_step(self.spec, self._step)[0]

    def __iter__(self) -> Iterator[PackedBatch]:
        epoch = self.epoch
        while self.epoch == epoch:
            yield self._next()

    def batch_at(self, step: int) -> PackedBatch:
        """The batch of any step, read now (no effect on the iteration position)."""
        return self._reader.read(self._plans.get(step) or plan_batch(self.spec, step, self.rank))

    def batches_at(self, steps: Sequence[int], *, ahead: Sequence[int] = ()) -> list[PackedBatch]:
        """The batches of `steps`, read together (one vectorised pass: consecutive steps share their
        shards' reads), with the shards of the steps `ahead` fetched behind; nothing recorded, no
        effect on the iteration position. What a DataLoader worker reading its own steps calls."""
        missing = [s for s in (*steps, *ahead) if s not in self._plans]
        if missing:  # planned once: a worker's `ahead` steps are the next call's `steps`
            planned = dict(zip(missing, plan_steps(self.spec, missing, self.rank)))
            self._plans = {s: self._plans.get(s) or planned[s] for s in (*steps, *ahead)}
        if ahead:
            self._reader.warm([self._plans[s] for s in ahead])
        return self._reader.read_many([self._plans[s] for s in steps])

    def _plan(self, step: int) -> BatchPlan:
        """Plans come in vectorised chunks (one pass serves many steps), from the asked step on."""
        plan = self._plans.get(step)
        if plan is None:
            self._plans = {p.step: p for p in plan_steps(self.spec, range(step, step + _PLAN_CHUNK), self.rank)}
            plan = self._plans[step]
        return plan

    def _from_run(self, step: int, plan: BatchPlan) -> PackedBatch:
        """The batch of `step` from the run of steps read with it: up to _RUN steps (not past the
        epoch's end or the planned chunk), twice as many as the last run, so a start or a jump reads
        one batch first."""
        if not self._run or self._run[0].step != step:
            self._run_len = min(_RUN, 2 * self._run_len) if step == self._run_next else 1
            k = max(1, min(self._run_len, epoch_end(self.spec, step) - step, max(self._plans) + 1 - step))
            self._run = deque(self._reader.read_many([self._plans[s] for s in range(step, step + k)]))
            self._run_next = step + k
        return self._run.popleft()

    def _next(self) -> PackedBatch:
        step, asked = self._step, time.monotonic()
        plan = self._plan(step)
        ahead = min(step + 2 * _AHEAD, max(self._plans) + 1)
        if step + _AHEAD >= self._warmed:  # look _AHEAD steps further at once (each step is looked at once)
            if self._reader.warm([self._plans[s] for s in range(max(step, self._warmed), ahead)]):
                self._warmed = ahead
        batch = self._from_run(step, plan)
        self._step = step + 1  # consumed: a state saved now resumes after this batch
        if self._recorder:
            self._recorder.begin(self.spec, self._parent)
            self._recorder.record(step, batch.epoch, batch.fingerprint, len(batch), row_hashes=batch.digests,
                                  data_bytes=batch.tokens.nbytes, wait=time.monotonic() - asked)
        return batch

    def stats(self) -> dict[str, Any]:
        """The shard cache's counters: fetches, hits and misses, retries, verification failures."""
        return self._reader.cache.stats.snapshot()

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts and a receipt of what it holds (as `Loader.state_dict`)."""
        segment = None
        if self._recorder:
            segment = self._recorder.begin(self.spec, self._parent)
            self._recorder.sync()
        return LoaderState.at(self.spec, self._step, self.rank, segment).to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`, saved by a loader of the same data order with any world size or batch
        size. O(1): nothing is read or skipped."""
        saved = LoaderState.from_json(state)
        resumed = saved.resume_spec(self.spec)
        cache, fill = self._reader.cache, self._reader.fill
        self._reader.close()
        self.spec, self._step, self._parent = resumed, resumed.start.step, saved.segment
        self._reader = PackedReader(self.catalog, resumed, cache, fill=fill)
        self._warmed, self._plans, self._run = 0, {}, deque()
        if self._recorder:
            self._recorder.begin(resumed, self._parent)

    def close(self) -> None:
        self._reader.close()
        if self._recorder:
            self._recorder.close()

    def __enter__(self) -> "PackedLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

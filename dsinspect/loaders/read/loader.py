"""The stateful loader: one rank's batches, in the order the run spec fixes, resumable in O(1).

Iterating yields the rest of the current epoch (the next `for` starts the next epoch). A background
thread reads ahead along the known order, across epoch boundaries.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.format.arrow_errors import OffsetLimitError
from dsinspect.loaders.order.plan import BatchPlan, epoch_end, locate_step, plan_steps
from dsinspect.loaders.order.spec import RunSpec, Shuffle
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.batch import Batch
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.reader import BatchReader, Layout
from dsinspect.loaders.read.stats import PeriodicLogger
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["Loader"]


_PLAN_CHUNK = 256    # steps planned per vectorised pass (and looked ahead for shards to fetch)
_RUN = 16            # steps read together without prefetch (runs grow 1, 2, 4, ... after a start or jump)


class Loader:
    """One rank's batches. `prefetch` batches are assembled ahead in a thread; off by default, since
    assembly is GIL-bound Python (measured: a thread halved throughput) while shard fetches already
    run ahead in the background along the known order. `cache` is the node-local shard cache
    (default: $DSINSPECT_CACHE, no bound); `stats_interval` logs a stats line (and a starvation
    warning) every so many seconds.
    `transform(batch)` runs where the batch is read (prefetch thread, DataLoader worker); its result
    is `batch.transformed`. Seed randomness from `batch.seeds` (one per sample, derived from the
    run seed, epoch and index), so replay re-creates exactly what the model was fed.
    `record_dir` writes run records (docs/RUN_RECORDS.md): a segment (its spec and a header) at
    `load_state_dict` or with the first batch read, and a line per step: the fingerprint of the rows
    as stored (or, with `fingerprint_of="transformed"`, of the transform's output), per-sample
    digests (`record_samples`: True, False or "auto") and the time waited for the batch.
    `state_dict()` makes every line so far durable first.
    `fill=False` starts nothing in the background: each batch reads its rows from the cache or, for
    shards it lacks, only their parts (a process that reads a batch or two and then forks)."""

    def __init__(self, spec: RunSpec, rank: int = 0, catalog: Catalog | None = None, *,
                 columns: Sequence[str] | None = None, prefetch: int = 0, record_dir: str | None = None,
                 cache: ShardCache | None = None, stats_interval: float | None = None,
                 transform: Callable[[Batch], Any] | None = None, fingerprint_of: str = "stored",
                 record_samples: bool | str = "auto", fill: bool = True):
        if catalog is None:
            raise UserError("Loader needs a catalog: Loader(spec, rank, catalog=Catalog(url))")
        if not 0 <= rank < spec.world_size:  # now, not at the first batch (plan_batch's words)
            raise UserError(f"rank {rank} is outside the world size {spec.world_size}")
        self.spec, self.rank, self.catalog, self.transform = spec, rank, catalog, transform
        self._reader = BatchReader(catalog, spec, columns, cache, fill=fill)
        self._step = spec.start.step
        self._prefetch = prefetch
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: deque[tuple[int, Future]] = deque()
        self._recorder = RunRecorder(record_dir, rank, samples=record_samples) if record_dir else None
        self._parent: str | None = None  # the segment whose state this loader resumed from
        # the segment begins at the first batch or restore, never at construction: a resuming job's
        # loader is built with the spec of step 0 and restored just after
        if fingerprint_of not in ("stored", "transformed"):
            raise UserError(f"fingerprint_of must be 'stored' or 'transformed', not {fingerprint_of!r}")
        if fingerprint_of == "transformed" and transform is None:
            raise UserError("fingerprint_of='transformed' needs a transform")
        self._fingerprint_of = fingerprint_of
        self._stats = self._reader.cache.stats
        self._logger = PeriodicLogger(self._stats, stats_interval)
        self._last_yield: float | None = None
        self._last_read: float | None = None
        self._run: deque[Batch] = deque()  # batches read with an earlier step's, not yet yielded
        self._run_len, self._run_next = 0, -1  # the last run's length, and the step after it
        self._source_names = tuple(s.name for s in spec.sources)
        self._plans: dict[int, tuple[BatchPlan, Layout | None]] = {}
        self._replan_at: int | None = None  # the step at which the chunk planned is planned again, ahead
        self._upcoming: Callable[[int, int], Sequence[int]] = _every(1)  # the steps asked after a step

    # -- iteration -----------------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        """The columns each batch holds (its row hashes apart)."""
        return list(self._reader.columns)

    @property
    def dense_columns(self) -> frozenset[str]:
        """The columns `Batch.to_numpy()` gives as one fixed-shape array (numbers, fixed-size lists)."""
        return self._reader.numeric

    @property
    def step(self) -> int:
        """The step of the next batch."""
        return self._step

    @property
    def epoch(self) -> int:
        """The epoch of the next batch."""
        return locate_step(self.spec, self._step)[0]

    def __iter__(self) -> Iterator[Batch]:
        epoch = self.epoch
        spec, end = None, 0
        while True:
            if self.spec is not spec:  # first, or restored inside the loop: where this epoch ends
                spec = self.spec
                if self.epoch != epoch:
                    return
                end = epoch_end(spec, self._step)
            if self._step >= end:
                return
            yield self._next()

    def batch_at(self, step: int) -> Batch:
        """The batch of any step, read now (no effect on the iteration position). Steps
        `step + k * stride` are planned along with it (see `set_stride`)."""
        plan, layout = self._plan(step)
        if layout is None:  # split every plan of the chunk by shard at once (a DataLoader worker reads them all)
            planned = list(self._plans.values())
            layouts = self._reader.layouts([p for p, _ in planned])
            self._plans = {p.step: (p, lay) for (p, _), lay in zip(planned, layouts)}
            layout = self._plans[step][1]
        return self._read(plan, layout)

    def batches_at(self, steps: Sequence[int]) -> list[Batch]:
        """The batches of several steps, read together under a global shuffle (one gather per
        column and shard: cheaper per batch than `batch_at` each; see `_from_run` for why not under
        the others); no effect on the iteration position."""
        if self.spec.shuffle is not Shuffle.GLOBAL:
            return [self.batch_at(s) for s in steps]
        return self._read_many([self._plan(s) for s in steps])

    def set_stride(self, stride: int) -> None:
        """Say that `batch_at` will be asked for every `stride`-th step (a DataLoader worker of
        `stride` workers), so plans and shard fetches run ahead along those steps."""
        self.set_upcoming(_every(max(1, stride)))

    def set_upcoming(self, upcoming: Callable[[int, int], Sequence[int]]) -> None:
        """Say which steps `batch_at` / `batches_at` will be asked for: `upcoming(step, n)` gives
        up to `n` of them in order, from `step` on (a TorchLoader worker's runs), so plans and
        shard fetches run ahead along exactly those."""
        self._upcoming = upcoming
        self._plans = {}

    def warm(self, steps: Iterable[int]) -> None:
        """Start fetching the shards these future steps read, for callers that read steps out of
        order (a DataLoader worker reads every W-th step through `batch_at`)."""
        self._reader.warm(plan_steps(self.spec, list(steps), self.rank))

    def _plan(self, step: int) -> tuple[BatchPlan, Layout | None]:
        """Plans (and their split by shard) come in vectorised chunks: one pass serves many steps."""
        planned = self._plans.get(step)
        if planned is None or step == self._replan_at:
            if not self._plans:  # the first batch: plan just it (a third of the work)
                steps: Sequence[int] = [step]
            else:  # start small (the first batch should not wait for 256 plans), then grow to full chunks
                steps = self._upcoming(step, min(_PLAN_CHUNK, max(4, 2 * len(self._plans))))
            plans = plan_steps(self.spec, steps, self.rank)
            self._plans = {p.step: (p, None) for p in plans}  # layouts per read: a run splits its rows at once
            # where fills run ahead along the order (a sliding shuffle under a bound), a chunk is
            # planned again from its middle, so the shards of the steps after it are known (and
            # their fills started, BatchReader.warm) before its last steps are read
            again = self._reader.fills_in_order and len(plans) >= 4
            self._replan_at = plans[len(plans) // 2].step if again else None
            self._reader.warm(plans)
            planned = self._plans[step]
        return planned

    def _read(self, plan: BatchPlan, layout: Layout | None = None) -> Batch:
        return self._read_many([(plan, layout)])[0]

    def _read_many(self, planned: Sequence[tuple[BatchPlan, Layout | None]]) -> list[Batch]:
        """The batches of consecutive plans, read together (one gather per column and shard)."""
        # the time since the last read ended is what the consumer spent on it: its patience for
        # cold reads while shards fill (BatchReader.read)
        patience = None if self._last_read is None else time.monotonic() - self._last_read
        try:
            if len(planned) == 1:
                columns, hashes = self._reader.read(*planned[0], patience)
            else:
                columns, hashes = self._reader.read_many([plan for plan, _ in planned], patience)
        except OffsetLimitError as e:
            if len(planned) > 1:  # the run's rows in one column pass Arrow's limit, each batch's may not
                return [b for one in planned for b in self._read_many([one])]
            raise OffsetLimitError(f"step {planned[0][0].step}, rank {self.rank}: {e}: use a smaller batch_size "
                                   f"(now {self.spec.batch_size:,})", e.column) from None
        for v in (hashes, *columns.values()):
            if isinstance(v, np.ndarray):
                v.flags.writeable = False  # shared with the Arrow form, as Arrow's own buffers are
        batches, at = [], 0
        for plan, _ in planned:
            n = len(plan.indices)
            part = columns if len(planned) == 1 else \
                {c: v[at:at + n] if isinstance(v, np.ndarray) else v.slice(at, n) for c, v in columns.items()}
            batch = Batch(plan, source_names=self._source_names, columns=part, hash_array=hashes[at:at + n],
                          schema=self._reader.schema, numeric=self._reader.numeric)
            if self.transform is not None:
                batch.transformed = self.transform(batch)
            batches.append(batch)
            at += n
        self._last_read = time.monotonic()
        return batches

    def batch_in_run(self, step: int) -> Batch:
        """The batch of `step`, read together with the steps after it when steps are asked in
        order (see `_from_run`): for a caller reading consecutive steps, cheaper per batch than
        `batch_at`. No effect on the iteration position."""
        return self._from_run(step)

    def _from_run(self, step: int) -> Batch:
        """The batch of `step` from the run read with it: a run of up to _RUN steps (not past the
        epoch's end), twice as long as the last one, so a start or a jump reads one batch first.
        With a transform, one batch at a time: its cost dwarfs the read's, and a run would make
        every _RUN-th batch wait for _RUN transforms. Only under a global shuffle, whose whole
        version the cache must hold anyway: under a window shuffle a run would need several windows
        at once, more than a bounded cache is sized for (shards evicted and fetched again)."""
        if not self._run or self._run[0].step != step:
            longest = _RUN if self.transform is None and self.spec.shuffle is Shuffle.GLOBAL else 1
            self._run_len = min(longest, 2 * self._run_len) if step == self._run_next else 1
            k = max(1, min(self._run_len, epoch_end(self.spec, step) - step))
            self._run = deque(self._read_many([self._plan(s) for s in range(step, step + k)]))
            self._run_next = step + k
        return self._run.popleft()

    def _next(self) -> Batch:
        step = self._step
        asked = time.monotonic()
        if self._prefetch <= 0:
            batch = self._from_run(step)
        else:
            self._fill(step)
            ahead_step, future = self._ahead.popleft()
            assert ahead_step == step
            batch = future.result()
        self._step = step + 1  # consumed: a state saved now resumes after this batch
        now = time.monotonic()
        self._stats.consumed(now - asked, now - (self._last_yield or asked))
        self._last_yield = now
        self._logger.tick()
        if self._recorder:
            self._record(batch, now - asked)
        return batch

    def _record(self, batch: Batch, wait: float) -> None:
        self._recorder.begin(self.spec, self._parent)
        if self._fingerprint_of == "transformed":
            from dsinspect.loaders.records.transforms import transformed_fingerprint
            fingerprint = transformed_fingerprint(batch.transformed)
        else:
            fingerprint = batch.fingerprint
        self._recorder.record(batch.step, batch.epoch, fingerprint, len(batch), of=self._fingerprint_of,
                              row_hashes=batch.hash_array, data_bytes=batch.nbytes, wait=wait)

    def stats(self) -> dict[str, Any]:
        """Counters for debugging a slow or stuck job: fetches, cache hits and misses, fetch
        latency, retries, verification failures, evictions, and time spent waiting for batches."""
        snapshot = self._stats.snapshot()
        snapshot["starved"] = self._stats.starvation()
        return snapshot

    def _fill(self, step: int) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="dsinspect-prefetch")
        if self._ahead and self._ahead[0][0] != step:
            self._drop_ahead()
        nxt = self._ahead[-1][0] + 1 if self._ahead else step
        while len(self._ahead) < self._prefetch + 1:
            self._ahead.append((nxt, self._pool.submit(self._read, *self._plan(nxt))))
            nxt += 1

    def _drop_ahead(self) -> None:
        self._run.clear()
        for _, future in self._ahead:
            future.cancel()
        for _, future in self._ahead:
            if not future.cancelled():
                future.exception()  # wait, so no read for a discarded order runs on
        self._ahead.clear()

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Tiny JSON-able state: where the next batch starts, and a receipt of what it holds. When
        recording, every line up to here is durable before it returns, and the state names the
        record's segment (so a resume from it is known to continue this segment)."""
        segment = None
        if self._recorder:
            segment = self._recorder.begin(self.spec, self._parent)
            self._recorder.sync()
        return LoaderState.at(self.spec, self._step, self.rank, segment).to_json()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`, saved by a loader of the same data order with any world size,
        batch size or worker count. O(1): nothing is read or skipped."""
        saved = LoaderState.from_json(state)
        resumed = saved.resume_spec(self.spec)
        self._drop_ahead()
        self.spec = resumed
        self._plans = {}
        self._step = resumed.start.step
        self._reader.close()
        self._reader = BatchReader(self.catalog, resumed, self._reader.columns, self._reader.cache,
                                   fill=self._reader.fill)
        self._last_yield = self._last_read = None
        self._parent = saved.segment
        if self._recorder:  # a new segment: which state it resumed from, its world and batch size
            self._recorder.begin(resumed, self._parent)

    def close(self, wait: bool = False) -> None:
        """Stop reading ahead and release what is held, without waiting for a read ahead or a
        shard fill under way (a fill stops at its next run and leaves what it checked for the
        next reader, `BatchReader.close`). `wait`: return once they have stopped."""
        self._reader.close(wait)  # first: a read ahead waiting for a fill ends with it
        self._run.clear()
        for _, future in self._ahead:
            future.cancel()
        if wait:
            self._drop_ahead()
        self._ahead.clear()
        if self._pool:
            self._pool.shutdown(wait=wait)
            self._pool = None
        if self._recorder:
            self._recorder.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _every(stride: int) -> Callable[[int, int], Sequence[int]]:
    """Upcoming steps: every `stride`-th from the asked one on."""
    return lambda step, n: range(step, step + n * stride, stride)

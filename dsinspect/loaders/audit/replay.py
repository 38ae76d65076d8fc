"""Replay the exact batch of (step, rank): the order by arithmetic (no iteration), then only its rows.

Each sample comes back with where it came from (position, global index, source version, shard and
row, stored row hash, padding flag, seed) and the batch fingerprint a training job logs
(docs/RUN_RECORDS.md), so "what did rank 7 see at step 41,200?" costs the same at any step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.audit.bounds import ReadBound
from dsinspect.loaders.audit.rows import PlanRows, RowReader, offset_limit_error
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, past_offset_limit
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.order.plan import BatchPlan, plan_batch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.batch import Batch
from dsinspect.loaders.records.run import RunRecord, is_run_dir, read_run
from dsinspect.loaders.records.runlog import batch_fingerprint, read_specs, spec_for_step
from dsinspect.loaders.records.transforms import load_transform, transformed_fingerprint
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import url_to_fs

__all__ = ["Replay", "Sample", "SpecSource", "load_specs", "replay", "replay_plans", "parse_rank", "resolve"]

SpecSource = Union[RunSpec, Sequence[RunSpec], str, os.PathLike]
Transform = Union[Callable[[Batch], Any], str, None]


@dataclass(frozen=True)
class Sample:
    """One entry of a replayed batch and where it came from."""

    rank: int
    position: int        # in the rank's batch
    epoch_position: int  # in the epoch's order
    index: int           # global index within its source version
    source: str
    version: str
    shard: int
    shard_row: int
    row_hash: bytes      # as stored
    padding: bool
    seed: int
    verified: bool | None = None  # the row's bytes still hash to row_hash (None: not re-checked)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "position": self.position, "epoch_position": self.epoch_position,
                "index": self.index, "source": self.source, "version": self.version, "shard": self.shard,
                "shard_row": self.shard_row, "row_hash": self.row_hash.hex(), "padding": self.padding,
                "seed": self.seed, "verified": self.verified}


@dataclass
class Replay:
    """The batch of one step for one rank or all ranks, as the Loader yields it, with provenance."""

    spec: RunSpec
    step: int
    epoch: int
    batches: list[Batch]        # one per rank, equal to what Loader(spec, rank).batch_at(step) returns
    samples: list[Sample]       # every rank's samples, rank-major, in batch order
    fields: tuple[Field, ...] = ()  # the columns' fields (roles, options) from the first source's manifest
    transform_error: str | None = None
    transformed_fingerprints: dict[int, str] = field(default_factory=dict)
    record_end: int | None = None  # replayed from a run record: the last step it logged (None: none, or no record)

    @property
    def beyond_record(self) -> bool:
        """Replayed from a run record, for a step after the last one the run logged."""
        return self.record_end is not None and self.step > self.record_end

    @property
    def ranks(self) -> list[int]:
        return [b.rank for b in self.batches]

    @property
    def fingerprints(self) -> dict[int, str]:
        """rank -> fingerprint of the batch as stored (what the Loader logs with of="stored")."""
        return {b.rank: b.fingerprint for b in self.batches}

    @property
    def table(self) -> pa.Table:
        """Every rank's rows (all fields, bytes as stored), rank-major."""
        return pa.Table.from_batches([b.table for b in self.batches])

    @property
    def unverified(self) -> list[Sample]:
        """Samples whose bytes no longer hash to their stored row hash."""
        return [s for s in self.samples if s.verified is False]

    def to_json(self) -> dict[str, Any]:
        return {"spec_hash": self.spec.hash, "order_hash": self.spec.order_hash, "step": self.step,
                "epoch": self.epoch, "ranks": self.ranks,
                "world_size": self.spec.world_size, "batch_size": self.spec.batch_size,
                "sources": [{"name": s.name, "version": s.version} for s in self.spec.sources],
                "samples": [s.to_json() for s in self.samples],
                "fingerprints": {str(r): fp for r, fp in self.fingerprints.items()},
                "transformed_fingerprints": {str(r): fp for r, fp in self.transformed_fingerprints.items()},
                "transform_error": self.transform_error,
                "record_end": self.record_end, "beyond_record": self.beyond_record}


def load_specs(source: SpecSource) -> list[RunSpec]:
    """Run spec segments from a spec, a list of them, a spec JSON file or a run record directory."""
    if isinstance(source, RunSpec):
        return [source]
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        fs, root = url_to_fs(path)
        if fs.isdir(root):
            specs = [spec for _, spec in read_specs(path)]
            if not specs:
                raise UserError(f"{path}: the run record holds no spec files")
            return specs
        if not fs.exists(root):
            raise UserError(f"{path}: no such run spec file or run record directory")
        return [RunSpec.loads(fs.cat_file(root).decode("utf-8", "replace"), path)]
    specs = sorted(source, key=lambda s: s.start.step)
    if not specs or not all(isinstance(s, RunSpec) for s in specs):
        raise UserError("expected a RunSpec, a list of them, a spec file or a run record directory")
    return specs


def parse_rank(rank: int | str, spec: RunSpec | None = None) -> list[int]:
    """`rank` as the list of ranks it names ("all" is every rank of the spec's world). Without a spec,
    one rank, not held to a world size (a filter of log lines, which may name any rank)."""
    if isinstance(rank, str):
        if spec is not None and rank.strip().lower() == "all":
            return list(range(spec.world_size))
        try:
            rank = int(rank)
        except ValueError:
            raise UserError(f"rank must be an integer or 'all', not {rank!r}") from None
    if spec is not None and not 0 <= rank < spec.world_size:
        raise UserError(f"rank {rank} is outside the world size {spec.world_size}")
    return [rank]


def replay(spec: SpecSource, step: int, rank: int | str = 0, catalog: Catalog | None = None,
           transform: Transform = None, *, columns: Sequence[str] | None = None, verify: bool = True,
           max_bytes: int | None = None) -> Replay:
    """The batch that `rank` (or "all") read at `step`, in O(1) of the step. `spec` may be a run
    record directory: the segment in force at `step` is used. `transform` (a callable or
    "package.module:function") is re-run on each rank's batch, seeded as in the job (batch.seeds).
    `columns` as the job's Loader had them (default: the fields all sources share); `verify`
    re-hashes each row's bytes against its stored row hash (fingerprints never depend on columns).
    `max_bytes` bounds what the replay holds (row groups read and rows, audit/bounds.py): a batch
    beyond it is a BatchTooLarge, before a row is read when the shards' footers tell."""
    if catalog is None:
        raise UserError("replay needs a catalog: replay(spec, step, rank, catalog=Catalog(url))")
    run, record = resolve(spec, step)
    plans = [plan_batch(run, int(step), r) for r in parse_rank(rank, run)]
    result = replay_plans(run, plans, RowReader(catalog, run, columns), transform, verify=verify,
                          max_bytes=max_bytes)
    if record is not None:
        result.record_end = record.end
    return result


def resolve(spec: SpecSource, step: int) -> tuple[RunSpec, RunRecord | None]:
    """The run spec in force at `step` (checked to be a step), and the run record it came from if any."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise UserError(f"step must be an integer, not {step!r}")
    if step < 0:
        raise UserError(f"step {step} is negative")
    step = int(step)
    record = read_run(spec) if isinstance(spec, (str, os.PathLike)) and is_run_dir(spec) else None
    if record is not None and record.chain:  # the segment the job kept for this step
        return record.spec_at(step), record
    return spec_for_step(load_specs(spec), step), record


def replay_plans(spec: RunSpec, plans: list[BatchPlan], reader: RowReader, transform: Transform = None,
                 *, verify: bool = True, max_bytes: int | None = None) -> Replay:
    """`replay` for given plans of one step, through a reader that may be reused across steps."""
    fn = load_transform(transform) if isinstance(transform, str) else transform
    names = tuple(s.name for s in spec.sources)
    bound = None if max_bytes is None else bounded(plans, reader, verify, max_bytes)
    batches, samples = [], []
    for plan in plans:
        rows = reader.read(plan, rehash=verify, bound=bound)
        batches.append(as_batch(plan, rows, names))
        samples += samples_of(spec, plan, rows)
    fields = tuple(f for f in reader.versions[0].fields if f.name in reader.columns)
    result = Replay(spec, plans[0].step, plans[0].epoch, batches, samples, fields)
    if fn is not None:
        apply_transform(result, fn)
    return result


def bounded(plans: list[BatchPlan], reader: RowReader, verify: bool, max_bytes: int) -> ReadBound:
    """The bound of a replay of `plans`, checked against their footers' estimate (BatchTooLarge)."""
    ranks = f"rank {plans[0].rank}" if len(plans) == 1 else f"{len(plans)} ranks"
    samples = sum(len(p.indices) for p in plans)
    bound = ReadBound(max_bytes, f"step {plans[0].step}, {ranks}: the batch of {samples:,} samples")
    sizes = [reader.estimate(p, verify) for p in plans]
    bound.check(sum(g for g, _ in sizes), sum(r for _, r in sizes))
    return bound


def as_batch(plan: BatchPlan, rows: PlanRows, source_names: tuple[str, ...]) -> Batch:
    """The rows in the Loader's own Batch type (a transform gets exactly what the job's got)."""
    try:
        table = rows.table.combine_chunks()
    except NOT_CONVERTIBLE as e:
        if not past_offset_limit(e):
            raise
        raise offset_limit_error(plan) from None
    record = pa.RecordBatch.from_arrays([c.chunk(0) if c.num_chunks else pa.array([], c.type) for c in table.columns],
                                        schema=table.schema)
    return Batch(plan, record, rows.stored, source_names)


def samples_of(spec: RunSpec, plan: BatchPlan, rows: PlanRows, first: int = 0) -> list[Sample]:
    """The provenance of `plan`'s rows; `first`: the batch position of its first row (a part of a batch)."""
    verified = rows.verified
    out = []
    for i in range(len(plan.indices)):
        source = spec.sources[int(plan.sources[i])]
        out.append(Sample(plan.rank, first + i, int(plan.positions[i]), int(plan.indices[i]), source.name,
                          source.version, int(rows.shards[i]), int(rows.shard_rows[i]), rows.stored[i],
                          bool(plan.padding[i]), int(plan.seeds[i]), None if verified is None else bool(verified[i])))
    return out


def apply_transform(result: Replay, fn: Callable[[Batch], Any]) -> None:
    """Run the job's transform on every rank's batch; fingerprint what it made where possible."""
    for batch in result.batches:
        batch.transformed = fn(batch)
        try:
            result.transformed_fingerprints[batch.rank] = transformed_fingerprint(batch.transformed)
        except UserError as e:
            result.transform_error = str(e)


def stored_fingerprint(rows: PlanRows) -> str:
    """The fingerprint of the rows as they are now: re-hashed bytes when re-checked, else stored."""
    return batch_fingerprint(rows.rehashed if rows.rehashed is not None else rows.stored)

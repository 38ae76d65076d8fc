"""Why one log line differs from replay: the per-line check (read the batch's rows, re-hash, compare)
and, at a mismatch, which positions differ and the likeliest reason, from the line's own evidence
(per-sample digests, legacy `row_hashes`) and the data's (row hashes, shard sha256s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from dsinspect.errors import UserError
from dsinspect.loaders.audit.replay import Sample, as_batch, samples_of, stored_fingerprint
from dsinspect.loaders.audit.rows import PlanRows, RowReader
from dsinspect.loaders.order.plan import BatchPlan, plan_batch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.records.runlog import decode_digests, digests_of
from dsinspect.loaders.records.transforms import transformed_fingerprint
from dsinspect.loaders.store.verify import verify_shard

__all__ = ["Divergence", "check_line", "explain"]


@dataclass
class Divergence:
    step: int
    rank: int
    epoch: int
    of: str                   # the side the log recorded: "stored" or "transformed"
    logged: str
    replayed: str | None
    positions: list[int]      # positions in the rank's batch that differ (empty: not attributable)
    reason: str
    samples: list[Sample] = field(default_factory=list)  # the samples at those positions
    rows: pa.Table | None = None  # those positions' rows as the catalog holds them now (the checked columns)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "rank": self.rank, "epoch": self.epoch, "of": self.of, "logged": self.logged,
                "replayed": self.replayed, "positions": self.positions, "reason": self.reason,
                "samples": [s.to_json() for s in self.samples]}


def check_line(spec: RunSpec, reader: RowReader, line: dict, fn: Callable | None, rehash: bool,
                plan: BatchPlan | None = None) -> Divergence | None:
    """One line against replay, reading its rows (the per-line path; `plan` if already made)."""
    step, rank, of = int(line["step"]), int(line["rank"]), line.get("of", "stored")
    if of not in ("stored", "transformed"):
        raise UserError(f"log line for step {step}, rank {rank}: unknown side of={of!r} (stored or transformed)")
    if of == "transformed" and fn is None:
        raise UserError(f"the log records transformed batches (of=transformed, step {step}, rank {rank}): "
                        "pass the job's transform")
    if not 0 <= rank < spec.world_size:
        return Divergence(step, rank, -1, of, line["fingerprint"], None, [],
                          f"the log has rank {rank}, but the run spec in force at step {step} has world size "
                          f"{spec.world_size}")
    plan = plan if plan is not None else plan_batch(spec, step, rank)
    transformed = of == "transformed"
    if transformed:  # the transform sees the job's columns; re-hashing every field would not change its output
        rows = reader.read(plan, rehash=False)
        batch = as_batch(plan, rows, tuple(s.name for s in spec.sources))
        replayed = transformed_fingerprint(fn(batch))
    else:
        replayed = stored_fingerprint(reader.read(plan, rehash=rehash))
    logged_n = line.get("n")
    epoch = line.get("epoch")
    if replayed == line["fingerprint"] and (logged_n is None or int(logged_n) == len(plan.indices)) \
            and (epoch is None or int(epoch) == plan.epoch):
        return None
    return explain(spec, reader, plan, line, replayed, of)


def explain(spec: RunSpec, reader: RowReader, plan: BatchPlan, line: dict, replayed: str | None,
             of: str) -> Divergence:
    """Which positions differ, and the likeliest reason, from the log line and the data's own hashes."""
    step, rank = plan.step, plan.rank
    div = Divergence(step, rank, plan.epoch, of, line["fingerprint"], replayed, [], "")
    rows = reader.read(plan, rehash=True)
    samples = samples_of(spec, plan, rows)
    n, logged_n = len(plan.indices), line.get("n")
    if line.get("epoch") is not None and int(line["epoch"]) != plan.epoch:
        div.reason = (f"the job logged epoch {line['epoch']} at step {step}, the run spec places it in epoch "
                      f"{plan.epoch}: this is not the job's run spec (or its segments are missing)")
    elif logged_n is not None and int(logged_n) != n:
        div.reason = (f"the job logged {logged_n} rows at step {step}, the run spec gives {n}: this is not the "
                      "job's run spec (batch size or last-batch policy differ)")
    elif isinstance(line.get("row_hashes"), list) and of == "stored":
        now = [h.hex() for h in (rows.rehashed or rows.stored)]
        div.positions = [i for i, (a, b) in enumerate(zip(line["row_hashes"], now)) if a != b]
        div.reason = "these rows differ from the ones the job logged"
    elif isinstance(line.get("samples"), str) and decode_digests(line["samples"], n) is not None:
        logged = decode_digests(line["samples"], n)
        now = digests_of(rows.rehashed or rows.stored)
        div.positions = [i for i, (a, b) in enumerate(zip(logged, now)) if a != b]
        if div.positions:
            div.reason = ("the rows at these positions are not the rows the job read (their digests differ from "
                          "the logged ones): " + _stored_or_changed(rows, div.positions))
        elif of == "transformed":
            div.reason = ("the rows as stored are the ones the job read; the transform's output differs (is it the "
                          "job's transform, and does it draw randomness only from batch.seeds?)")
        else:
            _attribute(div, reader, plan, rows)
    else:
        _attribute(div, reader, plan, rows)
    div.samples = [samples[i] for i in div.positions]
    div.rows = rows.table.take(div.positions) if div.positions else None
    return div


def _attribute(div: Divergence, reader: RowReader, plan: BatchPlan, rows: PlanRows) -> None:
    """Positions whose bytes no longer match their stored hash, else those in shards that fail
    verification; else nothing in the data explains it."""
    verified = rows.verified
    changed = np.flatnonzero(~verified).tolist() if verified is not None else []
    if changed:
        div.positions = changed
        div.reason = "these rows' bytes no longer hash to their stored row hash (the shard changed in place)"
        return
    bad: list[int] = []
    problems: list[str] = []
    for k, shard in sorted({(int(s), int(h)) for s, h in zip(plan.sources, rows.shards)}):
        report = verify_shard(reader.versions[k], shard)
        if not report.ok:
            problems.append(f"shard {shard} of {reader.versions[k].address}: {report.problems[0]}")
            bad += [i for i in range(len(plan.indices)) if plan.sources[i] == k and rows.shards[i] == shard]
    if bad:
        div.positions = sorted(bad)
        div.reason = ("the rows at these positions come from shards that fail verification ("
                      + "; ".join(problems) + "); the log cannot say which of their rows changed")
    elif div.of == "transformed":
        div.reason = ("the rows as stored are intact; the transform's output differs (is it the job's transform, "
                      "and does it draw randomness only from batch.seeds?)")
    else:
        div.reason = ("every row matches its stored hash and its shard its sha256: the job read other rows "
                      "(is this the job's run spec and catalog?)")


def _stored_or_changed(rows: PlanRows, positions: list[int]) -> str:
    """Whether the rows now in the catalog were edited in place or are other rows altogether."""
    verified = rows.verified
    if verified is not None and not all(bool(verified[i]) for i in positions):
        return "their bytes no longer hash to their stored row hash (the shard changed in place)"
    return "the catalog holds other rows there (another version, or another order)"

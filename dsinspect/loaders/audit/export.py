"""Write a replayed batch for a bug report: its rows as Parquet (every field, bytes as stored, plus
where each row came from) and a JSON receipt that names the run, the step and every row's hash.

`export_replay` writes a batch replayed in memory; `export_step` replays and writes one of any size a
part at a time (each part's row groups and rows within PART_BYTES), so memory stays bounded."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.loaders.audit.bounds import spans
from dsinspect.loaders.audit.replay import Replay, Sample, SpecSource, parse_rank, resolve, samples_of
from dsinspect.loaders.audit.rows import RowReader
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.format.pathnames import check_component
from dsinspect.loaders.order.plan import BatchPlan, plan_batch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.records.runlog import batch_fingerprint
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import join, move_file, spool_dir, url_to_fs, write_atomic, write_errors

__all__ = ["RECEIPT_FORMAT", "PART_BYTES", "Exported", "export_replay", "export_step", "provenance_table",
           "with_provenance"]

RECEIPT_FORMAT = "dsinspect.replay-receipt/1"
PART_BYTES = 64 << 20  # what `export_step` holds at once: one part's row groups and rows, as footers count them
_PREFIX = "__dsinspect_"  # reserved in manifests, so these columns never clash with a field


@dataclass
class Exported:
    """A batch `export_step` wrote: its provenance, fingerprints and the receipt (as `export_replay` returns it)."""

    spec: RunSpec
    step: int
    epoch: int
    ranks: list[int]
    samples: list[Sample]
    fingerprints: dict[int, str]
    receipt: dict[str, Any]
    record_end: int | None = None

    @property
    def unverified(self) -> list[Sample]:
        return [s for s in self.samples if s.verified is False]

    @property
    def beyond_record(self) -> bool:
        return self.record_end is not None and self.step > self.record_end

    def to_json(self) -> dict[str, Any]:
        """As `Replay.to_json` (no transform is run)."""
        spec = self.spec
        return {"spec_hash": spec.hash, "order_hash": spec.order_hash, "step": self.step, "epoch": self.epoch,
                "ranks": self.ranks, "world_size": spec.world_size, "batch_size": spec.batch_size,
                "sources": [{"name": s.name, "version": s.version} for s in spec.sources],
                "samples": [s.to_json() for s in self.samples],
                "fingerprints": {str(r): fp for r, fp in self.fingerprints.items()},
                "transformed_fingerprints": {}, "transform_error": None,
                "record_end": self.record_end, "beyond_record": self.beyond_record}


def provenance_table(result: Replay) -> pa.Table:
    """The batch's rows (all fields) followed by provenance columns, rank-major in batch order."""
    return with_provenance(result.table, result.samples)


def with_provenance(data: pa.Table, samples: Sequence[Sample]) -> pa.Table:
    """Rows `data` of `samples` followed by their provenance columns and stored row hashes."""
    extra = {
        "rank": pa.array([s.rank for s in samples], pa.int32()),
        "position": pa.array([s.position for s in samples], pa.int32()),
        "index": pa.array([s.index for s in samples], pa.int64()),
        "source": pa.array([s.source for s in samples], pa.string()),
        "version": pa.array([s.version for s in samples], pa.string()),
        "shard": pa.array([s.shard for s in samples], pa.int32()),
        "shard_row": pa.array([s.shard_row for s in samples], pa.int64()),
        "padding": pa.array([s.padding for s in samples], pa.bool_()),
        "seed": pa.array([s.seed for s in samples], pa.uint64()),
    }
    for name, values in extra.items():
        data = data.append_column(_PREFIX + name, values)
    return data.append_column(HASH_COLUMN, pa.array([s.row_hash for s in samples], pa.binary(16)))


def export_replay(result: Replay, directory: str) -> dict[str, Any]:
    """Write `<stem>.parquet` and `<stem>.receipt.json` under `directory`; the receipt."""
    hashes = {b.rank: b.row_hashes for b in result.batches}
    indices = {b.rank: [int(i) for i in b.indices] for b in result.batches}
    return _export(directory, result.spec, result.step, result.ranks, [provenance_table(result)],
                   lambda: _receipt(result.spec, result.step, result.epoch, result.ranks, indices, hashes,
                                    result.samples, result.transformed_fingerprints))


def export_step(spec: SpecSource, step: int, rank: int | str, catalog: Catalog, directory: str, *,
                columns: Sequence[str] | None = None, verify: bool = True, part_bytes: int = PART_BYTES) -> Exported:
    """Replay the batch of (`step`, `rank` or "all") and write it as `export_replay` does, a part of
    consecutive samples at a time: each part's row groups and rows within `part_bytes` (as the
    shards' footers count them), so a batch of any size is written in bounded memory. No transform
    is run (it would need the whole batch): the receipt has no transformed fingerprints."""
    run, record = resolve(spec, step)
    plans = [plan_batch(run, int(step), r) for r in parse_rank(rank, run)]
    reader = RowReader(catalog, run, columns, cache_bytes=part_bytes)
    samples: list[Sample] = []
    hashes: dict[int, list[bytes]] = {p.rank: [] for p in plans}
    ranks = [p.rank for p in plans]

    def parts() -> Iterator[pa.Table]:
        for plan in plans:
            for a, b in spans(*reader.footprint(plan, verify), part_bytes):
                part = _part(plan, a, b)
                rows = reader.read(part, rehash=verify)
                got = samples_of(run, part, rows, first=a)
                samples.extend(got)
                hashes[plan.rank] += rows.stored
                yield with_provenance(rows.table, got)

    indices = {p.rank: [int(i) for i in p.indices] for p in plans}
    receipt = _export(directory, run, int(step), ranks, parts(),
                      lambda: _receipt(run, int(step), plans[0].epoch, ranks, indices, hashes, samples, {}))
    fingerprints = {r: batch_fingerprint(h) for r, h in hashes.items()}
    return Exported(run, int(step), plans[0].epoch, ranks, samples, fingerprints, receipt,
                    record.end if record is not None else None)


def _part(plan: BatchPlan, a: int, b: int) -> BatchPlan:
    """Samples [a, b) of a plan, as a plan of their own."""
    return dataclasses.replace(plan, positions=plan.positions[a:b], sources=plan.sources[a:b],
                               indices=plan.indices[a:b], padding=plan.padding[a:b], seeds=plan.seeds[a:b])


def _receipt(spec: RunSpec, step: int, epoch: int, ranks: list[int], indices: dict[int, list[int]],
             hashes: dict[int, list[bytes]], samples: Sequence[Sample], transformed: dict[int, str]) -> dict[str, Any]:
    return {
        "format": RECEIPT_FORMAT,
        "spec_hash": spec.hash, "order_hash": spec.order_hash, "spec": spec.to_json(),
        "step": step, "epoch": epoch, "ranks": ranks,
        "indices": {str(r): indices[r] for r in ranks},
        "row_hashes": {str(r): [h.hex() for h in hashes[r]] for r in ranks},
        "fingerprints": {str(r): batch_fingerprint(hashes[r]) for r in ranks},
        "transformed_fingerprints": {str(r): fp for r, fp in transformed.items()},
        "samples": [s.to_json() for s in samples],
    }


def _export(directory: str, spec: RunSpec, step: int, ranks: list[int], tables: Iterable[pa.Table],
            receipt_of: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Write `tables` as one Parquet file, then the receipt `receipt_of()` makes once they are written
    (with the file's name, sha256 and rows): a Parquet file is never left without its receipt."""
    fs, root = url_to_fs(directory)
    with write_errors(fs, root):
        fs.makedirs(root, exist_ok=True)
    every = len(ranks) > 1 and len(ranks) == spec.world_size
    stem = check_component(f"replay-{spec.hash[:12]}-step-{step}-rank-{'all' if every else '-'.join(map(str, ranks))}",
                           "replay export name")
    sha256, rows = _write_parquet(fs, root, f"{stem}.parquet", tables)
    receipt = {**receipt_of(), "parquet": {"file": f"{stem}.parquet", "sha256": sha256, "rows": rows}}
    try:
        write_atomic(fs, join(root, f"{stem}.receipt.json"), (json.dumps(receipt, indent=2) + "\n").encode())
    except BaseException:  # no Parquet without its receipt
        with contextlib.suppress(OSError):
            fs.rm_file(join(root, f"{stem}.parquet"))
        raise
    return {**receipt, "directory": directory, "receipt_file": f"{stem}.receipt.json"}


def _write_parquet(fs: Any, root: str, name: str, tables: Iterable[pa.Table]) -> tuple[str, int]:
    """Stream `tables` into a spool file (a row group or more each), then move it to `root/name`;
    its sha256 and rows."""
    fd, spool = tempfile.mkstemp(dir=spool_dir(fs, root), prefix=".tmp-", suffix=name)
    os.close(fd)
    try:
        rows = 0
        with write_errors(fs, spool), contextlib.ExitStack() as stack:
            writer = None
            for table in tables:
                if writer is None:
                    writer = stack.enter_context(pq.ParquetWriter(spool, table.schema, compression="zstd"))
                writer.write_table(table)
                rows += table.num_rows
        sha = hashlib.sha256()
        with open(spool, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(spool)
        raise
    move_file(fs, spool, join(root, name))
    return sha.hexdigest(), rows

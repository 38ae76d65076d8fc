"""Write a replayed batch for a bug report: its rows as Parquet (every field, bytes as stored, plus
where each row came from) and a JSON receipt that names the run, the step and every row's hash."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.loaders.audit.replay import Replay
from dsinspect.loaders.format.manifest import HASH_COLUMN, sha256_hex
from dsinspect.loaders.format.pathnames import check_component
from dsinspect.loaders.store.storage import join, url_to_fs, write_atomic, write_errors

__all__ = ["RECEIPT_FORMAT", "export_replay", "provenance_table"]

RECEIPT_FORMAT = "dsinspect.replay-receipt/1"
_PREFIX = "__dsinspect_"  # reserved in manifests, so these columns never clash with a field


def provenance_table(result: Replay) -> pa.Table:
    """The batch's rows (all fields) followed by provenance columns, rank-major in batch order."""
    data = result.table
    samples = result.samples
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
    fs, root = url_to_fs(directory)
    with write_errors(fs, root):
        fs.makedirs(root, exist_ok=True)
    every = len(result.ranks) > 1 and len(result.ranks) == result.spec.world_size
    ranks = "all" if every else "-".join(map(str, result.ranks))
    stem = check_component(f"replay-{result.spec.hash[:12]}-step-{result.step}-rank-{ranks}", "replay export name")
    sink = io.BytesIO()
    pq.write_table(provenance_table(result), sink, compression="zstd")
    parquet = sink.getvalue()
    write_atomic(fs, join(root, f"{stem}.parquet"), parquet)
    receipt = {
        "format": RECEIPT_FORMAT,
        "spec_hash": result.spec.hash, "order_hash": result.spec.order_hash, "spec": result.spec.to_json(),
        "step": result.step, "epoch": result.epoch, "ranks": result.ranks,
        "indices": {str(b.rank): [int(i) for i in b.indices] for b in result.batches},
        "row_hashes": {str(b.rank): [h.hex() for h in b.row_hashes] for b in result.batches},
        "fingerprints": {str(r): fp for r, fp in result.fingerprints.items()},
        "transformed_fingerprints": {str(r): fp for r, fp in result.transformed_fingerprints.items()},
        "samples": [s.to_json() for s in result.samples],
        "parquet": {"file": f"{stem}.parquet", "sha256": sha256_hex(parquet), "rows": len(result.samples)},
    }
    try:
        write_atomic(fs, join(root, f"{stem}.receipt.json"), (json.dumps(receipt, indent=2) + "\n").encode())
    except BaseException:  # no Parquet without its receipt
        with contextlib.suppress(OSError):
            fs.rm_file(join(root, f"{stem}.parquet"))
        raise
    return {**receipt, "directory": directory, "receipt_file": f"{stem}.receipt.json"}

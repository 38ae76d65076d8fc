"""Helpers for the replay and diff tests: a small catalog, a job that records its run, shard forgery,
and seeded transforms importable by name (`replay_diff_fixtures:seeded_jitter`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import TOY_FIELDS, toy_rows

from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion
from dsinspect.loaders.store.writer import WriteOptions


def make_catalog(root) -> Catalog:
    cat = Catalog(str(root))
    cat.write_version("toy", toy_rows(300), TOY_FIELDS, key="id",
                      options=WriteOptions(shard_rows=40, row_group_rows=16))
    cat.write_version("other", toy_rows(50, start=1000), TOY_FIELDS, key="id", options=WriteOptions(shard_rows=20))
    return cat


def run_job(cat: Catalog, spec, steps: int, record_dir: str | None = None, transform=None,
            log_transformed: bool = False) -> dict:
    """Every rank of `spec` reads `steps` batches from its start (across epochs), recording the
    run: the Loader logs stored fingerprints, or with `log_transformed` those of the transform's
    output. Returns {(step, rank): batch}."""
    seen = {}
    for rank in range(spec.world_size):
        with Loader(spec, rank=rank, catalog=cat, record_dir=record_dir, transform=transform,
                    fingerprint_of="transformed" if log_transformed else "stored") as loader:
            stream = _stream(loader)
            for step in range(spec.start.step, spec.start.step + steps):
                batch = next(stream)
                assert batch.step == step
                seen[(step, rank)] = batch
    return seen


def _stream(loader):
    while True:  # each `for` over a loader yields the rest of one epoch
        yield from loader


def rewrite_shard(version: DatasetVersion, index: int, field: str, value, rehash: bool) -> None:
    """Change one row's field in place under the shard's own (content-addressed) file name; with
    `rehash` the stored row hash follows, as a forger would do."""
    shard, row = version.shard_of(index)
    path = version.shard_path(shard)
    table = pq.read_table(path)
    meta = pq.ParquetFile(path).metadata
    rows = table.to_pylist()
    rows[row][field] = value
    data = pa.Table.from_pylist(rows, schema=table.schema)
    if rehash:
        names = [f.name for f in version.fields]
        hashes = pa.array(row_hashes(data.select(names), names), pa.binary(16))
        data = data.set_column(data.schema.get_field_index(HASH_COLUMN), data.schema.field(HASH_COLUMN), hashes)
    pq.write_table(data, path, row_group_size=meta.row_group(0).num_rows)


# -- a table of RL steps whose versions change several fields at different rates -----------------

STEP_FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("action", pa.int32(), "scalar"),
               Field("reward", pa.float32(), "scalar"), Field("obs", pa.list_(pa.float32(), 3), "array"),
               Field("note", pa.string(), "text")]


def steps(n):
    return [{"id": i, "action": i % 4, "reward": i / 8, "obs": [i, i + 0.5, -i], "note": f"step {i}"} for i in range(n)]


def step_updates(n):
    """Changes to action, reward and obs at different rates (some rows change two or three fields)."""
    update = {}
    for i in range(n):
        change = {}
        if i % 3 == 0:
            change["action"] = 9
        if i % 5 == 0:
            change["reward"] = -1.0
        if i % 17 == 0:
            change["obs"] = [i, i + 0.5, 1.0]
        if change:
            update[i] = change
    truth = {f: sum(f in c for c in update.values()) for f in ("action", "reward", "obs")}
    return update, truth


# -- transforms a job might run: seeded from batch.seeds, so replay re-creates them -----------------

def seeded_jitter(batch):
    """Token dropout and a random id appended, drawn per sample from its seed."""
    out_tokens, noise = [], []
    for tokens, seed in zip(batch.table.column("tokens").to_pylist(), batch.seeds):
        rng = np.random.default_rng(int(seed))
        keep = [t for t in tokens if rng.random() > 0.3]
        extra = int(rng.integers(0, 50_000))
        out_tokens.append(keep + [extra])
        noise.append(float(rng.normal()))
    return pa.table({"id": batch.table.column("id"), "tokens": pa.array(out_tokens, pa.list_(pa.int32())),
                     "noise": pa.array(noise, pa.float64())})


def unseeded_jitter(batch):
    """The same augmentation drawing from a fixed generator instead of the samples' seeds."""
    rng = np.random.default_rng(12345)
    return {"id": batch.table.column("id").to_pylist(),
            "noise": [float(rng.normal()) for _ in range(len(batch))]}


def not_a_table(batch):
    return object()

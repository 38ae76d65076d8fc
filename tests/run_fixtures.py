"""A run record with everything the run views show, written by real Loaders: a start on 3 ranks, a
resume on 2 ranks from an older checkpoint (superseding lines), then a resume that skips steps (a gap)."""

from __future__ import annotations

import pyarrow as pa

from dsinspect.loaders import Catalog, Field, Loader, LoaderState, RunSpec, WriteOptions

ROWS = 600


def toy_catalog(root: str) -> Catalog:
    catalog = Catalog(root)
    rows = [{"id": i, "tokens": [(i * 7 + j) % 1000 for j in range(40)]} for i in range(ROWS)]
    catalog.write_version("toy", rows, [Field("id", pa.int64(), "scalar", nullable=False),
                                        Field("tokens", pa.list_(pa.int32()), "tokens")],
                          options=WriteOptions(row_group_rows=50, shard_rows=150))
    return catalog


def segment(cat: Catalog, spec: RunSpec, record: str, steps: int, resume=None, save_at=()) -> dict:
    """Every rank of one segment reads `steps` batches (after resuming from `resume`); returns
    rank 0's states saved after the steps in `save_at`."""
    saved = {}
    for rank in range(spec.world_size):
        with Loader(spec, rank, cat, record_dir=record) as loader:
            if resume is not None:
                loader.load_state_dict(resume)
            it = iter(loader)
            for _ in range(steps):
                batch = next(it)
                if batch.step in save_at:
                    saved.setdefault(batch.step, loader.state_dict())
    return saved


def write_run(cat: Catalog, record: str) -> RunSpec:
    """A: 3 ranks, steps 0..29 (saves at 9); B: 2 ranks resumed from step 9's state, steps 10..24
    (A's 10..29 superseded); C: resumed at step 35 from B, steps 35..39 (steps 25..34 a gap)."""
    spec = RunSpec.create(cat, "toy", seed=5, batch_size=4, world_size=3, shuffle="global")
    a = segment(cat, spec, record, 30, save_at=(9,))
    two = spec.replace(world_size=2)
    b = segment(cat, two, record, 15, resume=a[9], save_at=(24,))
    segment(cat, two, record, 5, resume=LoaderState.at(two, 35, 0, b[24]["segment"]).to_json())
    return spec

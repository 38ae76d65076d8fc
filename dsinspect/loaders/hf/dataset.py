"""A version as Hugging Face `datasets` objects.

`as_dataset`: every shard opened through the node's shard cache (fetched and checked once per node),
every cached block verified, and the shards' memory-mapped Arrow batches handed to
`datasets.Dataset` as they are: the table's buffers point into the cache's files, nothing is copied
(a `Dataset` of a 4 GB version costs page cache, not process memory). The shards stay pinned (never
evicted) while the Dataset lives.

`as_iterable`: one rank's batches of a run spec, row by row in the batch's order, as a
`datasets.IterableDataset`: the order is dsinspect's (`batch_indices`), and a LoaderState
(`start_state`) starts it anywhere in O(1). Built on `datasets`' Arrow examples iterable (each batch
handed over as one Arrow table), not on `from_generator` of Python rows: a row of 1,024 tokens as a
Python list made the iterable ~250 samples/s, with Arrow tables `datasets`' own batching
(`.iter(batch_size=...)`, `map(batched=True)`) takes them as they are. That iterable is
`datasets.iterable_dataset.ArrowExamplesIterable`, internal to `datasets` (checked with 5.2).
`record_dir`: the rank's run record, a line per batch as its table is made (read/recording.py: the
consumer's loop never calls us, so each line reaches the OS before its rows are handed over).
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator, Sequence

import datasets
import pyarrow as pa
from datasets.iterable_dataset import ArrowExamplesIterable
from datasets.table import InMemoryTable

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import HASH_COLUMN
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.read.recording import MadeRecord
from dsinspect.loaders.records.runlog import segment_id
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["as_dataset", "as_iterable", "resume_state"]


def as_dataset(version: DatasetVersion, columns: Sequence[str] | None = None,
               cache: ShardCache | None = None) -> datasets.Dataset:
    """The version's rows in stored order as a `datasets.Dataset` over the verified cache (no copy).
    `columns`: a subset (default: every field; the stored row hashes are left out)."""
    names = list(columns) if columns else [f.name for f in version.fields]
    missing = [c for c in names if c not in {f.name for f in version.fields}]
    if missing:
        raise UserError(f"{version.address} has no field(s) {missing}")
    cache = cache or ShardCache()
    shards: list = []
    try:
        for s in range(len(version.manifest.shards)):
            shards.append(cache.open(version, s))
            shards[-1].check_all()  # Arrow reads these bytes directly from now on: every block checked first
        table = pa.Table.from_batches([shard.batch.select(names) for shard in shards])
    except BaseException:
        for shard in shards:
            shard.release()
        raise
    dataset = datasets.Dataset(InMemoryTable(table))
    weakref.finalize(dataset, _release, shards)  # pinned while the Dataset lives
    return dataset


def as_iterable(spec: RunSpec, catalog: Catalog | str, rank: int | None = 0, columns: Sequence[str] | None = None,
                start_state: dict[str, Any] | None = None, *, record_dir: str | None = None,
                record_samples: bool | str = "auto") -> datasets.IterableDataset:
    """One rank's rows of one epoch (from the spec's start, or from `start_state`, a LoaderState of
    any world or batch size), in dsinspect's order, with "_step" and "_index" beside the columns.
    `rank=None`: every rank's, one `datasets` shard per rank in rank order, so that
    `split_dataset_by_node`, `.shard(world_size, rank)` and `accelerate` (under `Trainer`) hand each
    process its own rank's rows. `record_dir`: write each rank's run record (`dsinspect replay
    --check-log` checks it)."""
    parent = None
    if start_state is not None:
        saved = LoaderState.from_json(start_state)
        spec, parent = saved.resume_spec(spec), saved.segment
    if rank is not None and not 0 <= rank < spec.world_size:
        raise UserError(f"rank {rank} is outside the world size {spec.world_size}")
    ranks = list(range(spec.world_size)) if rank is None else [rank]
    if record_dir:
        MadeRecord(record_dir, ranks[0], spec, parent, record_samples)  # a directory it cannot write: refused now
    url = catalog.url if isinstance(catalog, Catalog) else str(catalog)
    # `datasets` takes each list among these arguments for the shards to split (over DataLoader
    # workers, nodes): the ranks are that list, every other argument a tuple
    record = (record_dir, parent, record_samples) if record_dir else None
    tables = ArrowExamplesIterable(_tables, {"spec": spec.dumps(), "url": url, "ranks": ranks,
                                             "columns": tuple(columns or ()), "record": record})
    return datasets.IterableDataset(tables)


def resume_state(spec: RunSpec, next_step: int, rank: int = 0, start_state: dict[str, Any] | None = None, *,
                 recorded: bool = False) -> dict[str, Any]:
    """The LoaderState to save when the rows of `as_iterable(spec, ..., rank, start_state=start_state)`
    have been taken up to `next_step` (the `_step` of the next row): a later `start_state`, in any
    world or batch size. `recorded`: that iterable writes a record, and a resume from this state
    continues its segment."""
    parent = None
    if start_state is not None:
        saved = LoaderState.from_json(start_state)
        spec, parent = saved.resume_spec(spec), saved.segment
    segment = segment_id(spec, parent) if recorded else None
    return LoaderState.at(spec, next_step, rank, segment).to_json()


def _tables(spec: str, url: str, ranks: list[int], columns: tuple[str, ...],
            record: tuple | None) -> Iterator[tuple[str, pa.Table]]:
    """Per batch of each rank in turn, (a key, its rows as one Arrow table with "_step" and "_index")."""
    run_spec = RunSpec.loads(spec)
    for rank in ranks:
        made = MadeRecord(record[0], rank, run_spec, record[1], record[2]) if record else None
        with Loader(run_spec, rank, catalog=Catalog(url), columns=columns or None) as loader:
            for batch in loader:
                if made:
                    made.write(batch)
                table = pa.Table.from_batches([batch.table])
                if HASH_COLUMN in table.column_names:
                    table = table.drop([HASH_COLUMN])
                table = table.append_column("_step", pa.array([batch.step] * len(batch), pa.int64()))
                table = table.append_column("_index", pa.array(batch.indices, pa.int64()))
                yield f"{rank}_{batch.step}", table


def _release(shards: list) -> None:
    for shard in shards:
        shard.release()

"""The engine: everything between a dataset on storage and a batch in a training job, with no UI.

    format/   the stored format: manifests, canonical encoding, row hashes, roles, path-name rules
    compute/  inline / process-pool / Ray task engines
    store/    storage, catalog and its path layout, versions, writer, derive, verify, gc, addresses
    order/    run spec, the order of every (step, rank) as arithmetic, loader state
    records/  run records: run specs and fingerprint logs, a job's transform
    read/     shard cache (`ShardCache`: its bound), column views, batch reader, `Loader`, `Batch`
    pytorch/  TorchBatches / TorchLoader (the `torch` extra)
    audit/    replay of any (step, rank), log check, export of a batch
    diff/     diff of two versions down to the field
    ingest/   sources (JSONL, Parquet, HF, WebDataset, MDS, files) into new versions

Each layer imports only those listed below it (`[tool.importlinter]` in pyproject.toml checks it); the
engine never imports a face (CLI, TUI, web), `dsinspect.inspect` or the package root, and takes its
catalog explicitly. Re-exported here: what a training job or a script calls. `replay` and `diff` are
`dsinspect.loaders.audit.replay` and `dsinspect.loaders.diff.diff` (also `dsinspect.replay`, `dsinspect.diff`).

The names load on first use (PEP 562): importing one module of the engine (the CLI's `ls` reads only
the store) does not import all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsinspect.lazy import lazy_names as _lazy_names

__all__ = [
    "Catalog", "DatasetVersion", "Field", "Role", "Manifest", "HASH_COLUMN", "WriteOptions", "derive_version",
    "verify_version", "parse_address", "RunSpec", "Shuffle", "LastBatch", "Source", "Start", "LoaderState",
    "Loader", "Batch", "batch_indices", "plan_batch", "epoch_order", "steps_in_epoch", "check_states",
    "read_run", "RunRecord", "ShardCache", "SequenceSpec", "PackedRun", "packed_run",
    "PackedLoader", "PackedBatch",
]

_HOMES = {  # module (relative to this package) -> the names it holds
    ".format.manifest": ("HASH_COLUMN", "Field", "Manifest"),
    ".format.roles": ("Role",),
    ".order.packing": ("SequenceSpec",),
    ".order.plan": ("batch_indices", "epoch_order", "plan_batch", "steps_in_epoch"),
    ".order.spec": ("LastBatch", "RunSpec", "Shuffle", "Source", "Start"),
    ".order.state": ("LoaderState", "check_states"),
    ".read.batch": ("Batch",),
    ".read.cache": ("ShardCache",),
    ".read.loader": ("Loader",),
    ".read.packed": ("packed_run",),
    ".read.packed_batch": ("PackedBatch",),
    ".read.packed_loader": ("PackedLoader",),
    ".records.run": ("RunRecord", "read_run"),
    ".sequences.packed": ("PackedRun",),
    ".store.address": ("parse_address",),
    ".store.catalog": ("Catalog",),
    ".store.derive": ("derive_version",),
    ".store.verify": ("verify_version",),
    ".store.version": ("DatasetVersion",),
    ".store.writer": ("WriteOptions",),
}


__getattr__, __dir__ = _lazy_names(__name__, _HOMES)


if TYPE_CHECKING:
    from dsinspect.loaders.format.manifest import HASH_COLUMN, Field, Manifest
    from dsinspect.loaders.format.roles import Role
    from dsinspect.loaders.order.packing import SequenceSpec
    from dsinspect.loaders.order.plan import batch_indices, epoch_order, plan_batch, steps_in_epoch
    from dsinspect.loaders.order.spec import LastBatch, RunSpec, Shuffle, Source, Start
    from dsinspect.loaders.order.state import LoaderState, check_states
    from dsinspect.loaders.read.batch import Batch
    from dsinspect.loaders.read.cache import ShardCache
    from dsinspect.loaders.read.loader import Loader
    from dsinspect.loaders.read.packed import packed_run
    from dsinspect.loaders.read.packed_batch import PackedBatch
    from dsinspect.loaders.read.packed_loader import PackedLoader
    from dsinspect.loaders.records.run import RunRecord, read_run
    from dsinspect.loaders.sequences.packed import PackedRun
    from dsinspect.loaders.store.address import parse_address
    from dsinspect.loaders.store.catalog import Catalog
    from dsinspect.loaders.store.derive import derive_version
    from dsinspect.loaders.store.verify import verify_version
    from dsinspect.loaders.store.version import DatasetVersion
    from dsinspect.loaders.store.writer import WriteOptions

"""The read engine: catalog, immutable versions of Parquet shards, the streaming loader, replay and
diff (`dsinspect.loaders.replay.replay`, `dsinspect.loaders.diff.diff`; re-exported as
`dsinspect.replay` and `dsinspect.diff`: re-exporting them here would shadow their modules).

Imports no UI library. Public names are re-exported here; code lives in one module per concern.
"""

from dsinspect.loaders.address import Address, parse_address
from dsinspect.loaders.canonical import encode_column, field_hashes, row_hashes
from dsinspect.loaders.catalog import LATEST, Catalog
from dsinspect.loaders.derive import derive_version
from dsinspect.loaders.loader import Batch, Loader
from dsinspect.loaders.order import BatchPlan, batch_indices, epoch_order, locate_step, plan_batch, steps_in_epoch
from dsinspect.loaders.runlog import RunRecorder, batch_fingerprint, read_fingerprints, read_specs, spec_for_step
from dsinspect.loaders.spec import LastBatch, RunSpec, Shuffle, Source, Start
from dsinspect.loaders.state import LoaderState
from dsinspect.loaders.manifest import HASH_COLUMN, Field, Manifest, Shard
from dsinspect.loaders.roles import Role
from dsinspect.loaders.verify import ShardReport, VerifyReport, verify_version
from dsinspect.loaders.version import DatasetVersion
from dsinspect.loaders.writer import VersionWriter, WriteOptions

__all__ = [
    "Address", "parse_address", "encode_column", "field_hashes", "row_hashes", "LATEST", "Catalog",
    "derive_version", "HASH_COLUMN", "Field", "Manifest", "Shard", "Role", "ShardReport", "VerifyReport",
    "verify_version", "DatasetVersion", "VersionWriter", "WriteOptions",
    "Batch", "Loader", "BatchPlan", "batch_indices", "epoch_order", "locate_step", "plan_batch", "steps_in_epoch",
    "RunRecorder", "batch_fingerprint", "read_fingerprints", "read_specs", "spec_for_step",
    "LastBatch", "RunSpec", "Shuffle", "Source", "Start", "LoaderState",
]

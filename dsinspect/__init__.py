"""dsinspect: immutable, content-addressed dataset versions for ML training, and the tools to see
exactly what training read."""

__version__ = "0.1.0"

from dsinspect.defaults import open_catalog  # noqa: E402
from dsinspect.errors import DsinspectError, IntegrityError, ManifestError, NotFoundError, UserError  # noqa: E402
from dsinspect.loaders import (  # noqa: E402
    Batch, Catalog, DatasetVersion, Field, Loader, LoaderState, Manifest, Role, RunSpec, WriteOptions,
    batch_indices, derive_version, epoch_order, parse_address, plan_batch, verify_version,
)
from dsinspect.loaders.diff.compare import diff  # noqa: E402
from dsinspect.loaders.audit.replay import replay  # noqa: E402

__all__ = [
    "__version__", "open_catalog", "DsinspectError", "IntegrityError", "ManifestError", "NotFoundError",
    "UserError", "Catalog", "DatasetVersion", "Field", "Manifest", "Role", "WriteOptions", "derive_version",
    "parse_address", "verify_version", "Batch", "Loader", "LoaderState", "RunSpec", "batch_indices",
    "epoch_order", "plan_batch", "replay", "diff",
]

"""dsinspect: immutable, content-addressed dataset versions for ML training, and the tools to see
exactly what training read."""

__version__ = "0.1.0"

from dsinspect.defaults import open_catalog  # noqa: E402
from dsinspect.errors import DsinspectError, IntegrityError, ManifestError, NotFoundError, UserError  # noqa: E402
from dsinspect.loaders import (  # noqa: E402
    Catalog, DatasetVersion, Field, Manifest, Role, WriteOptions, derive_version, parse_address, verify_version,
)

__all__ = [
    "__version__", "open_catalog", "DsinspectError", "IntegrityError", "ManifestError", "NotFoundError",
    "UserError", "Catalog", "DatasetVersion", "Field", "Manifest", "Role", "WriteOptions", "derive_version",
    "parse_address", "verify_version",
]

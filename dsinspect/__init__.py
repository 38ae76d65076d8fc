"""dsinspect: immutable, content-addressed dataset versions for ML training, and the tools to see
exactly what training read.

The names below load on first use (PEP 562), so `import dsinspect` (and every command of the CLI,
which imports this package first) costs nothing until a name is used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsinspect._version import __version__
from dsinspect.lazy import lazy_names as _lazy_names

__all__ = [
    "__version__", "open_catalog", "Catalog", "DatasetVersion", "Field", "Role", "WriteOptions", "derive_version",
    "verify_version", "parse_address", "RunSpec", "Loader", "LoaderState", "Batch", "batch_indices", "replay",
    "diff", "DsinspectError", "UserError", "NotFoundError", "StorageError", "IntegrityError",
]

# where each public name lives; imported when first asked for
__getattr__, __dir__ = _lazy_names(__name__, {
    "dsinspect.defaults": ("open_catalog",),
    "dsinspect.loaders": ("Catalog", "DatasetVersion", "Field", "Role", "WriteOptions", "derive_version",
                          "verify_version", "parse_address", "RunSpec", "Loader", "LoaderState", "Batch",
                          "batch_indices"),
    "dsinspect.loaders.audit.replay": ("replay",),
    "dsinspect.loaders.diff": ("diff",),
    "dsinspect.errors": ("DsinspectError", "UserError", "NotFoundError", "StorageError", "IntegrityError"),
})


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from dsinspect.defaults import open_catalog
    from dsinspect.errors import DsinspectError, IntegrityError, NotFoundError, StorageError, UserError
    from dsinspect.loaders import (
        Batch,
        Catalog,
        DatasetVersion,
        Field,
        Loader,
        LoaderState,
        Role,
        RunSpec,
        WriteOptions,
        batch_indices,
        derive_version,
        parse_address,
        verify_version,
    )
    from dsinspect.loaders.audit.replay import replay
    from dsinspect.loaders.diff import diff

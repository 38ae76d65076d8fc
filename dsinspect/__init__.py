"""dsinspect: immutable, content-addressed dataset versions for ML training, and the tools to see
exactly what training read.

The names below load on first use (PEP 562), so `import dsinspect` (and every command of the CLI,
which imports this package first) costs nothing until a name is used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dsinspect._version import __version__

__all__ = [
    "__version__", "open_catalog", "Catalog", "DatasetVersion", "Field", "Role", "WriteOptions", "derive_version",
    "verify_version", "parse_address", "RunSpec", "Loader", "LoaderState", "Batch", "batch_indices", "replay",
    "diff", "DsinspectError", "UserError", "NotFoundError", "StorageError", "IntegrityError",
]

# where each public name lives; imported when first asked for
_HOMES = {
    "open_catalog": "dsinspect.defaults",
    **dict.fromkeys(("Catalog", "DatasetVersion", "Field", "Role", "WriteOptions", "derive_version",
                     "verify_version", "parse_address", "RunSpec", "Loader", "LoaderState", "Batch",
                     "batch_indices"), "dsinspect.loaders"),
    "replay": "dsinspect.loaders.audit.replay",
    "diff": "dsinspect.loaders.diff",
    **dict.fromkeys(("DsinspectError", "UserError", "NotFoundError", "StorageError", "IntegrityError"),
                    "dsinspect.errors"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dsinspect' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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

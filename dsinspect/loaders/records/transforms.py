"""A training job's own batch transform, named `package.module:function`, and the fingerprint of
what it produced, so replay can show (and check) the batch as it was fed to the model.

A transformed fingerprint is the batch fingerprint (runlog.batch_fingerprint) over the canonical
row hashes (FORMAT.md) of the transform's output taken as a table: an Arrow table or record batch,
a dict of equal-length columns (lists or numpy arrays, 2-D arrays as one row per first axis), a
list of row dicts, or a dsinspect Batch. A job logs it with `RunRecorder.record(..., of="transformed")`.
"""

from __future__ import annotations

import os
import pkgutil
import sys
from typing import Any, Callable, TypeVar

import numpy as np
import pyarrow as pa

from dsinspect.errors import DsinspectError, UserError
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE, arrow_error
from dsinspect.loaders.format.canonical import row_hashes
from dsinspect.loaders.records.runlog import batch_fingerprint

__all__ = ["load_transform", "load_job_transform", "guarded", "as_table", "transformed_row_hashes",
           "transformed_fingerprint"]

T = TypeVar("T")


def load_transform(name: str) -> Callable[[Any], Any]:
    """The callable that `package.module:function` (or `package.module:Class.method`) names."""
    module_name, sep, attr = name.partition(":")
    if not sep or not _dotted(module_name) or not _dotted(attr):
        raise UserError(f"transform {name!r}: expected package.module:function")
    try:
        obj: Any = pkgutil.resolve_name(name)
    except ImportError as e:
        raise UserError(f"transform {name!r}: cannot import {module_name!r} ({e})") from None
    except AttributeError:
        if module_name not in sys.modules:  # raised while importing the module: its own bug, shown as is
            raise
        raise UserError(f"transform {name!r}: {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise UserError(f"transform {name!r}: {attr!r} is not callable")
    return obj


def _dotted(name: str) -> bool:
    """Dotted Python identifiers: what `pkgutil.resolve_name` takes on either side of the colon."""
    return all(part.isidentifier() for part in name.split("."))


def load_job_transform(name: str) -> Callable[[Any], Any]:
    """`load_transform` with the current directory importable, as with `python -m`: a job's own
    modules import from where the command (CLI, TUI or web app) was started, which console scripts
    and Streamlit do not put on the path."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return load_transform(name.strip())


def guarded(call: Callable[[], T], transform: str | None) -> T:
    """Run `call`; an exception raised by the user's transform becomes one UserError line naming it."""
    try:
        return call()
    except DsinspectError:
        raise
    except Exception as e:  # noqa: BLE001 - the transform is user code
        if not transform:
            raise
        raise UserError(f"transform {transform} raised {e.__class__.__name__}: {e}") from None


def as_table(result: Any) -> pa.Table:
    """A transform's output as an Arrow table (see the module docstring for what is accepted)."""
    table = getattr(result, "table", None)  # a Batch, or anything carrying its rows as .table
    if isinstance(table, (pa.Table, pa.RecordBatch)):
        result = table
    if isinstance(result, pa.RecordBatch):
        return pa.Table.from_batches([result])
    if isinstance(result, pa.Table):
        return result
    try:
        if isinstance(result, dict):
            return pa.table({str(k): _column(v) for k, v in result.items()})
        if isinstance(result, list) and all(isinstance(r, dict) for r in result):
            return pa.Table.from_pylist(result)
    except NOT_CONVERTIBLE as e:
        raise arrow_error(e, "cannot take the transform's output as a table") from None
    raise UserError(f"cannot fingerprint a transform result of type {type(result).__name__}: return an Arrow "
                    "table, a dict of equal-length columns or a list of row dicts")


def transformed_row_hashes(result: Any) -> list[bytes]:
    table = as_table(result)
    return row_hashes(table, table.column_names)


def transformed_fingerprint(result: Any) -> str:
    return batch_fingerprint(transformed_row_hashes(result))


def _column(values: Any) -> Any:
    if isinstance(values, np.ndarray) and values.ndim > 1:
        return list(values)  # one row per entry of the first axis, each a 1-D array
    return values

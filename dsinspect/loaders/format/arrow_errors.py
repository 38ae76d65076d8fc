"""The one place pyarrow's exceptions become ours: which of them mean what, and the one-line error.

pyarrow raises its own classes (ArrowInvalid is a ValueError, ArrowTypeError a TypeError, ArrowKeyError
a KeyError, ArrowIOError is OSError itself) and, from its Python-side conversion of lists and dicts,
plain TypeError, ValueError and OverflowError. Every engine site is one of two cases: values that do
not fit a type (`NOT_CONVERTIBLE`: the caller's input, a UserError) or bytes that do not parse
(`UNREADABLE`: a stored file failing its check, an IntegrityError; a file handed in, a UserError).
Sites catch one of the two and raise `arrow_error(e, where, error)`."""

from __future__ import annotations

import pyarrow as pa

from dsinspect.errors import DsinspectError, UserError

__all__ = ["NOT_CONVERTIBLE", "UNREADABLE", "arrow_error"]

# Values that do not fit a type: a cast, from_pylist, a table built from columns, a type built from JSON.
NOT_CONVERTIBLE: tuple[type[BaseException], ...] = (pa.ArrowException, TypeError, ValueError, OverflowError)
# Bytes that do not parse as Parquet or Arrow IPC: any Arrow error, an OSError (a truncated file), and
# from a garbled footer a column name that does not decode (UnicodeDecodeError) or is not there (KeyError).
UNREADABLE: tuple[type[BaseException], ...] = (pa.ArrowException, OSError, ValueError, LookupError)


def arrow_error(exc: BaseException, where: str, error: type[DsinspectError] = UserError) -> DsinspectError:
    """`exc` as one `error` line, `where: pyarrow's message` (whitespace folded: some messages end in a
    newline). `where` names the thing and the place, e.g. "cannot read x.parquet as Parquet"."""
    return error(f"{where}: {' '.join(str(exc).split())}")

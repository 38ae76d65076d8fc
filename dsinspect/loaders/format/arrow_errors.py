"""The one place pyarrow's exceptions become ours: which of them mean what, and the one-line error.

pyarrow raises its own classes (ArrowInvalid is a ValueError, ArrowTypeError a TypeError, ArrowKeyError
a KeyError, ArrowIOError is OSError itself) and, from its Python-side conversion of lists and dicts,
plain TypeError, ValueError and OverflowError. Every engine site is one of two cases: values that do
not fit a type (`NOT_CONVERTIBLE`: the caller's input, a UserError) or bytes that do not parse
(`UNREADABLE`: a stored file failing its check, an IntegrityError; a file handed in, a UserError).
Sites catch one of the two and raise `arrow_error(e, where, error)`.

One limit of Arrow's is a third case: a binary, string or list array has 32-bit offsets, so one array
holds at most OFFSET_LIMIT bytes (or list items). A batch whose column would pass it is the caller's
choice of batch size (`OffsetLimitError`, a UserError); `past_offset_limit` recognises Arrow's own
errors for it, and dsinspect's gathers check the same constant before they build such an array."""

from __future__ import annotations

import pyarrow as pa

from dsinspect.errors import DsinspectError, UserError

__all__ = ["NOT_CONVERTIBLE", "UNREADABLE", "OFFSET_LIMIT", "OffsetLimitError", "arrow_error", "past_offset_limit",
           "offset_limit_check"]

# Values that do not fit a type: a cast, from_pylist, a table built from columns, a type built from JSON.
NOT_CONVERTIBLE: tuple[type[BaseException], ...] = (pa.ArrowException, TypeError, ValueError, OverflowError)
# Bytes that do not parse as Parquet or Arrow IPC: any Arrow error, an OSError (a truncated file), and
# from a garbled footer a column name that does not decode (UnicodeDecodeError) or is not there (KeyError).
UNREADABLE: tuple[type[BaseException], ...] = (pa.ArrowException, OSError, ValueError, LookupError)


def arrow_error(exc: BaseException, where: str, error: type[DsinspectError] = UserError) -> DsinspectError:
    """`exc` as one `error` line, `where: pyarrow's message` (whitespace folded: some messages end in a
    newline). `where` names the thing and the place, e.g. "cannot read x.parquet as Parquet"."""
    return error(f"{where}: {' '.join(str(exc).split())}")


# The largest offset of an array with 32-bit offsets (binary, string, list): bytes or items one such
# array holds. Read where it is used (never bound by a from-import), so a test can lower it.
OFFSET_LIMIT = 2**31 - 1


class OffsetLimitError(UserError):
    """A column would pass OFFSET_LIMIT in one array: `column` names it (exit 2: a smaller batch fits)."""

    def __init__(self, message: str, column: str | None = None):
        super().__init__(message)
        self.column = column


def past_offset_limit(exc: BaseException) -> bool:
    """Is `exc` Arrow refusing an array past its 32-bit offsets (a take, a concatenation, a builder)?"""
    if isinstance(exc, pa.ArrowCapacityError):
        return True
    text = str(exc).lower()
    return isinstance(exc, pa.ArrowInvalid) and ("overflow" in text and ("offset" in text or "capacity" in text))


def offset_limit_check(total: int, type_: pa.DataType) -> None:
    """Raise Arrow's own ArrowCapacityError when an array of `type_` with 32-bit offsets would have to
    hold `total` bytes or items; large types (64-bit offsets) never do."""
    if total > OFFSET_LIMIT and not (pa.types.is_large_binary(type_) or pa.types.is_large_string(type_)
                                     or pa.types.is_large_list(type_)):
        raise pa.ArrowCapacityError(f"a {type_} array cannot hold {total:,} bytes or items: more than "
                                    f"{OFFSET_LIMIT:,} (32-bit offsets)")

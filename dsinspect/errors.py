"""The project's error types: one clear line for a person, and the exit code the CLI uses.

    DsinspectError                 anything dsinspect raises on purpose
    ├── UserError (2)              bad input: fix the command, the address, the file handed in
    │   ├── NotFoundError (2)      no such dataset, version, tag, row or file
    │   └── ManifestError (2)      a malformed manifest or tags file handed in
    ├── StorageError (2)           storage refused a read or a write: fix the disk, the permissions
    │   └── RetriesExhausted (1)   a read failed transiently on every try: the store is down, try later
    └── IntegrityError (1)         stored bytes fail their check: the data is damaged
        └── DamagedError (1)       a stored manifest or tags file that does not parse (also a ManifestError)
"""

from __future__ import annotations

__all__ = ["DsinspectError", "UserError", "ManifestError", "NotFoundError", "IntegrityError", "DamagedError",
           "StorageError", "RetriesExhausted", "reason_of"]


class DsinspectError(Exception):
    """Base of every error dsinspect raises on purpose; its message is one line naming what and where.
    `exit_code` is what the CLI exits with (2 unless a subclass says otherwise)."""

    exit_code = 2


class UserError(DsinspectError):
    """Bad input from the user: a malformed address, an unknown option, a wrong type, a file that does
    not parse (exit 2). Raised before or instead of any change to storage; fixing the input fixes it."""


class NotFoundError(UserError):
    """A dataset, version, tag, row or shard that does not exist (exit 2)."""


class ManifestError(UserError):
    """A manifest or tags file that is malformed or inconsistent, as handed in by the user (exit 2)."""


class StorageError(DsinspectError):
    """Storage refused a write (disk full, permission denied, read-only store) or a read that is not
    worth repeating (permission denied, an error the store reports as final); names the path (exit 2).
    Not a UserError: the input was fine, the disk, the permissions or the store need attention."""


class RetriesExhausted(StorageError):
    """A read failed with transient errors (timeouts, connection resets, 5xx or throttling) on every
    try; names the path, the tries and the last error (exit 1: the read was attempted and failed, the
    code a shard fetch out of retries had when it surfaced as an IntegrityError; a later run may succeed)."""

    exit_code = 1


class IntegrityError(DsinspectError):
    """Stored bytes do not match their recorded hash, or do not parse as what they claim to be (exit 1:
    a failed check, not a user mistake). Raised after one re-read where damage in transit is possible."""

    exit_code = 1


class DamagedError(ManifestError, IntegrityError):
    """A manifest or tags file read from the catalog's storage that does not parse or validate: a stored
    object failing its check (exit 1), unlike a bad file the user hands in (a ManifestError, exit 2).
    Still a ManifestError, so code that catches malformed manifests keeps catching it."""

    exit_code = 1


def reason_of(exc: BaseException) -> str:
    """A library's exception as one line for a person: its class and its message, whitespace folded
    (pyarrow's thrift errors, for one, end in a newline)."""
    text = " ".join(str(exc).split()) or "no details"
    return f"{type(exc).__name__}: {text}"

"""The project's error types: one clear line for a person, and the exit code the CLI uses."""

from __future__ import annotations

__all__ = ["DsinspectError", "UserError", "ManifestError", "NotFoundError", "IntegrityError", "DamagedError",
           "StorageError", "reason_of"]


class DsinspectError(Exception):
    """Base of every error dsinspect raises on purpose; its message is one line naming what and where."""

    exit_code = 2


class UserError(DsinspectError):
    """Bad input from the user: a malformed address, an unknown option, a wrong type (exit 2)."""


class NotFoundError(UserError):
    """A dataset, version, tag or row that does not exist (exit 2)."""


class ManifestError(UserError):
    """A manifest or tags file that is malformed or inconsistent (exit 2)."""


class IntegrityError(DsinspectError):
    """Stored bytes do not match their recorded hash (exit 1: a failed check, not a user mistake)."""

    exit_code = 1


class DamagedError(ManifestError, IntegrityError):
    """A manifest or tags file read from the catalog's storage that does not parse or validate: a stored
    object failing its check (exit 1), unlike a bad file the user hands in (a ManifestError, exit 2).
    Still a ManifestError, so code that catches malformed manifests keeps catching it."""

    exit_code = 1


class StorageError(UserError):
    """Storage that refused a write (disk full, permission denied, read-only) or kept failing a read:
    names the path (exit 2)."""


def reason_of(exc: BaseException) -> str:
    """A library's exception as one line for a person: its class and its message, whitespace folded
    (pyarrow's thrift errors, for one, end in a newline)."""
    text = " ".join(str(exc).split()) or "no details"
    return f"{type(exc).__name__}: {text}"

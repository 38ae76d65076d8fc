"""Checks for every string that becomes part of a path: a stored or user-given name may name a file,
but never one outside the directory it is meant for, nor switch filesystems.

Dataset and tag names have their own grammar (`address.check_name`); these cover the rest:
content addresses (sha256 hex, version ids), blob file endings, and names of files a source or an
export lists relative to its own directory. Each raises `error` (UserError by default) with one
line naming `what`; callers that parse a stored object pass ManifestError or name the file.
"""

from __future__ import annotations

import re

from dsinspect.errors import UserError

__all__ = ["SHA256_PATTERN", "is_sha256", "check_sha256", "check_ext", "check_relative", "check_component"]

SHA256_PATTERN = r"[0-9a-f]{64}"
_SHA256 = re.compile(SHA256_PATTERN)
_EXT = re.compile(r"(?:\.[a-z0-9]{1,16})?")  # "" or ".json", ".tiktoken": never a separator or a second dot
_RELATIVE = re.compile(r"[A-Za-z0-9._+=,@-]+(?:/[A-Za-z0-9._+=,@-]+)*")  # no '\\', ':', '%', '~', spaces, controls
_MAX_RELATIVE = 1024


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def check_sha256(value: object, what: str, error: type[Exception] = UserError) -> str:
    """`value` if it is 64 lowercase hex digits (a sha256, a version id): the only file names a
    content-addressed store builds."""
    if not is_sha256(value):
        raise error(f"bad {what} {_show(value)}: not 64 lowercase hex digits (a sha256)")
    return value  # type: ignore[return-value]


def check_ext(value: object, what: str, error: type[Exception] = UserError) -> str:
    """A file ending for a content-addressed blob: empty, or a dot and 1-16 lowercase letters or digits."""
    if not isinstance(value, str) or not _EXT.fullmatch(value):
        raise error(f"bad {what} {_show(value)}: a file ending is '' or '.' and 1-16 lowercase letters or digits")
    return value


def check_relative(value: object, what: str, error: type[Exception] = UserError) -> str:
    """A file name relative to a directory, perhaps with sub-directories, that stays inside it: no
    absolute path, no '.' or '..' component, no backslash, scheme, '~', '%' escape or control character."""
    ok = (isinstance(value, str) and len(value) <= _MAX_RELATIVE and _RELATIVE.fullmatch(value) is not None
          and not any(part in (".", "..") for part in value.split("/")))
    if not ok:
        raise error(f"bad {what} {_show(value)}: not a plain relative file name inside its directory")
    return value  # type: ignore[return-value]


def check_component(value: object, what: str, error: type[Exception] = UserError) -> str:
    """`check_relative`, and a single path component (no '/')."""
    check_relative(value, what, error)
    if "/" in value:  # type: ignore[operator]
        raise error(f"bad {what} {_show(value)}: must be one file name, without '/'")
    return value  # type: ignore[return-value]


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

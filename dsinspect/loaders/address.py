"""Addresses `NAME[@REF][:INDEX]`: one syntax for the CLI, the viewers and logs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsinspect.errors import UserError

__all__ = ["Address", "parse_address", "check_name", "NAME_PATTERN"]

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_NAME = re.compile(rf"^{NAME_PATTERN}$")
_ADDRESS = re.compile(r"^(?P<name>[^@:]*)(?:@(?P<ref>[^@:]*))?(?::(?P<index>[^@:]*))?$")
HEX_PREFIX_MIN = 8


@dataclass(frozen=True)
class Address:
    name: str
    ref: str = "latest"
    index: int | None = None

    def __str__(self) -> str:
        tail = "" if self.index is None else f":{self.index}"
        return f"{self.name}@{self.ref}{tail}"


def check_name(value: str, what: str = "dataset name") -> str:
    """`value` if it is a safe single path component; names can never escape the catalog root."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):  # not match(): `$` accepts a trailing newline
        raise UserError(f"bad {what} {value!r}: use letters, digits, '.', '_' or '-', starting with a "
                        "letter or digit (at most 128 characters)")
    return value


def parse_address(text: str) -> Address:
    """Parse `NAME[@REF][:INDEX]`; INDEX may be negative to count from the end."""
    m = _ADDRESS.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise UserError(f"bad address {text!r}: expected NAME[@REF][:INDEX], e.g. demo-text@v1:17")
    name = check_name(m["name"])
    ref = m["ref"]
    if ref is not None:
        check_name(ref, "version reference")
    index = None
    if m["index"] is not None:
        try:
            index = int(m["index"])
        except ValueError:
            raise UserError(f"bad address {text!r}: index {m['index']!r} is not an integer") from None
    return Address(name, ref or "latest", index)

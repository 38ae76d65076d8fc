"""Addresses `NAME[@REF][:INDEX]`: one syntax for the CLI, the viewers and logs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsinspect.errors import UserError

__all__ = ["Address", "parse_address", "check_name", "NAME_PATTERN"]

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_NAME = re.compile(rf"^{NAME_PATTERN}$")
_ADDRESS = re.compile(r"(?P<name>[^@:]*)(?:@(?P<ref>[^@:]*))?(?::(?P<index>[^@:]*))?")
_INDEX = re.compile(r"[0-9]{1,19}")  # ASCII digits only: not \d, which also takes full-width and other scripts' digits
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
    """Parse `NAME[@REF][:INDEX]`, INDEX a plain non-negative decimal (ASCII digits). Nothing is
    forgiven: no sign, no spaces around the address or inside it; a grammar that guesses (`:-1` as
    the last row, `: 3` as 3) lets a typo name a real but different sample. Text fields of the
    viewers trim what a person typed before they parse it."""
    if isinstance(text, str) and text != text.strip():
        raise UserError(f"bad address {text!r}: spaces around it are not part of an address")
    m = _ADDRESS.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise UserError(f"bad address {text!r}: expected NAME[@REF][:INDEX], e.g. demo-text@v1:17")
    name = check_name(m["name"])
    ref = m["ref"]
    if ref is not None:
        check_name(ref, "version reference")
    index = None
    if m["index"] is not None:
        if not _INDEX.fullmatch(m["index"]):
            raise UserError(f"bad address {text!r}: index {m['index']!r} is not a row number "
                            "(at most 19 digits 0-9, no sign or spaces)")
        index = int(m["index"])
    return Address(name, ref or "latest", index)

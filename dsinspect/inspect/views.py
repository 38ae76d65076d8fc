"""The shared view vocabulary: findings, the error and null views, and JSON conversion.

Every view is a plain dataclass with a `kind` and `to_json()`; renderers (CLI, TUI, web) dispatch on
`kind`. Heavy members (raw bytes, decoded pixels) are marked `metadata={"json": False}`.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, ClassVar

from dsinspect.errors import reason_of  # re-exported: views name why a decode failed
from dsinspect.inspect.hexdump import HexPage, hex_page

__all__ = ["Severity", "Finding", "View", "ErrorView", "NullView", "jsonable", "no_json", "safely", "reason_of"]


def no_json(**kwargs: Any) -> Any:
    """A dataclass field kept out of `to_json()` and `repr()` (raw bytes, pixels, caches)."""
    return field(repr=False, compare=False, metadata={"json": False}, **kwargs)


class Severity(str, enum.Enum):
    ERROR = "error"      # the data is broken or inconsistent
    WARNING = "warning"  # suspicious, probably worth a look
    INFO = "info"        # unusual but legitimate (a zero-width joiner inside an emoji)


@dataclass(frozen=True)
class Finding:
    """One observation about a value, with a stable `code` for scripts and `at` saying where."""

    severity: Severity
    code: str
    message: str
    at: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity.value, "code": self.code, "message": self.message, "at": self.at}


class View:
    """Base of all views: `kind` names the view type; `to_json()` walks the dataclass fields."""

    kind: ClassVar[str] = "view"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.metadata.get("json", True):
                out[f.name] = jsonable(getattr(self, f.name))
        return out

    @property
    def errors(self) -> list[Finding]:
        return [f for f in getattr(self, "findings", []) if f.severity is Severity.ERROR]


@dataclass
class ErrorView(View):
    """A value that could not be decoded as its role: the reason, the raw bytes, and whatever did decode."""

    kind: ClassVar[str] = "error"
    role: str
    reason: str
    raw: bytes = no_json()
    partial: View | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def raw_size(self) -> int:
        return len(self.raw)

    def hex(self, page: int = 0, page_size: int = 256) -> HexPage:
        return hex_page(self.raw, page, page_size)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "raw_size": self.raw_size, "raw_hex": self.hex().to_json()}


@dataclass
class NullView(View):
    """The field is null in this row."""

    kind: ClassVar[str] = "null"
    role: str


def safely(role: str, raw: bytes, decode: Callable[[], View]) -> View:
    """`decode()`, or an ErrorView carrying the reason and `raw` when it raises: no decoder error escapes."""
    try:
        return decode()
    except Exception as exc:  # noqa: BLE001 - broken data must become a view, whatever the library raises
        return ErrorView(role, reason_of(exc), bytes(raw))


def jsonable(value: Any) -> Any:
    """`value` as JSON data: non-finite floats become "nan"/"inf"/"-inf", bytes become base64 (short ones)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii"), "size": len(value)}
    if isinstance(value, Fraction):
        return float(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return jsonable(value.item())
    return repr(value)

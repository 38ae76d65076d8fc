"""JSON text, scalars and opaque bytes: pretty and raw."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from dsinspect.errors import UserError
from dsinspect.inspect.floats import json_number, narrow_array
from dsinspect.inspect.hexdump import HexPage, hex_page
from dsinspect.inspect.text import text_view
from dsinspect.inspect.views import ErrorView, Finding, Severity, View, jsonable, no_json
from dsinspect.loaders.format.nested import flatten
from dsinspect.loaders.format.npy import read_npy

__all__ = ["JsonView", "ScalarView", "BytesView", "json_view", "scalar_view", "bytes_view", "array_view", "sniff",
           "MAX_JSON_BYTES"]

MAX_JSON_BYTES = 16 << 20
_MAGIC = [  # (offset, prefix, description)
    (0, b"\x89PNG\r\n\x1a\n", "PNG image"), (0, b"\xff\xd8\xff", "JPEG image"), (0, b"GIF8", "GIF image"),
    (8, b"WEBP", "WebP image"), (4, b"ftyp", "MP4/QuickTime media"), (0, b"\x1aE\xdf\xa3", "Matroska/WebM media"),
    (0, b"RIFF", "RIFF container (WAV/AVI/WebP)"), (0, b"OggS", "Ogg media"), (0, b"fLaC", "FLAC audio"),
    (0, b"ID3", "MP3 audio"), (0, b"%PDF", "PDF document"), (0, b"PK\x03\x04", "ZIP archive"),
    (0, b"\x1f\x8b", "gzip data"), (0, b"(\xb5/\xfd", "zstd data"), (0, b"BZh", "bzip2 data"),
    (0, b"\xfd7zXZ\x00", "xz data"), (0, b"PAR1", "Parquet file"), (0, b"ARROW1", "Arrow IPC file"),
    (0, b"\x93NUMPY", "NumPy array"), (0, b"\x80\x04\x95", "Python pickle (never loaded)"),
    (0, b"\x80\x05\x95", "Python pickle (never loaded)"), (0, b"\x80\x02", "Python pickle (never loaded)"),
    (257, b"ustar", "tar archive"),
]


@dataclass
class JsonView(View):
    kind: ClassVar[str] = "json"
    value: Any
    pretty: str
    text: str
    byte_size: int
    findings: list[Finding] = field(default_factory=list)


@dataclass
class ScalarView(View):
    kind: ClassVar[str] = "scalar"
    value: Any
    type: str
    display: str
    findings: list[Finding] = field(default_factory=list)


@dataclass
class BytesView(View):
    """Opaque bytes: size, sha256, a guess at what they are, a printable preview; hex pages on request."""

    kind: ClassVar[str] = "bytes"
    size: int
    sha256: str
    detected: str | None
    preview: str
    findings: list[Finding] = field(default_factory=list)
    raw: bytes = no_json(default=b"")

    def hex(self, page: int = 0, page_size: int = 256) -> HexPage:
        return hex_page(self.raw, page, page_size)


def json_view(data: str | bytes) -> JsonView | ErrorView:
    """Parse JSON text; invalid JSON or invalid UTF-8 becomes an ErrorView naming the place."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_JSON_BYTES:
        return ErrorView("json", f"{len(raw):,} bytes is over the {MAX_JSON_BYTES:,}-byte limit for parsing", raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return ErrorView("json", f"not UTF-8: {e.reason} at byte {e.start}", raw, findings=text_view(raw).findings)
    findings: list[Finding] = []
    try:
        value = json.loads(text, object_pairs_hook=_pairs(findings), parse_constant=_constant(findings))
    except json.JSONDecodeError as e:
        return ErrorView("json", f"invalid JSON at line {e.lineno} column {e.colno} (char {e.pos}): {e.msg}", raw)
    except RecursionError:
        return ErrorView("json", "nested too deeply to parse", raw)
    pretty = json.dumps(value, indent=2, ensure_ascii=False)
    return JsonView(value, pretty, text, len(raw), findings)


def _pairs(findings: list[Finding]) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out = dict(pairs)
        if len(out) < len(pairs):
            dup = next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i]))
            findings.append(Finding(Severity.WARNING, "json-duplicate-key",
                                    f"duplicate key {dup!r}: the last value wins"))
        return out
    return hook


def _constant(findings: list[Finding]) -> Any:
    def parse(name: str) -> float:
        findings.append(Finding(Severity.WARNING, "json-nonstandard", f"{name} is not standard JSON"))
        return float(name.replace("Infinity", "inf"))
    return parse


def scalar_view(value: Any, type_name: str) -> ScalarView:
    findings = []
    if isinstance(value, float) and not math.isfinite(value):
        findings.append(Finding(Severity.INFO, "scalar-non-finite", f"the value is {value}"))
    if isinstance(value, str):
        findings += text_view(value).findings
        display = value
    elif hasattr(value, "isoformat"):
        display = value.isoformat()
    else:
        display = repr(value) if isinstance(value, float) else str(value)
    return ScalarView(jsonable(value), type_name, display, findings)


def array_view(value: list | bytes | None) -> JsonView | ErrorView:
    """Numbers in (nested) lists, or a .npy file (an array field whose rows differ in dtype or
    dimensions), shown as JSON with innermost lists on one line; shape and statistics as findings
    (a 4,096-wide embedding stays one readable line per row)."""
    dtype = None
    if isinstance(value, (bytes, bytearray, memoryview)):  # never unpickled: numbers and bools only
        try:
            array = read_npy(bytes(value), "the value")
        except UserError as e:
            return ErrorView("array", str(e), bytes(value))
        dtype, value = array.dtype.name, narrow_array(array.tolist(), array.dtype)
    value = value if value is not None else []
    flat, shape = flatten(value) if isinstance(value, list) else ([value], ())
    numbers = np.asarray([np.nan if v is None else float(v) for v in flat], dtype=np.float64)
    finite = numbers[np.isfinite(numbers)]
    shown = " × ".join(map(str, shape)) if shape else ("0-D" if shape == () else "ragged")
    findings = [Finding(Severity.INFO, "array-shape", (f"{dtype}, " if dtype else "") + f"shape {shown}, "
                        f"{len(flat):,} values" + (f", min {finite.min():.6g}, max {finite.max():.6g}, "
                                                     f"mean {finite.mean():.6g}" if len(finite) else ""))]
    if len(finite) < len(numbers):
        findings.append(Finding(Severity.WARNING, "array-non-finite",
                                f"{len(numbers) - len(finite):,} values are null, NaN or infinite"))
    data = jsonable(value)
    pretty = _compact(data)
    return JsonView(data, pretty, json.dumps(data), len(pretty.encode("utf-8")), findings)


def _compact(data: Any, indent: str = "") -> str:
    if not isinstance(data, list):
        return json_number(data)
    if not any(isinstance(v, list) for v in data):  # innermost: one line, float32 with its own digits
        return "[" + ", ".join(json_number(v) for v in data) + "]"
    inner = indent + "  "
    return "[\n" + ",\n".join(inner + _compact(v, inner) for v in data) + "\n" + indent + "]"


def sniff(data: bytes) -> str | None:
    """What the leading bytes say the data is, or None."""
    for offset, prefix, name in _MAGIC:
        if data[offset:offset + len(prefix)] == prefix:
            return name
    head = data[:4096]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3 or not head:
            return None
        text = head[:e.start].decode("utf-8")
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        return "JSON text (probably)"
    return "UTF-8 text" if text and all(c.isprintable() or c in "\n\r\t" for c in text) else None


def bytes_view(data: bytes) -> BytesView:
    preview = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in data[:64])
    return BytesView(len(data), hashlib.sha256(data).hexdigest(), sniff(data), preview, [], bytes(data))

"""A changed field's diff details (`loaders.diff.fields.field_detail`) in words, for any face: e.g.
`{"chars": [188, 125], "first_diff": 125}` -> "188 → 125 characters, first difference at 125". And the
one changed stretch of two sequences (text or token ids), for a face to highlight."""

from __future__ import annotations

import math
from typing import Any, Sequence

from dsinspect.loaders.diff.fields import changed_stretch, first_difference

__all__ = ["detail_text", "changed_span", "field_type_text", "schema_field_text"]


def changed_span(a: Sequence[Any], b: Sequence[Any]) -> tuple[int, int, int] | None:
    """(first, end_a, end_b): `a[first:end_a]` became `b[first:end_b]` between a common prefix and a
    common suffix (several edits far apart make one stretch); None when the two are equal. The
    stretch a diff's details carry (`loaders.diff.fields.changed_stretch`)."""
    change = changed_stretch(list(a) if not isinstance(a, str) else a, list(b) if not isinstance(b, str) else b,
                             first_difference(a, b)).get("change")
    return tuple(change["span"]) if change else None


def _n(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


def _pair(values: Sequence[Any], unit: str = "") -> str:
    a, b = values
    text = _n(a) if a == b else f"{_n(a)} → {_n(b)}"
    return f"{text} {unit}".rstrip()


def _value(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return _n(value)


def detail_text(detail: dict[str, Any]) -> str:
    """What changed in one field, in a few words ("" when the detail says nothing)."""
    parts: list[str] = []
    if "null" in detail:
        parts.append("null → a value" if detail["null"][0] else "a value → null")
    if "tokens" in detail:
        parts.append(_pair(detail["tokens"], "tokens") + _first(detail, "token "))
    if "chars" in detail:
        parts.append(_pair(detail["chars"], "characters") + _first(detail))
    if "size" in detail:
        parts += _image(detail)
    elif "shape" in detail:
        parts += _array(detail)
    elif "bytes" in detail:
        parts.append(_pair(detail["bytes"], "bytes") + _first(detail, "byte "))
    if "steps" in detail:
        parts.append(_pair(detail["steps"], "steps") + ", return " + _pair(detail["return"]))
    if "before" in detail and "after" in detail and not isinstance(detail.get("before"), (list, dict)):
        parts.append(f"{_value(detail['before'])} → {_value(detail['after'])}")
    if "error" in detail:
        parts.append(str(detail["error"]))
    return ", ".join(p for p in parts if p)


def _first(detail: dict[str, Any], what: str = "") -> str:
    first = detail.get("first_diff")
    return "" if first is None else f", first difference at {what}{first:,}"


def _image(detail: dict[str, Any]) -> list[str]:
    (w0, h0), (w1, h1) = detail["size"]
    m0, m1 = detail.get("mode") or ["?", "?"]
    a, b = f"{w0}×{h0} {m0}", f"{w1}×{h1} {m1}"
    parts = [a if a == b else f"{a} → {b}"]
    if detail.get("format"):
        parts.append(_pair(detail["format"]))
    if detail.get("bytes"):
        parts.append(_pair(detail["bytes"], "bytes"))
    if "value_range" in detail:
        ranges = ["?" if r is None else f"{_n(r[0])}–{_n(r[1])}" for r in detail["value_range"]]
        bits = "/".join(dict.fromkeys(str(b) for b in detail.get("bits") or []))
        parts.append(f"{bits}-bit values {ranges[0]} → {ranges[1]}")
    if "pixels_changed" in detail:
        scale = f" of {_n(detail['full_scale'])}" if detail.get("full_scale") else ""
        mean, top = detail.get("pixel_mean_abs_diff"), detail.get("pixel_max_abs_diff")
        parts.append(f"mean pixel difference {_n(mean)}{scale} (largest {_n(top)}), "
                     f"{detail['pixels_changed']:.1%} of pixels differ")
    if "note" in detail:
        parts.append(str(detail["note"]))
    return parts


def _array(detail: dict[str, Any]) -> list[str]:
    s0, s1 = ("×".join(map(str, s)) if isinstance(s, list) else str(s) for s in detail["shape"])
    parts = [f"{detail.get('dtype', '')} {s0}" + (f" → {s1}" if s1 != s0 else "")]
    if "elements_changed" in detail:
        text = f"{detail['elements_changed']:,} of {detail['elements'][0]:,} elements differ"
        if "first_diff" in detail:
            before, after = detail["values"]
            where = ", ".join(map(str, detail["first_diff"]))
            text += f", the first at [{where}]: {_value(before)} → {_value(after)}"
        parts.append(text)
    if detail.get("max_abs_diff") is not None:
        parts.append(f"largest difference {_n(detail['max_abs_diff'])}")
    return parts


def field_type_text(t: Any) -> str:
    """A manifest's field type (a string, or {"type": "list", "item": ...} and the like) as one phrase."""
    if isinstance(t, dict):
        kind = t.get("type", "?")
        if "item" in t:
            return f"{kind}<{field_type_text(t['item'])}>"
        if "fields" in t and isinstance(t["fields"], list):
            inner = ", ".join(f"{f.get('name', '?')}: {field_type_text(f.get('type'))}" if isinstance(f, dict)
                              else str(f) for f in t["fields"])
            return f"{kind}<{inner}>"
        return ", ".join(f"{k} {field_type_text(v)}" for k, v in t.items())
    if isinstance(t, list):
        return ", ".join(field_type_text(x) for x in t)
    return str(t)


def schema_field_text(f: Any) -> str:
    """A field's manifest entry ({"name", "type", "role", "nullable", "options"}) as one line."""
    if not isinstance(f, dict):
        return "" if f is None else str(f)
    parts = [field_type_text(f.get("type")), str(f.get("role", ""))]
    if "nullable" in f:
        parts.append("nullable" if f["nullable"] else "not null")
    for k, v in (f.get("options") or {}).items():
        parts.append(f"{k} " + (", ".join(f"{a} {b}" for a, b in v.items()) if isinstance(v, dict) else str(v)))
    return " · ".join(p for p in parts if p)

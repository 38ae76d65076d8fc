"""Diff for the web: two version addresses -> plain, picklable data for the Diff page.

No Streamlit here. The addresses come from the URL (`?a=NAME@REF&b=NAME@REF`) and are only ever
resolved through the configured catalog (`Catalog.resolve` parses them); none is used as a path.
Values are returned as plain text or PNG bytes; the page shows text only escaped (web_page.mono),
through st.text and dataframes, so sample text is never interpreted as Markdown or HTML.
"""

from __future__ import annotations

import io
import json
import warnings
from typing import Any

import numpy as np
from PIL import Image

from dsinspect.inspect.cells import cell
from dsinspect.inspect.images import SAFE_FORMATS
from dsinspect.loaders.diff.compare import diff
from dsinspect.loaders.diff.images import pixel_delta
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["DIFF_LIMIT", "CHANGED_PAGE", "TEXT_CAP", "diff_model", "changed_rows", "image_png", "difference_png",
           "value_text"]

DIFF_LIMIT = 100        # entries listed per kind (added, removed, changed, moved); the counts are exact
CHANGED_PAGE = 5        # changed rows shown side by side per page (each up to 3 images: the browser pays per element)
TEXT_CAP = 20_000       # characters of one value shown
_DIFF_PIXELS = 16 << 20  # larger images get no difference figure


def _json(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def diff_model(catalog: Catalog, a: str, b: str, limit: int = DIFF_LIMIT) -> dict[str, Any]:
    """Summary, schema changes, shard changes and the listed row changes of `a` -> `b`."""
    va, vb = catalog.resolve(a.strip()), catalog.resolve(b.strip())
    d = diff(va, vb, catalog, limit=limit)
    j = d.to_json()
    rows = j["rows"]
    name_a, name_b = f"{va.name}@{va.id[:12]}", f"{vb.name}@{vb.id[:12]}"
    schema = [{"field": c["field"], "change": c["change"], "before": _json(c["before"]), "after": _json(c["after"])}
              for c in j["schema"]]
    shards = []
    for change in ("added", "removed", "moved"):
        for s in j["shards"][change]:
            shards.append({"change": change, "index_a": s.get("index_a"), "index_b": s.get("index_b"),
                           "rows": s["rows"], "sha256": s["sha256"]})
    shared = len(j["shards"]["shared"])
    ident = rows["key"] if rows["matched_by"] == "key" else "row_hash"
    return {"a": {**j["a"], "name": name_a, "dataset": va.name}, "b": {**j["b"], "name": name_b, "dataset": vb.name},
            "empty": j["empty"], "limit": limit, "matched_by": rows["matched_by"], "key": rows["key"],
            "ident": ident, "notes": rows["notes"], "counts": rows["counts"], "field_counts": rows["fields"],
            "rows_read": rows["rows_read"], "schema": schema, "shards": shards, "shards_shared": shared,
            "added": _row_list(vb, rows["added"], "index_b", name_b, ident),
            "removed": _row_list(va, rows["removed"], "index_a", name_a, ident),
            "moved": [{ident: _ident(r), "index_a": r["index_a"], "index_b": r["index_b"]} for r in rows["moved"]],
            "changed": [{ident: _ident(r), "index_a": r["index_a"], "index_b": r["index_b"],
                         "fields": list(r["fields"]),
                         "address_a": f"{name_a}:{r['index_a']}", "address_b": f"{name_b}:{r['index_b']}",
                         "details": r["details"]} for r in rows["changed"]]}


def _ident(row: dict[str, Any]) -> Any:
    return row["key"] if "key" in row else row.get("row_hash")


def _row_list(version: Any, listed: list[dict], index_name: str, name: str, ident: str) -> list[dict[str, Any]]:
    """Added or removed rows with a short plain-text cell of each field, for a table."""
    if not listed:
        return []
    names = [f.name for f in version.fields]
    table = version.take([r[index_name] for r in listed], columns=names)
    out = []
    for i, r in enumerate(listed):
        row = {ident: _ident(r), "index": r[index_name], "address": f"{name}:{r[index_name]}"}
        row.update({n: cell(table.column(n)[i].as_py()) for n in names if n not in row})
        out.append(row)
    return out


def changed_rows(catalog: Catalog, a: str, b: str, changed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Before and after values of the changed fields of the given changed rows (entries of
    `diff_model(...)["changed"]`): text, or PNG bytes for images, with a pixel-difference figure."""
    if not changed:
        return []
    va, vb = catalog.resolve(a.strip()), catalog.resolve(b.strip())
    names = list(dict.fromkeys(n for r in changed for n in r["fields"]))
    rows_a = va.take([r["index_a"] for r in changed], columns=names)
    rows_b = vb.take([r["index_b"] for r in changed], columns=names)
    out = []
    for i, r in enumerate(changed):
        fields = []
        for name in r["fields"]:
            before, after = rows_a.column(name)[i].as_py(), rows_b.column(name)[i].as_py()
            role = va.manifest.field(name).role
            fields.append(_field_pair(name, role, before, after, r["details"].get(name, {})))
        out.append({**{k: v for k, v in r.items() if k != "details"}, "field_values": fields})
    return out


def _field_pair(name: str, role: Role, before: Any, after: Any, detail: dict[str, Any]) -> dict[str, Any]:
    pair: dict[str, Any] = {"name": name, "role": role.value, "detail": detail, "kind": "text",
                            "detail_text": _json(detail)}
    if role is Role.IMAGE and isinstance(before, (bytes, bytearray)) and isinstance(after, (bytes, bytearray)):
        png_a, cap_a = image_png(before)
        png_b, cap_b = image_png(after)
        if png_a is not None and png_b is not None:
            pair.update(kind="image", before=png_a, after=png_b, before_caption=cap_a, after_caption=cap_b,
                        difference=difference_png(before, after))
            return pair
    pair.update(before=value_text(before), after=value_text(after))
    return pair


def value_text(value: Any) -> str:
    """A whole value as plain text (cut at TEXT_CAP characters): strings as they are, bytes as a
    note of their size, anything else as JSON."""
    if value is None:
        text = "null"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (bytes, bytearray)):
        text = f"<{len(value):,} bytes> " + bytes(value[:64]).hex(" ") + (" …" if len(value) > 64 else "")
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + f"… ({len(text) - TEXT_CAP:,} more characters)"


def _open(data: bytes) -> Image.Image:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        img = Image.open(io.BytesIO(data), formats=SAFE_FORMATS)  # Pillow's own decoders only
        img.load()
    return img


def image_png(data: bytes) -> tuple[bytes | None, str]:
    """An encoded image as PNG at full size, with a caption naming format, size, mode and bytes;
    or None and the reason it could not be decoded."""
    try:
        img = _open(data)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        return None, f"not decodable as an image: {e}"
    caption = f"{img.format or '?'} {img.width}×{img.height} {img.mode} · {len(data):,} bytes"
    shown = img if img.mode in ("1", "L", "LA", "P", "RGB", "RGBA", "I;16") else img.convert("RGBA")
    buf = io.BytesIO()
    shown.save(buf, "PNG")
    return buf.getvalue(), caption


def difference_png(a: bytes, b: bytes) -> bytes | None:
    """A greyscale figure of where two images of one size differ (the largest channel difference,
    on the stored values of 16/32-bit images, stretched so the largest becomes white); None when
    the sizes or bit depths differ or either is undecodable."""
    try:
        x, y = _open(a), _open(b)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    if x.width * x.height > _DIFF_PIXELS:
        return None
    delta = pixel_delta(x, y)
    if delta is None:
        return None
    delta = np.nan_to_num(delta if delta.ndim == 2 else delta.max(axis=2), nan=0.0)
    top = float(delta.max())
    figure = (delta * (255.0 / top)).astype(np.uint8) if top else delta.astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(figure, "L").save(buf, "PNG")
    return buf.getvalue()

"""Diff for the web: two version addresses -> plain, picklable data for the Diff page.

No Streamlit here. The addresses come from the URL (`?a=NAME@REF&b=NAME@REF`) and are only ever
resolved through the configured catalog (`Catalog.resolve` parses them); none is used as a path.
Values are returned as plain text or PNG bytes; the page shows text only escaped (ui/page.py: mono),
through st.text and dataframes, so sample text is never interpreted as Markdown or HTML.
"""

from __future__ import annotations

import html
import io
import json
from typing import Any

from PIL import Image

from dsinspect.inspect.cells import cell
from dsinspect.inspect.diff_text import changed_span, detail_text, schema_field_text
from dsinspect.inspect.image_diff import difference_image, open_image, upright
from dsinspect.inspect.sample import open_address
from dsinspect.inspect.sizes import human_bytes
from dsinspect.loaders.diff.compare import diff
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["DIFF_LIMIT", "CHANGED_PAGE", "TEXT_CAP", "diff_model", "changed_rows", "image_png", "difference_png",
           "value_text", "token_diff_html", "CHANGED_CLASS"]

DIFF_LIMIT = 100        # entries listed per kind (added, removed, changed, moved); the counts are exact
CHANGED_PAGE = 5        # changed rows shown side by side per page (each up to 3 images: the browser pays per element)
TEXT_CAP = 20_000       # characters of one value shown
TOKEN_CONTEXT = 8       # unchanged tokens shown either side of the changed stretch
TOKEN_SHOWN = 64        # tokens of the changed stretch shown per side
STEPS_SHOWN = 200       # steps of a changed trajectory listed per side
CHANGED_CLASS = "dsi-changed"
_TOKEN_DIFF_CSS = ("<style>.dsi-tokdiff{font-family:'Source Code Pro',monospace;font-size:0.85rem;line-height:1.9;"
                   "white-space:pre-wrap}.dsi-tokdiff .t{border:1px solid rgba(128,128,144,0.35);border-radius:3px;"
                   f"padding:0 1px;margin:0 1px}}.dsi-tokdiff mark.{CHANGED_CLASS}{{background:#ffd54f;"
                   "border-radius:3px;padding:2px 0}.dsi-tokdiff .cut{color:#888}</style>")


def diff_model(catalog: Catalog, a: str, b: str, limit: int = DIFF_LIMIT) -> dict[str, Any]:
    """Summary, schema changes, shard changes and the listed row changes of `a` -> `b`."""
    va, vb = catalog.resolve(a.strip()), catalog.resolve(b.strip())
    d = diff(va, vb, catalog, limit=limit)
    j = d.to_json()
    rows = j["rows"]
    name_a, name_b = f"{va.name}@{va.id[:12]}", f"{vb.name}@{vb.id[:12]}"
    schema = [{"field": c["field"], "change": c["change"], "before": schema_field_text(c["before"]),
               "after": schema_field_text(c["after"])} for c in j["schema"]]
    shards = []
    for change in ("added", "removed", "moved"):
        for s in j["shards"][change]:  # a shard only one side has: "—" on the other, never None
            shards.append({"change": change, "index_a": _shard_index(s.get("index_a")),
                           "index_b": _shard_index(s.get("index_b")), "rows": s["rows"], "sha256": s["sha256"]})
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


def _shard_index(index: int | None) -> str:
    return "—" if index is None else str(index)


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
        row.update({n: cell(table.column(n)[i]) for n in names if n not in row})
        out.append(row)
    return out


def changed_rows(catalog: Catalog, a: str, b: str, changed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Before and after values of the changed fields of the given changed rows (entries of
    `diff_model(...)["changed"]`): text; PNG bytes for images (upright by their EXIF orientation),
    with a pixel-difference figure; for tokens the changed stretch, decoded and marked; for
    trajectories a table of steps. Each with its detail in words."""
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
            pair = _field_pair(name, role, before, after, r["details"].get(name, {}))
            if role is Role.TOKENS and isinstance(before, list) and isinstance(after, list):
                pair.update(_token_pair(catalog, f"{va.name}@{va.id}:{r['index_a']}",
                                        f"{vb.name}@{vb.id}:{r['index_b']}", name, before, after))
            fields.append(pair)
        out.append({**{k: v for k, v in r.items() if k != "details"}, "field_values": fields})
    return out


def _field_pair(name: str, role: Role, before: Any, after: Any, detail: dict[str, Any]) -> dict[str, Any]:
    pair: dict[str, Any] = {"name": name, "role": role.value, "detail": detail, "kind": "text",
                            "detail_text": detail_text(detail)}
    if role is Role.IMAGE and isinstance(before, (bytes, bytearray)) and isinstance(after, (bytes, bytearray)):
        png_a, cap_a = image_png(before)
        png_b, cap_b = image_png(after)
        if png_a is not None and png_b is not None:
            pair.update(kind="image", before=png_a, after=png_b, before_caption=cap_a, after_caption=cap_b,
                        difference=difference_png(before, after))
            return pair
    if role is Role.TRAJECTORY and isinstance(before, dict) and isinstance(after, dict):
        pair.update(kind="table", before=_steps_table(before), after=_steps_table(after))
        return pair
    if role is Role.JSON:  # shown as the Sample page shows JSON: indented
        before, after = _pretty(before), _pretty(after)
    pair.update(before=value_text(before), after=value_text(after))
    if isinstance(before, str) and isinstance(after, str):  # the changed characters, marked on each side
        span = changed_span(pair["before"], pair["after"])
        if span is not None:
            first, end_a, end_b = span
            pair.update(before_marked=(first, end_a), after_marked=(first, end_b))
    return pair


def _pretty(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.dumps(json.loads(value), indent=2, ensure_ascii=False)
    except ValueError:
        return value


def _steps_table(trajectory: dict[str, Any]) -> dict[str, Any]:
    """A trajectory (a struct of per-step lists) as rows of steps, the first STEPS_SHOWN of them."""
    lists = {k: v for k, v in trajectory.items() if isinstance(v, list)}
    steps = max((len(v) for v in lists.values()), default=0)
    rows = []
    for t in range(min(steps, STEPS_SHOWN)):
        row: dict[str, Any] = {"step": t}
        for k, v in lists.items():
            x = v[t] if t < len(v) else None
            row[k] = x if isinstance(x, (int, float, bool)) or x is None else cell(x)
        rows.append(row)
    return {"rows": rows, "steps": steps}


def _token_pair(catalog: Catalog, address_a: str, address_b: str, name: str, before: list, after: list
                ) -> dict[str, Any]:
    """The changed stretch of two token sequences, decoded by the field's tokenizer where it has one:
    a line naming the first differing token, and each side as HTML with the stretch marked."""
    span = changed_span(before, after)
    if span is None:
        return {}
    first, end_a, end_b = span
    sides = []
    for address, ids, end in ((address_a, before, end_a), (address_b, after, end_b)):
        view = open_address(catalog, address).view(name)
        lo, hi = max(0, first - TOKEN_CONTEXT), min(len(ids), min(end, first + TOKEN_SHOWN) + TOKEN_CONTEXT)
        pieces = view.pieces(lo, hi) if getattr(view, "kind", "") == "tokens" else []
        sides.append((pieces, lo, end, len(ids)))
    return {"kind": "tokens", "first_token": _first_token(sides, first),
            "before_html": token_diff_html(*sides[0], first), "after_html": token_diff_html(*sides[1], first)}


def _piece_text(p: Any) -> str:
    shown = p.display if p.display else f"#{p.id}"
    return shown if shown.strip() else repr(shown)


def _first_token(sides: list[tuple], first: int) -> str:
    """'first differing token: position N, id A 'x' → id B 'y'' (or the sequence that ends there)."""
    words = []
    for pieces, _lo, _, length in sides:
        piece = next((p for p in pieces if p.position == first), None)
        words.append("(the sequence ends)" if first >= length or piece is None
                     else f"id {piece.id} {_piece_text(piece)!r}" if piece.display else f"id {piece.id}")
    return f"first differing token: position {first:,}: {words[0]} → {words[1]}"


def token_diff_html(pieces: list[Any], lo: int, end: int, length: int, first: int) -> str:
    """One side's tokens around the change as HTML: context, the changed stretch (positions
    first..end) inside <mark class="dsi-changed">, context. Every piece's text is escaped."""
    def span(p: Any) -> str:
        title = html.escape(f"#{p.position} id {p.id}", quote=True)
        return f'<span class="t" title="{title}">{html.escape(p.display or f"#{p.id}", quote=True)}</span>'

    head = [span(p) for p in pieces if p.position < first]
    changed = [span(p) for p in pieces if first <= p.position < end]
    tail = [span(p) for p in pieces if p.position >= end]
    shown_end = max((p.position for p in pieces), default=first - 1) + 1
    more = end - first - len(changed)
    mark = "".join(changed) + (f'<span class="cut"> …{more:,} more</span>' if more > 0 else "")
    body = (('<span class="cut">… </span>' if lo > 0 else "") + "".join(head)
            + f'<mark class="{CHANGED_CLASS}">{mark or "∅"}</mark>' + "".join(tail)
            + ('<span class="cut"> …</span>' if shown_end < length else ""))
    return f'{_TOKEN_DIFF_CSS}<div class="dsi-tokdiff">{body}</div>'


def value_text(value: Any) -> str:
    """A whole value as plain text (cut at TEXT_CAP characters): strings as they are, bytes as a
    note of their size, anything else as JSON."""
    if value is None:
        text = "null"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (bytes, bytearray)):
        text = f"<{human_bytes(len(value))}> " + bytes(value[:64]).hex(" ") + (" …" if len(value) > 64 else "")
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + f"… ({len(text) - TEXT_CAP:,} more characters)"


def image_png(data: bytes) -> tuple[bytes | None, str]:
    """An encoded image as PNG at full size, upright by its EXIF orientation, with a caption naming
    format, stored size, mode, orientation and bytes; or None and the reason it could not be decoded."""
    try:
        stored = open_image(data)
        img, orientation = upright(stored)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        return None, f"not decodable as an image: {e}"
    turned = f" · EXIF orientation {orientation}, shown {img.width}×{img.height}" if orientation else ""
    caption = (f"{stored.format or '?'} {stored.width}×{stored.height} {stored.mode}{turned} · "
               f"{human_bytes(len(data))}")
    shown = img if img.mode in ("1", "L", "LA", "P", "RGB", "RGBA", "I;16") else img.convert("RGBA")
    buf = io.BytesIO()
    shown.save(buf, "PNG")
    return buf.getvalue(), caption


def difference_png(a: bytes, b: bytes) -> bytes | None:
    """`inspect.image_diff.difference_image` as PNG bytes (None when there is no figure)."""
    figure = difference_image(a, b)
    if figure is None:
        return None
    buf = io.BytesIO()
    figure.save(buf, "PNG")
    return buf.getvalue()

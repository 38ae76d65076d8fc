"""The Sample page's data: one sample's fields decoded once (views, raw bytes, hashes, findings), its
video frames, token spans and hex pages. Plain, picklable data; no Streamlit (ui/cache.py caches it).
The address comes from the URL and is parsed by `dsinspect.loaders.store.address`, never used as a path."""

from __future__ import annotations

import hashlib
import html
import warnings
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from dsinspect.inspect import open_address
from dsinspect.inspect.hexdump import hex_page
from dsinspect.inspect.views import ErrorView, View
from dsinspect.loaders.store.address import parse_address
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["FieldModel", "SampleModel", "sample_model", "frame_png", "token_html", "hex_text", "HEX_LINE",
           "TOKEN_CAP", "STEP_CAP"]

TOKEN_CAP = 4096        # token pieces prepared per field; the page shows them 256 at a time
STEP_CAP = 1000         # trajectory steps listed per field (a page gets no 10^6-row table)
STRIP = 8
_COLOURS = ("#fde2e4", "#e2ece9", "#dfe7fd", "#fff1c1", "#e8dff5", "#d7f2f7")


@dataclass
class FieldModel:
    name: str
    role: str
    type: str
    null: bool
    size: int
    hash: str
    sha256: str
    raw: bytes
    kind: str                       # the view's kind: text, tokens, image, video, trajectory, json, ...
    view: dict[str, Any] = field(default_factory=dict)
    findings: list[tuple[str, str]] = field(default_factory=list)  # (severity, message)


@dataclass
class SampleModel:
    address: str
    dataset: str
    version_id: str
    index: int
    num_rows: int
    row_hash_stored: str | None
    row_hash_recomputed: str
    row_hash_ok: bool
    findings: list[tuple[str, str]]
    fields: list[FieldModel]

    def field(self, name: str) -> FieldModel:
        return next(f for f in self.fields if f.name == name)


def sample_model(catalog: Catalog, address: str) -> SampleModel:
    """Everything the Sample page shows for one sample, decoded once."""
    addr = parse_address(address)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        sample = open_address(catalog, addr)
        fields = [_field_model(sample, info) for info in sample.fields]
    return SampleModel(sample.address, sample.dataset, sample.version_id, sample.index, sample.num_rows,
                       sample.row_hash.stored, sample.row_hash.recomputed, sample.row_hash.ok,
                       _findings(sample.findings), fields)


def _field_model(sample: Any, info: Any) -> FieldModel:
    raw = sample.raw(info.name)
    view = sample.view(info.name)
    return FieldModel(info.name, info.role, info.type, info.null, info.size, info.hash,
                      hashlib.sha256(raw).hexdigest(), raw, view.kind, _view_data(view, raw),
                      _findings(getattr(view, "findings", [])))


def _findings(findings: list) -> list[tuple[str, str]]:
    return [(f.severity.value, f.message) for f in findings]


def _view_data(view: View, raw: bytes) -> dict[str, Any]:
    kind = view.kind
    if kind == "text":
        return {"text": view.text, "visible": view.visible, "chars": view.chars, "lines": view.lines,
                "notes": [n.label for n in view.notes[:50]]}
    if kind == "tokens":
        pieces = [(p.position, p.id, p.display, p.start, p.end, p.special, p.unknown)
                  for p in view.pieces(0, TOKEN_CAP)]
        return {"tokenizer": view.tokenizer, "count": len(view.ids), "pieces": pieces, "text": view.text,
                "stats": view.stats.to_json()}
    if kind == "image":
        return {"png": view.png(), "format": view.format, "width": view.display_width,
                "height": view.display_height, "mode": view.mode}
    if kind == "video":
        return _video_data(view)
    if kind == "trajectory":
        rows = [r.to_json() for p in range(min(view.pages, -(-STEP_CAP // view.page_size))) for r in view.page(p).rows]
        return {"length": view.length, "episode_return": view.episode_return, "rows": rows,
                "rewards": view.rewards, "returns": view.returns}
    if kind == "json":
        return {"pretty": view.pretty}
    if kind == "scalar":
        return {"display": view.display, "type": view.type}
    if kind == "bytes":
        return {"detected": view.detected, "preview": view.preview}
    if kind == "error":
        return {"reason": view.reason}
    return {}


def _video_data(view: Any) -> dict[str, Any]:
    strip = [(f.index, f.png()) for f in view.strip(STRIP, 96) if not isinstance(f, ErrorView)]
    return {"codec": view.codec, "container": view.container, "width": view.width, "height": view.height,
            "fps": view.fps, "duration": view.duration, "frame_count": view.frame_count,
            "keyframes": view.keyframes, "mime": _video_mime(view.container), "strip": strip}


def _video_mime(container: str) -> str:
    c = container.lower()
    return "video/webm" if "webm" in c or "matroska" in c else "video/mp4"


def frame_png(catalog: Catalog, address: str, field_name: str, index: int) -> tuple[bytes | None, str]:
    """Frame `index` of a video field at full size as PNG, or None and the reason it failed."""
    sample = open_address(catalog, parse_address(address))
    view = sample.view(field_name)
    if view.kind != "video":
        return None, f"field {field_name!r} is not a decodable video"
    frame = view.frame(index)
    if isinstance(frame, ErrorView):
        return None, frame.reason
    return frame.png(), f"frame {frame.index} · t={frame.time:.3f}s" + (" · keyframe" if frame.keyframe else "")


_TOKEN_CSS = ("<style>.dsi-tokens{line-height:1.9}.dsi-tok{border-radius:3px;padding:0 1px;margin:0 1px;"
              "white-space:pre-wrap;font-family:monospace}"
              + "".join(f'.dsi-tok[data-k="{i}"]{{background:{c}}}' for i, c in enumerate(_COLOURS))
              + '.dsi-tok[data-k="s"]{background:#c9c9c9}.dsi-tok[data-k="u"]{background:#f4b6b6}</style>')


def token_html(pieces: list[tuple], start: int = 0, stop: int | None = None) -> str:
    """Token pieces as coloured spans, the id and byte range on hover. All sample text is escaped.
    The styling lives in one <style> block, not on every span: a page of 256 spans stays small HTML."""
    spans = []
    for position, tid, display, b0, b1, special, unknown in pieces[start:stop]:
        kind = "u" if unknown else ("s" if special else str(position % len(_COLOURS)))
        title = (f"#{position} id {tid} bytes {b0}–{b1}" + (" special" if special else "")
                 + (" unknown" if unknown else ""))
        text = display if display else "∅"
        spans.append(f'<span class="dsi-tok" title="{html.escape(title, quote=True)}" data-k="{kind}">'
                     f'{html.escape(text, quote=True)}</span>')
    return _TOKEN_CSS + '<div class="dsi-tokens">' + "".join(spans) + "</div>"


HEX_LINE = 79  # characters of a full hex_text line: offset, 16 bytes, their characters


def hex_text(raw: bytes, page: int = 0, page_size: int = 512) -> tuple[str, int, int]:
    """A page of a classic hex dump as plain text, the page shown (clamped) and the page count."""
    hp = hex_page(raw, page, page_size)
    lines = [f"{line.offset:08x}  {line.hex:<49}  |{line.ascii}|" for line in hp.lines]
    return "\n".join(lines) or "(0 bytes)", hp.page, hp.pages

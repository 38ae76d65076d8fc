"""How each kind of field view is laid out on the Sample page. Sample text never reaches Markdown
unescaped: it goes through st.text / dataframes, or html.escape (web_page.mono, token_html) before
unsafe_allow_html."""

from __future__ import annotations

from typing import Any

import streamlit as st

from dsinspect.web import web_cache
from dsinspect.web.web_model import FieldModel, hex_text, token_html
from dsinspect.web.web_page import mono

__all__ = ["decoded", "raw", "findings"]

TOKEN_PAGE = 256
_ICON = {"error": "✖", "warning": "⚠", "info": "ℹ"}


def findings(items: list[tuple[str, str]]) -> None:
    if items:
        mono("\n".join(f"{_ICON.get(sev, '•')} {sev}: {msg}" for sev, msg in items))


def decoded(f: FieldModel, address: str) -> None:
    """The decoded view of one field."""
    if f.null:
        st.caption("null")
        return
    draw = _DRAW.get(f.kind)
    if draw is None:
        st.caption(f"no web view for {f.kind!r}: see the raw bytes")
    else:
        draw(f, address)
    findings(f.findings)


def raw(f: FieldModel, sample_name: str) -> None:
    """Hashes, a paged hex dump and a download of the field's raw bytes."""
    mono(f"xxh128 (canonical)  {f.hash}\nsha256 (raw)        {f.sha256}\nsize                {f.size:,} bytes")
    pages = max(1, -(-len(f.raw) // 512))
    page = 1
    if pages > 1:
        page = st.number_input(f"Hex page (of {pages})", 1, pages, 1, key=f"hex_page_{f.name}")
    text, _, _ = hex_text(f.raw, int(page) - 1)
    mono(text)
    st.download_button(f"Download {f.name} ({len(f.raw):,} bytes)", f.raw, file_name=f"{sample_name}-{f.name}.bin",
                       mime="application/octet-stream", key=f"download_{f.name}", icon=":material/download:")


def _text(f: FieldModel, address: str) -> None:
    v = f.view
    st.caption(f"{v['chars']:,} characters · {v['lines']:,} lines")
    mono(v["visible"])


def _tokens(f: FieldModel, address: str) -> None:
    v = f.view
    pieces = v["pieces"]
    st.caption(f"{v['count']:,} tokens · tokenizer {v['tokenizer'] or 'none'} · hover a token for its id and bytes")
    pages = max(1, -(-len(pieces) // TOKEN_PAGE))
    page = 1
    if pages > 1:
        page = st.number_input(f"Token page (of {pages})", 1, pages, 1, key=f"tok_page_{f.name}")
    start = (int(page) - 1) * TOKEN_PAGE
    st.markdown(token_html(pieces, start, start + TOKEN_PAGE), unsafe_allow_html=True)
    # drawn on demand: an expander would still build both tables in the browser on every load
    if st.toggle("ids and statistics", key=f"tok_more_{f.name}"):
        st.dataframe([{"position": p[0], "id": p[1], "piece": p[2], "bytes": f"{p[3]}–{p[4]}"}
                      for p in pieces[start:start + TOKEN_PAGE]], hide_index=True, key=f"tok_ids_{f.name}")
        st.dataframe([v["stats"]], hide_index=True, key=f"tok_stats_{f.name}")


def _image(f: FieldModel, address: str) -> None:
    v = f.view
    st.image(v["png"], caption=f"{v['format']} {v['width']}×{v['height']} {v['mode']}", width="content")


def _video(f: FieldModel, address: str) -> None:
    v = f.view
    fps = f"{v['fps']:.3g} fps" if v["fps"] else "fps unknown"
    st.caption(f"{v['container']} · {v['codec']} {v['width']}×{v['height']} · {fps} · {v['frame_count']} frames")
    st.video(f.raw, format=v["mime"], width=min(640, max(160, v["width"] * 2)))
    if v["strip"]:
        cols = st.columns(len(v["strip"]))
        for col, (index, png) in zip(cols, v["strip"]):
            col.image(png, caption=f"#{index}")
    if v["frame_count"] > 1:
        n = st.slider("Frame", 0, v["frame_count"] - 1, 0, key=f"frame_{f.name}")
        png, label = web_cache.frame_png(web_cache.url(), address, f.name, int(n))
        if png is None:
            mono(label)
        else:
            st.image(png, caption=label, width="content")


def _trajectory(f: FieldModel, address: str) -> None:
    v = f.view
    ret = v["episode_return"]
    st.caption(f"{v['length']} steps · return {ret:.6g}" if ret is not None else f"{v['length']} steps")
    st.line_chart({"reward": v["rewards"], "return": v["returns"]}, x_label="step")
    rows = [{k: (str(val) if isinstance(val, (dict, list)) else val) for k, val in r.items()} for r in v["rows"]]
    st.dataframe(rows, hide_index=True, key=f"traj_{f.name}")


def _json(f: FieldModel, address: str) -> None:
    mono(f.view["pretty"])


def _scalar(f: FieldModel, address: str) -> None:
    # st.text: plain preformatted text; st.code would run a syntax highlighter per value in the browser
    st.text(f.view["display"])


def _bytes(f: FieldModel, address: str) -> None:
    v = f.view
    mono(f"detected: {v['detected'] or 'unknown'}\npreview:  {v['preview']}")


def _error(f: FieldModel, address: str) -> None:
    st.error("This value could not be decoded as its role; the raw bytes are intact.", icon=":material/error:")
    mono(f.view["reason"])


_DRAW: dict[str, Any] = {"text": _text, "tokens": _tokens, "image": _image, "video": _video,
                         "trajectory": _trajectory, "json": _json, "scalar": _scalar, "bytes": _bytes,
                         "error": _error}

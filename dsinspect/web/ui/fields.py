"""How each kind of field view is laid out on the Sample page. Sample text never reaches Markdown
unescaped: it goes through st.text / dataframes, html.escape (ui/page.py: mono; token_html) before
unsafe_allow_html, or ui/page.py's md in captions and labels. A long value is shown a page at a time
(VALUE_PAGE characters): a 10 MB string must not go into one page whole."""

from __future__ import annotations

from typing import Any

import streamlit as st

from dsinspect.inspect.sizes import human_bytes
from dsinspect.web.models.sample import HEX_LINE, FieldModel, hex_text, token_html
from dsinspect.web.ui import cache
from dsinspect.web.ui.page import md, mono

__all__ = ["decoded", "raw", "step_table", "findings", "paged_text", "VALUE_PAGE", "CHART_POINTS"]

TOKEN_PAGE = 256
VALUE_PAGE = 50_000     # characters of one value per page
CHART_POINTS = 2_000    # points per trajectory chart line; a longer episode is drawn at every k-th step
_ICON = {"error": "✖", "warning": "⚠", "info": "ℹ"}


def findings(items: list[tuple[str, str]]) -> None:
    if items:
        mono("\n".join(f"{_ICON.get(sev, '•')} {sev}: {msg}" for sev, msg in items))


def decoded(f: FieldModel, address: str, steps: bool = True) -> None:
    """The decoded view of one field; `steps=False` leaves a trajectory's step table out (the page draws
    it across the whole width with `step_table`: its columns do not fit half of it)."""
    if f.null:
        st.caption("null")
        return
    draw = _DRAW.get(f.kind)
    if f.kind == "trajectory":
        _trajectory(f, steps)
    elif draw is None:
        st.caption(md(f"no web view for {f.kind!r}: see the raw bytes"))
    else:
        draw(f, address)
    findings(f.findings)


def raw(f: FieldModel, sample_name: str) -> None:
    """Hashes, a paged hex dump and a download of the field's raw bytes."""
    size = human_bytes(f.size) + (f" ({f.size:,} bytes)" if f.size >= 1024 else "")
    mono(f"xxh128 (canonical)  {f.hash}\nsha256 (raw)        {f.sha256}\nsize                {size}")
    pages = max(1, -(-len(f.raw) // 512))
    page = 1
    if pages > 1:
        page = st.number_input(f"Hex page (of {pages})", 1, pages, 1, key=f"hex_page_{f.name}")
    text, _, _ = hex_text(f.raw, int(page) - 1)
    mono(text, wrap=False, columns=HEX_LINE)  # 16 bytes a line, never wrapped; every field's at one size
    st.download_button(md(f"Download {f.name} ({human_bytes(len(f.raw))})"), f.raw,
                       file_name=f"{sample_name}-{f.name}.bin", mime="application/octet-stream",
                       key=f"download_{f.name}", icon=":material/download:")


def _text(f: FieldModel, address: str) -> None:
    v = f.view
    st.caption(f"{v['chars']:,} characters · {v['lines']:,} lines")
    paged_text(f, v["visible"])


def paged_text(f: FieldModel, text: str) -> None:
    """`text` (a view of field `f`) as a monospace block, VALUE_PAGE characters at a time."""
    if len(text) <= VALUE_PAGE:
        mono(text)
        return
    pages = -(-len(text) // VALUE_PAGE)
    page = st.number_input(f"Value page (of {pages:,})", 1, pages, 1, key=f"value_page_{f.name}")
    start = (int(page) - 1) * VALUE_PAGE
    shown = text[start:start + VALUE_PAGE]
    st.caption(f"showing characters {start + 1:,}–{start + len(shown):,} of {len(text):,} "
               f"(a {f.size:,}-byte value): page through it here, or download it whole in the Raw view")
    mono(shown)


def _tokens(f: FieldModel, address: str) -> None:
    v = f.view
    pieces = v["pieces"]
    shown = f"the first {len(pieces):,} shown · " if len(pieces) < v["count"] else ""
    st.caption(md(f"{v['count']:,} tokens · {shown}tokenizer {v['tokenizer'] or 'none'} · "
                  "hover a token for its id and bytes"))
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
    st.image(v["png"], caption=md(f"{v['format']} {v['width']}×{v['height']} {v['mode']}"), width="content")


def _video(f: FieldModel, address: str) -> None:
    v = f.view
    fps = f"{v['fps']:.3g} fps" if v["fps"] else "fps unknown"
    st.caption(md(f"{v['container']} · {v['codec']} {v['width']}×{v['height']} · {fps} · {v['frame_count']} frames"))
    st.video(f.raw, format=v["mime"], width=min(640, max(160, v["width"] * 2)))
    if v["strip"]:
        cols = st.columns(len(v["strip"]))
        for col, (index, png) in zip(cols, v["strip"]):
            col.image(png, caption=f"#{index}")
    if v["frame_count"] > 1:
        n = st.slider("Frame", 0, v["frame_count"] - 1, 0, key=f"frame_{f.name}")
        png, label = cache.frame_png(cache.url(), address, f.name, int(n))
        if png is None:
            mono(label)
        else:
            st.image(png, caption=md(label), width="content")


def _trajectory(f: FieldModel, steps: bool) -> None:
    v = f.view
    ret = v["episode_return"]
    st.caption(f"{v['length']:,} steps · return {ret:.6g}" if ret is not None else f"{v['length']:,} steps")
    every = max(1, -(-len(v["rewards"]) // CHART_POINTS))
    if every > 1:
        st.caption(f"charts: every {every:,}th step")
    st.line_chart({"step": list(range(0, len(v["rewards"]), every)), "reward": v["rewards"][::every],
                   "return": v["returns"][::every]}, x="step", x_label="step")
    if steps:
        step_table(f)


def step_table(f: FieldModel) -> None:
    """A trajectory's steps as a table, the first STEP_CAP of them (models/sample.py)."""
    v = f.view
    if f.null or f.kind != "trajectory":
        return
    if len(v["rows"]) < v["length"]:
        st.caption(f"the first {len(v['rows']):,} of {v['length']:,} steps are listed; "
                   "the whole episode is in the Raw view's download")
    rows = [{k: (str(val) if isinstance(val, (dict, list)) else val) for k, val in r.items()} for r in v["rows"]]
    st.dataframe(rows, hide_index=True, width="stretch", key=f"traj_{f.name}")


def _json(f: FieldModel, address: str) -> None:
    paged_text(f, f.view["pretty"])


def _scalar(f: FieldModel, address: str) -> None:
    # st.text: plain preformatted text; st.code would run a syntax highlighter per value in the browser
    display = f.view["display"]
    if len(display) <= VALUE_PAGE:
        st.text(display)
    else:
        paged_text(f, display)


def _bytes(f: FieldModel, address: str) -> None:
    v = f.view
    mono(f"detected: {v['detected'] or 'unknown'}\npreview:  {v['preview']}")


def _error(f: FieldModel, address: str) -> None:
    st.error("This value could not be decoded as its role; the raw bytes are intact.", icon=":material/error:")
    paged_text(f, f.view["reason"])


_DRAW: dict[str, Any] = {"text": _text, "tokens": _tokens, "image": _image, "video": _video,
                         "json": _json, "scalar": _scalar, "bytes": _bytes,
                         "error": _error}

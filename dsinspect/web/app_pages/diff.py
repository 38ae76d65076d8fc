"""Diff page: two version addresses -> summary, schema changes, shard changes, and the rows that
changed (side by side), were added or were removed. Sample text goes through ui/page.py's mono (escaped),
st.text and dataframes; names and captions through md."""

import streamlit as st

from dsinspect.web.models.diff import CHANGED_PAGE
from dsinspect.web.ui import cache
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, mono, or_stop
from dsinspect.web.ui.url import follow_url

url = cache.url()
params = st.query_params
a, b = params.get("a", ""), params.get("b", "")
st.title("Diff")
left, right = st.columns(2)
follow_url("diff_a", a)
follow_url("diff_b", b)
typed_a = left.text_input("Before (NAME@REF)", key="diff_a", placeholder="demo-images@v1").strip()
typed_b = right.text_input("After (NAME@REF)", key="diff_b", placeholder="demo-images@v2").strip()
if (typed_a, typed_b) != (a, b):
    for name, value in (("a", typed_a), ("b", typed_b)):
        if value:
            params[name] = value
        elif name in params:
            del params[name]
    st.rerun()
if not (a and b):
    st.info("Enter two versions to compare, e.g. demo-images@v1 and demo-images@v2; "
            "the page's URL then names the diff.")
    st.stop()
m = or_stop(lambda: cache.diff_model(url, a, b), "Those versions cannot be compared.")


st.subheader(md(f"{m['a']['name']} → {m['b']['name']}"))
counts = m["counts"]
c = st.columns(6)
c[0].metric("rows before", f"{m['a']['rows']:,}")
grown = m["b"]["rows"] - m["a"]["rows"]
c[1].metric("rows after", f"{m['b']['rows']:,}", delta=f"{grown:+,}" if grown else None)
c[2].metric("changed", f"{counts['changed']:,}")
c[3].metric("added", f"{counts['added']:,}")
c[4].metric("removed", f"{counts['removed']:,}")
c[5].metric("moved", f"{counts['moved']:,}")
matched = f"rows matched by key {m['key']}" if m["matched_by"] == "key" else "rows matched by row hash"
st.caption(md(f"{matched} · {m['rows_read']:,} rows read · {len(m['schema'])} schema change(s) · "
              f"{m['shards_shared']} shard(s) shared"))
if m["empty"]:
    st.success("No change: the two versions hold the same rows under the same schema.", icon=":material/check:")
if m["notes"]:
    mono("\n".join(f"ℹ {n}" for n in m["notes"]))
if m["field_counts"]:
    st.dataframe([{"field": k, "changed rows": v} for k, v in m["field_counts"].items()], hide_index=True,
                 key="diff_fields")

st.markdown("#### Schema changes")
if m["schema"]:
    st.dataframe(m["schema"], hide_index=True, width="stretch", key="diff_schema")
else:
    st.caption("none")
st.markdown("#### Shard changes")
if m["shards"]:
    st.dataframe(m["shards"], hide_index=True, width="stretch", key="diff_shards")
else:
    st.caption("none")

st.markdown(f"#### Changed rows ({counts['changed']:,})")
listed = len(m["changed"])
if listed < counts["changed"]:
    st.caption(f"the first {listed} are listed")
if listed:
    pages = max(1, -(-listed // CHANGED_PAGE))
    page = 1
    if pages > 1:
        page = st.number_input(f"Changed rows page (of {pages})", 1, pages, 1, key="diff_page")
    ident = m["ident"]
    for r in cache.diff_changed_rows(url, a, b, int(page) - 1):
        with st.container(border=True):
            st.text(f"{ident} {r[ident]} · index {r['index_a']} → {r['index_b']} · changed: {', '.join(r['fields'])}")
            links = st.columns([1, 1, 4])
            links[0].page_link(page_file("sample"), label="before", icon=":material/search:",
                               query_params={"address": r["address_a"]})
            links[1].page_link(page_file("sample"), label="after", icon=":material/search:",
                               query_params={"address": r["address_b"]})
            for f in r["field_values"]:
                st.markdown(md(f"{f['name']} · {f['role']}"))
                if f["kind"] == "image":
                    before, after, figure = st.columns(3)
                    before.image(f["before"], caption=md(f"before: {f['before_caption']}"), width="content")
                    after.image(f["after"], caption=md(f"after: {f['after_caption']}"), width="content")
                    detail = f["detail"]
                    if f["difference"] is not None:
                        figure.image(f["difference"], caption="pixel difference (white: largest)", width="content")
                    if "pixel_mean_abs_diff" in detail:
                        scale = f" of {detail['full_scale']:,}" if detail.get("full_scale") else ""
                        figure.text(f"mean |Δ| {detail['pixel_mean_abs_diff']}{scale} · "
                                    f"{detail['pixels_changed']:.1%} of pixels changed")
                    else:
                        figure.text("sizes differ: no pixel comparison")
                elif f["kind"] == "tokens":  # the changed stretch marked, decoded by the field's tokenizer
                    st.text(f["first_token"])
                    before, after = st.columns(2)
                    before.caption("before")
                    before.markdown(f["before_html"], unsafe_allow_html=True)  # every piece escaped (models/diff.py)
                    after.caption("after")
                    after.markdown(f["after_html"], unsafe_allow_html=True)
                elif f["kind"] == "table":
                    before, after = st.columns(2)
                    for where, side, label in ((before, f["before"], "before"), (after, f["after"], "after")):
                        shown = f" (the first {len(side['rows']):,})" if len(side["rows"]) < side["steps"] else ""
                        where.caption(f"{label}: {side['steps']:,} steps{shown}")
                        where.dataframe(side["rows"], hide_index=True, width="stretch")
                else:  # text: the changed characters marked on each side
                    before, after = st.columns(2)
                    before.caption("before")
                    mono(f["before"], before, marked=f.get("before_marked"))
                    after.caption("after")
                    mono(f["after"], after, marked=f.get("after_marked"))
                if f["detail_text"]:
                    st.text(f["detail_text"])

for kind, rows in (("added", m["added"]), ("removed", m["removed"])):
    st.markdown(f"#### {kind.capitalize()} rows ({counts[kind]:,})")
    if not rows:
        st.caption("none")
        continue
    if len(rows) < counts[kind]:
        st.caption(f"the first {len(rows)} are listed")
    st.dataframe(rows, hide_index=True, width="stretch", key=f"diff_{kind}")
if m["moved"]:
    st.markdown(f"#### Moved rows ({counts['moved']:,})")
    st.dataframe(m["moved"], hide_index=True, width="stretch", key="diff_moved")

"""Statistics page: `dsinspect stats` of a version (`stats?address=NAME@REF`), or two versions side by
side on the same bins with what moved marked (`stats?a=NAME@REF&b=NAME@REF`): per column its counts,
nulls, distinct values, min/mean/max and a bar chart (Vega-Lite: the value counts when few, else the
histogram of its numbers: token counts, text lengths, image sizes, episode returns). Stored text
(values, field names) reaches the page only through ui/page.py's md, dataframes and the charts' data."""

import streamlit as st

from dsinspect.web.ui import cache
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, or_stop
from dsinspect.web.ui.url import follow_url

url = cache.url()
params = st.query_params
a = params.get("a") or params.get("address", "")
b = params.get("b", "") if params.get("a") else ""
st.title("Statistics")
left, right = st.columns(2)
follow_url("stats_a", a)
follow_url("stats_b", b)
typed_a = left.text_input("Version (NAME[@REF])", key="stats_a", placeholder="demo-text@v1").strip()
typed_b = right.text_input("Compare with (NAME[@REF], optional)", key="stats_b", placeholder="demo-text@v2").strip()
if (typed_a, typed_b) != (a, b):
    for name in ("a", "b", "address"):
        if name in params:
            del params[name]
    if typed_a and typed_b:
        params["a"], params["b"] = typed_a, typed_b
    elif typed_a:
        params["address"] = typed_a
    st.rerun()
if not a:
    st.info("Enter a version, e.g. demo-text@v1, and optionally a second one to compare it with; "
            "the page's URL then names the statistics.")
    st.stop()


def full(address: str) -> str:
    info = or_stop(lambda: cache.dataset_model(url, address), "That address cannot be opened.")
    return f"{info['name']}@{info['id']}"


full_a = full(a)
full_b = full(b) if b else ""
m = or_stop(lambda: cache.stats_model(url, full_a, full_b), "The statistics cannot be computed.")
two = m["b"] is not None
if two:
    st.subheader(md(f"A {m['a']['name']} → B {m['b']['name']}"))
    grown = m["b"]["rows"] - m["a"]["rows"]
    c = st.columns(3)
    c[0].metric("rows A", f"{m['a']['rows']:,}")
    c[1].metric("rows B", f"{m['b']['rows']:,}", delta=f"{grown:+,}" if grown else None)
    n_moved = sum(bool(col["moved"]) for col in m["columns"])
    c[2].metric("columns that moved", f"{n_moved} of {len(m['columns'])}")
    st.caption("both versions' histograms on the same bins; a column whose statistics differ is marked ⟳ moved")
    st.page_link(page_file("diff"), label="Diff these versions row by row", icon=":material/compare_arrows:",
                 query_params={"a": m["a"]["name"], "b": m["b"]["name"]})
else:
    st.subheader(md(m["a"]["name"]))
    st.metric("rows", f"{m['a']['rows']:,}")
    st.page_link(page_file("dataset"), label="Open the dataset page", icon=":material/table:",
                 query_params={"address": m["a"]["name"]})

for i, col in enumerate(m["columns"]):
    with st.container(border=True):
        if not two:
            mark = ""
        elif col["moved"]:
            mark = " · ⟳ moved"
        else:  # a field kept in the shards: equal counts say nothing of its values
            mark = " · unchanged" if col["compared"] else " · not compared"
        st.markdown("#### " + md(col["name"]) + mark)
        st.caption(md(f"{col['type']} · {col['source']}" + ("" if col["compared"] or not two else
                                                            " (its values are not compared here: see its derived "
                                                            "columns, or the row by row diff)")))
        if col["moved"]:
            st.text("moved: " + "; ".join(col["moved"]))
        table_col, chart_col = st.columns([2, 3])
        table_col.dataframe(col["table"], hide_index=True, width="stretch", key=f"stats_table_{i}")
        chart = col["chart"]
        if chart is None:
            chart_col.caption("no chart: a value kept in the shards is described by its derived columns"
                              if not col["compared"] else "no chart: too many distinct values")
            continue
        series = ["A", "B"] if two else ["A"]
        data = {"x": chart["x"], **{s: chart[s] for s in series if s in chart}}
        what = "value counts" if chart["kind"] == "values" else "histogram"
        chart_col.caption(f"{what}" + (" (A and B side by side, the same bins)" if two else ""))
        chart_col.bar_chart(data, x="x", y=[s for s in series if s in chart], x_label=col["name"],
                            y_label="rows", stack=False if two else None, sort=False, height=300)

"""Dataset page: one version's schema, shards and versions, and its rows a page at a time."""

import streamlit as st

from dsinspect.web import web_cache
from dsinspect.web.web_nav import page_file
from dsinspect.web.web_page import address_box, md, or_stop

url = web_cache.url()
datasets = list(dict.fromkeys(r["dataset"] for r in web_cache.catalog_rows(url)))
st.title("Dataset")
address = address_box("Address (NAME[@REF])", "ds_address", "demo-text@v1", datasets[0] if datasets else "")
if not address:
    st.info("This catalog holds no datasets yet.")
    st.stop()
info = or_stop(lambda: web_cache.dataset_model(url, address), "That address cannot be opened.")

st.subheader(md(info["address"]))
c = st.columns(4)
c[0].metric("rows", f"{info['rows']:,}")
c[1].metric("bytes", f"{info['bytes']:,}")
c[2].metric("shards", len(info["shards"]))
c[3].metric("tags", md(", ".join(info["tags"])) or "—")
st.caption(md(f"version {info['id']}" + (f" · key field {info['key']}" if info["key"] else "")))
st.text(info["message"])

st.markdown("#### Schema")
st.dataframe(info["schema"], hide_index=True, width="stretch", key="ds_schema")
st.markdown("#### Versions")
st.dataframe([{k: v[k] for k in ("short_id", "tags", "rows", "bytes", "shards", "created_at", "message")}
              for v in info["versions"]], hide_index=True, width="stretch", key="ds_versions")
st.markdown("#### Shards")
st.dataframe([{k: s[k] for k in ("index", "sha256", "rows", "bytes", "first_row")} for s in info["shards"]],
             hide_index=True, width="stretch", key="ds_shards")

st.markdown("#### Samples")
pages = max(1, -(-info["rows"] // 20))
page = st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, value=1, key="ds_page")
table = web_cache.sample_table(url, address, int(page) - 1)
st.dataframe(table["rows"], column_order=table["columns"], hide_index=True, width="stretch", key="ds_rows")
if info["rows"]:
    left, right = st.columns([1, 3])
    index = left.number_input("Sample index", min_value=0, max_value=info["rows"] - 1,
                              value=table["rows"][0]["index"] if table["rows"] else 0, key="ds_index")
    right.page_link(page_file("sample"), label=f"Open sample {int(index)}", icon=":material/search:",
                    query_params={"address": f"{info['name']}@{info['short_id']}:{int(index)}"})

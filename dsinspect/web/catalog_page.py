"""Catalog page: every dataset and version of the configured catalog."""

import streamlit as st

from dsinspect.web import web_cache
from dsinspect.web.web_nav import page_file

st.title("Catalog")
st.caption(f"Catalog: `{web_cache.url()}`")
rows = web_cache.catalog_rows(web_cache.url())
if not rows:
    st.info("This catalog holds no datasets yet.")
    st.stop()
st.dataframe(rows, hide_index=True, width="stretch", key="catalog_table")
st.subheader("Open")
for name in dict.fromkeys(r["dataset"] for r in rows):
    versions = [r for r in rows if r["dataset"] == name]
    cols = st.columns(len(versions) + 1)
    cols[0].page_link(page_file("dataset"), label=name, icon=":material/table:", query_params={"address": name})
    for col, v in zip(cols[1:], versions):
        label = f"{v['version']}" + (f" ({v['tags']})" if v["tags"] else "")
        col.page_link(page_file("dataset"), label=label, query_params={"address": f"{name}@{v['version']}"})

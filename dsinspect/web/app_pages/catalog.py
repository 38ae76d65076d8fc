"""Catalog page: every dataset and version of the configured catalog; stored files that cannot be
read (a truncated manifest, a damaged tags.json) are listed apart, with their file and reason."""

from typing import Any

import streamlit as st

from dsinspect.web.models import catalog as catalogs
from dsinspect.web.ui import cache
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, or_stop

BROKEN_SHOWN = 20  # one alert each; a catalog with more needs the CLI anyway


@st.cache_data(show_spinner=False, ttl=30)
def _broken(catalog_url: str) -> list[dict[str, Any]]:
    return catalogs.catalog_broken(cache.catalog(catalog_url))


st.title("Catalog")
url = cache.url()
st.caption(md(f"Catalog: {url}"))
rows = or_stop(lambda: cache.catalog_rows(url), "Cannot list this catalog")
broken = _broken(url)
if broken:
    lines = [f"{b['dataset']} {b['version']}" + (f" ({b['tags']})" if b["tags"] else "")
             + f": {b['file']}: {b['reason']}" for b in broken[:BROKEN_SHOWN]]
    more = f"; {len(broken) - BROKEN_SHOWN} more: dsinspect ls lists them all" if len(broken) > BROKEN_SHOWN else ""
    st.error(md(f"{len(broken)} stored file(s) cannot be read (a failed check){more}; the rest is listed below."))
    for line in lines:
        st.error(md(f"BROKEN {line}"))
if not rows:
    if not broken:
        st.info("This catalog holds no datasets yet.")
    st.stop()
st.dataframe(rows, hide_index=True, width="stretch", key="catalog_table")
st.subheader("Open")
for name in dict.fromkeys(r["dataset"] for r in rows):
    versions = [r for r in rows if r["dataset"] == name]
    cols = st.columns(len(versions) + 1)
    cols[0].page_link(page_file("dataset"), label=md(name), icon=":material/table:", query_params={"address": name})
    for col, v in zip(cols[1:], versions):
        label = f"{v['version']}" + (f" ({v['tags']})" if v["tags"] else "")
        col.page_link(page_file("dataset"), label=md(label), query_params={"address": f"{name}@{v['version']}"})

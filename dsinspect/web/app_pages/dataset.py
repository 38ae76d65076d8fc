"""Dataset page: one version's rows a page at a time, all of them or those a filter (`?where=`, an SQL
condition as `dsinspect query --where` takes) selects, a row clicked linking to its sample; below them
its schema, versions and shards. The rows come first: they are what the page is opened for."""

from typing import Any

import streamlit as st

from dsinspect.errors import DsinspectError
from dsinspect.inspect.sizes import human_bytes
from dsinspect.web.models.catalog import TABLE_PAGE, THUMB_SIDE
from dsinspect.web.models.query import check_condition
from dsinspect.web.ui import cache
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, mono, or_stop
from dsinspect.web.ui.url import address_box, follow_url, last_dataset, remember_dataset

url = cache.url()
params = st.query_params
datasets = list(dict.fromkeys(r["dataset"] for r in cache.catalog_rows(url)))
st.title("Dataset")
address = address_box("Address (NAME[@REF])", "ds_address", "demo-text@v1",
                      last_dataset(datasets[0] if datasets else ""))
if not address:
    st.info("This catalog holds no datasets yet.")
    st.stop()
info = or_stop(lambda: cache.dataset_model(url, address), "That address cannot be opened.")
remember_dataset(f"{info['name']}@{info['short_id']}")

c = st.columns([2, 2, 1, 2, 3])
c[0].metric("rows", f"{info['rows']:,}")
c[1].metric("bytes", human_bytes(info["bytes"]), help=f"{info['bytes']:,} bytes")
c[2].metric("shards", len(info["shards"]))
c[3].metric("tags", md(", ".join(info["tags"])) or "—")
c[4].page_link(page_file("stats"), label="Statistics", icon=":material/bar_chart:",
               query_params={"address": f"{info['name']}@{info['short_id']}"})
if info["parent"]:
    c[4].page_link(page_file("stats"), label=f"Statistics beside its parent {info['parent'][:12]}",
                   icon=":material/compare_arrows:",
                   query_params={"a": f"{info['name']}@{info['parent'][:12]}",
                                 "b": f"{info['name']}@{info['short_id']}"})
st.caption(md(f"{info['address']} · version {info['id']}" + (f" · key field {info['key']}" if info["key"] else "")))
st.text(info["message"])

THUMB_ROW = THUMB_SIDE // 2 + 8  # pixels: a row tall enough for a thumbnail to be seen


def rows_table(table: dict[str, Any]) -> None:
    """A page of rows; a row clicked gets a link to its sample just below the table. A link, not
    st.switch_page: a switch with new parameters puts two entries in the browser's history (the
    parameters, then the page), so Back would not return here."""
    pictures = {n: st.column_config.ImageColumn(n, width="small") for n in table.get("media", [])}
    event = st.dataframe(table["rows"], column_order=table["columns"], hide_index=True, width="stretch",
                         key="ds_rows", on_select="rerun", selection_mode="single-row", column_config=pictures,
                         row_height=THUMB_ROW if pictures else None)
    picked = event.selection.rows if event is not None else []
    if picked and picked[0] < len(table["rows"]):
        row = table["rows"][picked[0]]
        st.page_link(page_file("sample"), label=md(f"Open sample {row['index']} ({row['address']})"),
                     icon=":material/search:", query_params={"address": row["address"]})


def page_box(pages: int, where: Any) -> int:
    """The page number (1-based) the box holds, clamped to `pages`; drawn in `where` (beside the filter)."""
    if st.session_state.get("ds_page", 1) > pages:
        st.session_state["ds_page"] = pages
    return int(where.number_input(f"Page (of {pages:,})", min_value=1, max_value=pages, value=1, key="ds_page"))


def samples(info: dict[str, Any]) -> None:
    """The version's rows, a page at a time: all of them, or those the filter selects."""
    st.markdown("#### Samples")
    where = params.get("where", "")
    follow_url("ds_where", where)
    box, pager = st.columns([4, 1], vertical_alignment="bottom")
    typed = box.text_input("Filter: an SQL condition, as `dsinspect query --where` takes it", key="ds_where",
                          help="Over the view v: _index, the stored fields, derived values such as tokens_len, "
                               "text_chars, image_width, image_orientation, video_frames, trajectory_return",
                          placeholder="e.g. tokens_len > 100 AND lang = 'en'").strip()
    if typed != where:
        if typed:
            params["where"] = typed
        elif "where" in params:
            del params["where"]
        st.session_state.pop("ds_page", None)
        st.rerun()
    if where:
        filtered(info, where, pager)
    else:
        pages = max(1, -(-info["rows"] // TABLE_PAGE))
        page = page_box(pages, pager)
        st.caption("click a row for a link to its sample")
        rows_table(cache.sample_table(url, address, page - 1))


def filtered(info: dict[str, Any], where: str, pager: Any) -> None:
    """The rows matching `where`, a page at a time, or the one line saying why it cannot run."""
    version_address = f"{info['name']}@{info['id']}"
    try:
        check_condition(where)  # before any query: a link's condition is bounded
        requested = int(st.session_state.get("ds_page", 1)) - 1
        found = cache.query_page(url, version_address, where, requested, TABLE_PAGE)
    except DsinspectError as e:
        st.error("That condition cannot be run.")
        mono(str(e))
        return
    page = page_box(found["pages"], pager)
    st.caption(f"{found['total']:,} of {info['rows']:,} rows match · click a row for a link to its sample")
    if page - 1 != found["page"]:
        found = cache.query_page(url, version_address, where, page - 1, TABLE_PAGE)
    if found["rows"]:
        rows_table(found)
    else:
        st.info("No row matches this condition.")


samples(info)
if info["rows"]:
    left, right = st.columns([1, 3])
    index = left.number_input("Sample index", min_value=0, max_value=info["rows"] - 1, value=0, key="ds_index")
    right.page_link(page_file("sample"), label=f"Open sample {int(index)}", icon=":material/search:",
                    query_params={"address": f"{info['name']}@{info['short_id']}:{int(index)}"})
st.markdown("#### Schema")
st.dataframe(info["schema"], hide_index=True, width="stretch", key="ds_schema")
st.markdown("#### Versions")
st.dataframe([{**{k: v[k] for k in ("short_id", "tags", "rows", "bytes", "shards", "created_at", "message")},
               "bytes": human_bytes(v["bytes"])} for v in info["versions"]],
             hide_index=True, width="stretch", key="ds_versions")
st.markdown("#### Shards")
st.dataframe([{**{k: s[k] for k in ("index", "sha256", "rows", "bytes", "first_row")}, "bytes": human_bytes(s["bytes"])}
              for s in info["shards"]], hide_index=True, width="stretch", key="ds_shards")

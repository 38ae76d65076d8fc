"""Sample page: one sample's fields decoded, beside their raw bytes and hashes (the default view; `?view=Decoded`
or `?view=Raw` for one of them). A rollout (a row of LLM RL rollouts) shows as one above its fields, its tokens
coloured by `?color=`; `?address=NAME@REF&rollout=ID` opens a rollout by its id."""

import streamlit as st

from dsinspect.inspect.sizes import human_bytes
from dsinspect.web.ui import cache, fields, rollout
from dsinspect.web.ui.page import md, or_stop
from dsinspect.web.ui.url import address_box, remember_dataset, set_params

url = cache.url()
st.title("Sample")
address = address_box("Address (NAME[@REF]:INDEX)", "sample_address", "demo-text@v1:17", drop=("rollout",))
if address and "rollout" in st.query_params:
    address = rollout.address_of(url, address, st.query_params["rollout"])
if not address:
    st.info("Enter a sample address, e.g. demo-text@v1:17.")
    st.stop()
sample = or_stop(lambda: cache.sample_model(url, address), "That address cannot be opened.")

st.subheader(md(sample.address))
prev_col, next_col, info_col = st.columns([1, 1, 6])
name = f"{sample.dataset}@{sample.version_id[:12]}"
remember_dataset(name)
prev_col.button("previous", icon=":material/arrow_back:", key="sample_prev", disabled=sample.index == 0,
                on_click=set_params, args=({"address": f"{name}:{sample.index - 1}", "rollout": None},))
next_col.button("next", icon=":material/arrow_forward:", key="sample_next",
                disabled=sample.index + 1 >= sample.num_rows,
                on_click=set_params, args=({"address": f"{name}:{sample.index + 1}", "rollout": None},))
info_col.caption(md(f"sample {sample.index} of {sample.num_rows:,} · version {sample.version_id}"))
if sample.row_hash_ok:
    st.success(md(f"row hash {sample.row_hash_recomputed} matches the stored one"), icon=":material/verified:")
else:
    st.error(md(f"row hash recomputed {sample.row_hash_recomputed}, stored {sample.row_hash_stored}"),
             icon=":material/error:")
fields.findings(sample.findings)
rollout.rollout_panel(url, sample.dataset, sample.version_id, sample.index)

# the default shows what the product promises: decoded beside the raw bytes and the field hashes
mode = st.segmented_control("View", ["Side by side", "Decoded", "Raw"], default="Side by side", required=True,
                            key="view", bind="query-params")
file_stem = f"{sample.dataset}-{sample.index}"
for f in sample.fields:
    st.markdown("#### " + md(f.name))
    st.caption(md(f"{f.role} · {f.type} · {human_bytes(f.size)}" + (" · null" if f.null else "")))
    if mode == "Side by side":  # the raw side wider: a hex line is 79 characters, at a readable size
        left, right = st.columns([2, 3])
        with left:
            fields.decoded(f, address, steps=False)
        with right:
            fields.raw(f, file_stem)
        fields.step_table(f)
    elif mode == "Raw":
        fields.raw(f, file_stem)
    else:
        fields.decoded(f, address)

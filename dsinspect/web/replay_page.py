"""Replay page: a run spec (uploaded, or built from fields), a step and a rank or all -> the batch."""

import streamlit as st

from dsinspect.errors import DsinspectError
from dsinspect.web import web_cache
from dsinspect.web.web_nav import page_file
from dsinspect.web.web_replay import build_spec, decode_spec, encode_spec

url = web_cache.url()
st.title("Replay")
params = st.query_params
with st.expander("Run spec", expanded=not params.get("spec")):
    upload = st.file_uploader("Upload a run spec (RUN.json)", type=["json"], key="rp_upload")
    with st.form("rp_fields"):
        st.caption("…or build one")
        c = st.columns(5)
        address = c[0].text_input("Dataset (NAME[@REF])", value="demo-text@v1", key="rp_address")
        seed = c[1].number_input("Seed", min_value=0, value=0, key="rp_seed")
        batch = c[2].number_input("Batch size", min_value=1, value=8, key="rp_batch")
        world = c[3].number_input("World size", min_value=1, value=1, key="rp_world")
        shuffle = c[4].selectbox("Shuffle", ["global", "window", "none"], key="rp_shuffle")
        built = st.form_submit_button("Use these fields")
try:
    if upload is not None and st.session_state.get("rp_uploaded") != upload.file_id:
        st.session_state["rp_uploaded"] = upload.file_id
        params["spec"] = encode_spec(decode_spec(upload.getvalue().decode("utf-8", "replace")))
    if built:
        params["spec"] = encode_spec(build_spec(web_cache.catalog(url), address, int(seed), int(batch),
                                                int(world), shuffle))
except (DsinspectError, ValueError) as e:
    st.error("That run spec cannot be used.")
    st.code(str(e), language=None)
    st.stop()

spec_text = params.get("spec", "")
if not spec_text:
    st.info("Upload a run spec or build one from fields; the page's URL then names the batch.")
    st.stop()
left, right = st.columns(2)
given = params.get("step", "0")
step = left.number_input("Step", min_value=0, value=int(given) if given.isdigit() else 0, key="rp_step")
rank = right.text_input("Rank (a number, or all)", value=params.get("rank", "0"), key="rp_rank").strip() or "0"
if str(int(step)) != params.get("step") or rank != params.get("rank"):
    params["step"], params["rank"] = str(int(step)), rank
try:
    batch_model = web_cache.replay_model(url, spec_text, int(step), rank)
except DsinspectError as e:
    st.error("That batch cannot be replayed.")
    st.code(str(e), language=None)
    st.stop()

m = batch_model
st.subheader(f"step {m['step']} · epoch {m['epoch']} · rank{'s' if len(m['ranks']) > 1 else ''} "
             f"{', '.join(map(str, m['ranks']))}")
st.caption(f"{', '.join(m['sources'])} · batch {m['batch_size']} × world {m['world_size']} · spec {m['spec_hash'][:16]}")
st.code("\n".join(f"rank {r}: fingerprint {fp}" for r, fp in m["fingerprints"].items()), language=None)
if m["unverified"]:
    st.error(f"{m['unverified']} sample(s) no longer match their stored row hash", icon=":material/error:")
st.dataframe(m["rows"], hide_index=True, width="stretch", key="rp_rows")
st.download_button("Download the batch as Parquet", m["parquet"], file_name=f"batch-step{m['step']}-rank{rank}.parquet",
                   mime="application/vnd.apache.parquet", key="rp_download", icon=":material/download:")
if m["rows"]:
    pick = st.selectbox("Sample", [r["address"] for r in m["rows"]], key="rp_pick")
    st.page_link(page_file("sample"), label=f"Open {pick}", icon=":material/search:", query_params={"address": pick})

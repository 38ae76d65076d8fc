"""Replay page: a run spec (a run record by name, an upload, or fields), a step and a rank or all ->
the batch; with the job's transform each sample as stored and as fed to the model, side by side;
with a fingerprint log each step marked as matching or diverging, and the first divergence found.
A packed-sequence run's batch is shown as its sequences (models/packed_replay.py): each one's documents,
linked to their samples, and its decoded text with each document's span, the padding and the digest.

Deep links: `?spec=` (base64url spec JSON) or `?run=NAME` (a run record listed in the configured runs
directory), `&step=&rank=`, `&log=NAME` (that run record's fingerprint log); a stream learner's record
(`?run=NAME`) has a page of its own (ui/learner.py): the rollouts a step consumed, `&slot=S` one of them.
A transform is code to import, so it never comes from the URL: a link could otherwise make whoever opens it
run any importable function. It is typed into the page by the person looking (or preset by whoever started
`dsinspect web --transform`), as they would type it on the command line.
"""

import re

import streamlit as st

from dsinspect.errors import DsinspectError
from dsinspect.web import settings
from dsinspect.web.models.packed_replay import packed_html
from dsinspect.web.models.replay import batch_parquet, build_spec, decode_spec, encode_spec, marked_rows, verdict
from dsinspect.web.ui import cache
from dsinspect.web.ui.learner import learner_step_page
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, mono, or_stop, stop_with
from dsinspect.web.ui.url import follow_url

url = cache.url()
st.title("Replay")
params = st.query_params
runs = cache.run_names(url)
if params.get("run") in runs and or_stop(lambda: cache.is_learner(url, params["run"]), "That run cannot be opened."):
    learner_step_page(url, params["run"])
    st.stop()


def md_table(cells: dict[str, str]) -> dict[str, list[str]]:
    """A sample's fields as a two-column st.table, whose cells render Markdown: every one made inert."""
    return {"field": [md(k) for k in cells], "value": [md(v) for v in cells.values()]}


def set_spec(spec: str = "", run: str = "") -> None:
    """Name the run by exactly one of ?spec= and ?run=."""
    for name, value in (("spec", spec), ("run", run)):
        if value:
            params[name] = value
        elif name in params:
            del params[name]


def packed_header(m: dict, transform: str) -> None:
    """What a packed run's batch is made of, and the documents that no longer verify."""
    seq = m["sequences"]
    labels = " (+1 for labels)" if seq["labels"] else ""
    st.caption(md(f"packed sequences of {seq['length']:,} tokens{labels} · {seq['packing']} · field {seq['field']} · "
                  f"text by {m['tokenizer'] or 'token ids (no stored tokenizer)'} · each document's span on its own "
                  "background; padding hatched, tokens masked from the loss faded"))
    if transform:
        st.caption("A transform applies to a row run's samples: a packed batch is shown as read.")
    if m["damaged"]:
        st.error(f"{len(m['damaged'])} document(s) no longer match their stored row hash", icon=":material/error:")
        mono("\n".join(f"rank {d['rank']} sequence {d['slot']}: {d['document']}" for d in m["damaged"]))


def packed_batches(m: dict) -> None:
    """Each rank's sequences: documents linked to their samples, the decoded text, the digests."""
    for batch in m["batches"]:
        if len(m["batches"]) > 1:
            st.markdown(md(f"rank {batch['rank']} · fingerprint {batch['fingerprint']}"))
        # every text in it escaped and every link built by urlencode (models/packed_replay.py)
        st.markdown(packed_html(batch, m["sequences"]["pad"]), unsafe_allow_html=True)


named = bool(params.get("spec") or params.get("run"))
# rendered only on demand once a link names the run: a file uploader and a form cost the browser time
upload = built = None
if not named or st.toggle("Change the run spec", key="rp_change"):
    if runs:
        given = params.get("run", "")
        st.selectbox("A run record", ["", *runs], index=([""] + runs).index(given) if given in runs else 0,
                     key="rp_run", format_func=lambda n: n or "—",
                     on_change=lambda: set_spec(run=st.session_state["rp_run"]))
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
        set_spec(spec=encode_spec(decode_spec(upload.getvalue().decode("utf-8", "replace"))))
    if built:
        with st.spinner("Resolving the dataset…"):  # reads its manifest: remote catalogs can be slow
            set_spec(spec=encode_spec(build_spec(cache.catalog(url), address, int(seed), int(batch), int(world),
                                                 shuffle)))
except (DsinspectError, ValueError) as e:
    stop_with("That run spec cannot be used.", e)

with st.expander("Transform and fingerprint log", expanded=bool(params.get("log") or settings.preset_transform())):
    left, right = st.columns(2)
    # A transform is code: it comes from the operator (`dsinspect web --transform`), or is typed here
    # when the operator allowed it (`--allow-typed-transforms`): anyone who reaches the port could type one.
    typed = settings.typed_transforms_allowed()
    transform = left.text_input("The job's transform (package.module:function)", key="rp_transform",
                                value=settings.preset_transform(), placeholder="myjob.data:augment",
                                disabled=not typed).strip()
    left.caption("A link never names a transform, so opening one cannot run code. "
                 + ("Code runs only when typed here or preset by `dsinspect web --transform`." if typed else
                    "Set by `dsinspect web --transform M:F`; typing one here needs `--allow-typed-transforms`."))
    log_options = ["none", "upload a file", *runs]
    wanted = params.get("log", "")
    log_pick = right.selectbox("Fingerprint log", log_options, key="rp_log",
                               index=log_options.index(wanted) if wanted in runs else 0,
                               format_func=lambda o: o if o in ("none", "upload a file") else f"run record {o}")
    log_upload = None
    if log_pick == "upload a file":
        log_upload = right.file_uploader("Fingerprint log (JSONL)", key="rp_log_upload")
    log_run = log_pick if log_pick in runs else ""
    if log_run != wanted:
        if log_run:
            params["log"] = log_run
        elif "log" in params:
            del params["log"]
if params.get("transform"):
    st.warning("This link names a transform; links never run code. To see the batch as fed to the model, "
               "type the transform in “Transform and fingerprint log”.", icon=":material/shield:")
    mono(params.get("transform"))

spec_text, run = params.get("spec", ""), params.get("run", "")
if not (spec_text or run):
    st.info("Pick a run record, upload a run spec or build one from fields; the page's URL then names the batch.")
    st.stop()
left, right = st.columns(2)
given = params.get("step", "0")
# ASCII digits only (str.isdigit takes '²', which int() refuses), and no more than a number box holds
follow_url("rp_step", int(given) if re.fullmatch(r"[0-9]{1,15}", given) else 0)
follow_url("rp_rank", params.get("rank", "0"))
step = left.number_input("Step", min_value=0, key="rp_step")
rank = right.text_input("Rank (a number, or all)", key="rp_rank").strip() or "0"
if str(int(step)) != params.get("step") or rank != params.get("rank"):
    params["step"], params["rank"] = str(int(step)), rank
m = or_stop(lambda: cache.replay_model(url, spec_text, int(step), rank, transform, run),
            "That batch cannot be replayed.")

st.subheader(md(f"step {m['step']} · epoch {m['epoch']} · rank{'s' if len(m['ranks']) > 1 else ''} "
             f"{', '.join(map(str, m['ranks']))}"))
st.caption(md(f"{', '.join(m['sources'])} · batch {m['batch_size']} × world {m['world_size']} · "
              f"spec {m['spec_hash'][:16]}" + (f" · run record {run}" if run else "")))
if run:
    st.page_link(page_file("runs"), label=md(f"Run record {run}: steps × ranks, segments, gaps"),
                 icon=":material/timeline:", query_params={"run": run})
fingerprints = [f"rank {r}: fingerprint {fp}" for r, fp in m["fingerprints"].items()]
if m["transform"]:
    fingerprints += [f"rank {r}: transformed fingerprint {fp}" for r, fp in m["transformed_fingerprints"].items()]
    if m["transform_error"]:
        fingerprints.append(f"no transformed fingerprint: {m['transform_error']}")
mono("\n".join(fingerprints))
if m.get("packed"):
    packed_header(m, transform)
elif m["unverified"]:
    st.error(f"{m['unverified']} sample(s) no longer match their stored row hash", icon=":material/error:")

check = None
log_bytes = log_upload.getvalue() if log_upload is not None else None
if log_run or log_bytes:
    log_args = (url, spec_text, run, log_run, log_bytes, log_upload.name if log_upload else "")
    try:
        check = cache.log_check(*log_args, str(m["step"]), rank, transform)
        kind, line = verdict(check, f"step {m['step']}")
        getattr(st, kind)(md(line))
        if check["divergence"]:
            mono(check["divergence"]["reason"])
        if st.button("Find the first divergence in the whole log", key="rp_whole_log"):
            whole = cache.log_check(*log_args, None, rank, transform)
            kind, line = verdict(whole, "the whole log")
            getattr(st, kind)(md(line))
            d = whole["divergence"]
            if d:
                mono(f"logged    {d['logged']}\nreplayed  {d['replayed']}\n{d['reason']}")
                st.page_link(page_file("replay"), label=md(f"Open step {d['step']}, rank {d['rank']}"),
                             icon=":material/replay:",
                             query_params={k: v for k, v in (("spec", spec_text), ("run", run), ("log", log_run),
                                                             ("step", str(d["step"])), ("rank", str(d["rank"]))) if v})
    except DsinspectError as e:
        st.error("The fingerprint log cannot be checked.")
        mono(str(e))

if m.get("packed"):
    packed_batches(m)
    st.stop()
st.dataframe(marked_rows(m["rows"], check), hide_index=True, width="stretch", key="rp_rows")
replayed_from = cache.catalog(url)  # the Parquet is made when the button is pressed: no page holds a batch
st.download_button("Download the batch as Parquet",
                   lambda cat=replayed_from, spec=m["spec"], at=m["step"], who=rank: batch_parquet(cat, spec, at, who),
                   file_name=f"batch-step{m['step']}-rank{rank}.parquet", mime="application/vnd.apache.parquet",
                   key="rp_download", icon=":material/download:")
if m["rows"]:
    addresses = [f"rank {r['rank']} · pos {r['position']} · {r['address']}" for r in m["rows"]]
    pick = st.selectbox("Sample", range(len(addresses)), format_func=addresses.__getitem__, key="rp_pick")
    row = m["rows"][pick]
    st.page_link(page_file("sample"), label=md(f"Open {row['address']}"), icon=":material/search:",
                 query_params={"address": row["address"]})
    stored, fed = m["stored"][pick], (m["fed"][pick] if m["fed"] is not None else None)
    columns = st.columns(2) if fed is not None else [st.container()]
    columns[0].markdown("**as stored**")
    columns[0].table(md_table(stored))
    if fed is not None:
        columns[1].markdown("**as fed to the model** · " + md(m["transform"]))
        if isinstance(fed, str):
            mono(fed, columns[1])
        else:
            columns[1].table(md_table(fed))

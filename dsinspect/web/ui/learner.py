"""The Replay page of a stream learner's record (`replay?run=NAME&step=N&rank=R|all[&slot=S][&color=C]`): the step's
header (world, batch, stream, order, policy version, staleness bound, rollouts dropped as stale, each rank's
fingerprint recorded beside the one its rows give), a table of the rollouts each rank consumed whose slots link to
that rollout, and with `&slot=` the rollout itself (ui/rollout.py's panel, over the stream up to the step's last
commit). What a link names is checked in models/learner.py before anything is read; a bad one is one message."""

from __future__ import annotations

from typing import Any

import streamlit as st

from dsinspect.errors import DsinspectError
from dsinspect.web.models import learner as model
from dsinspect.web.models.rollout import parse_color
from dsinspect.web.ui import cache
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, mono, or_stop
from dsinspect.web.ui.rollout import show_rollout
from dsinspect.web.ui.url import follow_url

__all__ = ["learner_step_page", "learner_verdict"]

_HEADLINE = "That learner step cannot be shown."


def learner_step_page(url: str, run: str) -> None:
    """The page for the learner record `run` (a name the runs directory lists) at the URL's step and rank."""
    params = st.query_params
    step = or_stop(lambda: model.parse_step(params.get("step")), _HEADLINE)
    rank = params.get("rank", "0")
    _boxes(step, rank)
    m = or_stop(lambda: cache.learner_step(url, run, step, rank), _HEADLINE)
    slot = _slot_of(m, params.get("slot"))  # checked before the page is drawn: a bad one is the page's one message
    _header(m, run)
    color = _color()
    if slot is not None:
        _slot(url, run, m, slot)
    st.caption("a slot opens that rollout · staleness = the learner's policy version − the rollout's; ⚠ marks one "
               "beyond the staleness bound (the selection never takes one) or negative (sampled by a newer policy)")
    for batch in m["batches"]:
        if len(m["batches"]) > 1:
            st.markdown(md(f"**rank {batch['rank']}**"))
        st.markdown(model.step_html(batch, run, m["step"], color, slot), unsafe_allow_html=True)


def _boxes(step: int, rank: str) -> None:
    """The step and the rank, in boxes that mirror the URL; editing one rewrites it (and drops the slot)."""
    left, right = st.columns(2)
    follow_url("lr_step", step)
    follow_url("lr_rank", rank)
    typed_step = int(left.number_input("Step", min_value=0, key="lr_step"))
    typed_rank = right.text_input("Rank (a number, or all)", key="lr_rank").strip() or "0"
    if (typed_step, typed_rank) != (step, rank):
        st.query_params["step"], st.query_params["rank"] = str(typed_step), typed_rank
        if "slot" in st.query_params:
            del st.query_params["slot"]
        st.rerun()


def _header(m: dict[str, Any], run: str) -> None:
    who = f"all {m['world_size']} ranks" if len(m["ranks"]) > 1 else f"rank {m['ranks'][0]} of {m['world_size']}"
    st.subheader(md(f"learner step {m['step']:,} · {who}"))
    bound = m["staleness_bound"] if m["staleness_bound"] is not None else "none"
    version = m["learner_version"] if m["learner_version"] is not None else "not recorded"
    st.caption(md(f"{m['batch_size']:,} rollouts a rank · stream {m['dataset']} in {m['order']} order · policy "
                  f"version {version} · staleness bound {bound} · run record {run} (ends at step {m['end']:,})"))
    st.page_link(page_file("runs"), label=md(f"Run record {run}: steps × ranks, segments, gaps, the check"),
                 icon=":material/timeline:", query_params={"run": run})
    if m["dropped"]:
        st.warning(md(f"{m['dropped']:,} rollouts dropped as stale at this step (all ranks)"), icon=":material/delete:")
    else:
        st.caption("no rollout dropped as stale at this step")
    lines = [f"rank {b['rank']}: fingerprint {b['fingerprint']} recorded · "
             + ("✓ the rows give the same" if b["ok"] else f"✗ the rows give {b['recomputed']}") for b in m["batches"]]
    bad = [b for b in m["batches"] if not b["ok"]]
    if bad:
        st.error(md(f"{len(bad)} rank(s) consumed rows that no longer give the recorded fingerprint"),
                 icon=":material/error:")
    mono("\n".join(lines))


def _color() -> str | None:
    """The URL's colour, for the slot links to carry; None when it names none or one that is not a colour."""
    try:
        return parse_color(st.query_params.get("color")) if st.query_params.get("color") else None
    except DsinspectError:
        return None


def _slot_of(m: dict[str, Any], given: str | None) -> int | None:
    """The slot `&slot=` names (None without one): a place in the one rank's batch the page shows."""
    if given is None:
        return None
    if len(m["batches"]) != 1:
        st.error(_HEADLINE)
        mono(f"a slot names one rank's rollout; this link names ranks {', '.join(map(str, m['ranks']))}: "
             "give rank=N with slot=")
        st.stop()
    return or_stop(lambda: model.parse_slot(given, len(m["batches"][0]["rows"])), _HEADLINE)


def _slot(url: str, run: str, m: dict[str, Any], slot: int) -> None:
    """The rollout at `slot` of the one rank's: its place in the stream and its rollout panel."""
    batch = m["batches"][0]
    r = or_stop(lambda: cache.learner_rollout(url, run, m["step"], batch["rank"], slot), _HEADLINE)
    row = batch["rows"][slot]
    st.markdown("#### " + md(f"rank {batch['rank']} · slot {slot} · commit {r['commit']}, row {r['row']}"))
    where = (f"row {r['index']:,} of {r['published']}" if r["published"] else
             f"row {r['index']:,} of the stream's commits 0..{r['commits'] - 1:,}, held in memory (not a published "
             f"version: `dsinspect snapshot {r['dataset']} --until {r['commits']}` makes it one)")
    st.caption(md(f"{where} · staleness {row['staleness'] if row['staleness'] is not None else '–'} · "
                  "findings checked at the learner's policy version and bound"))
    if r["published"]:
        st.page_link(page_file("sample"), label=md(f"Open {r['published']}:{r['index']} on the Sample page"),
                     icon=":material/search:", query_params={"address": f"{r['published']}:{r['index']}"})
    if r["view"] is None:
        st.info("The stream is not LLM rollouts: the rollout's row is in the table below.")
        return
    show_rollout(r["view"], r["published"])


def learner_verdict(check: dict[str, Any], run: str) -> None:
    """The Run page's check of a learner's record (models/learner.check_model): the verdict, every divergence
    named, and a link to the step of the first."""
    a, b = check["steps"]
    span = f"steps {a:,}..{b - 1:,}" if b > a else "no steps"
    how = ("the selection run again from the record's first step: every line is what its rank was given"
           if check["replayed"] else "each line on its own (gaps before or inside the range)")
    counts = (f"{check['lines']:,} kept line(s) over {span}: {check['consumed']:,} rollouts consumed, "
              f"{check['dropped']:,} dropped as stale, {check['superseded']:,} line(s) superseded by a resume")
    if check["ok"]:
        st.success(md(f"✓ the record matches the stream · {counts}"))
        st.caption(md(f"checked by {how}"))
        return
    st.error(md(f"✗ the record does not match the stream · {counts}"))
    mono("\n".join(f"✗ {line}" for line in check["divergences"]))
    d = check["divergence"]
    if d is not None:
        query = {"run": run, "step": str(d["step"]), "rank": str(d["rank"])}
        st.page_link(page_file("replay"), label=md(f"Open step {d['step']}, rank {d['rank']}"),
                     icon=":material/replay:", query_params=query)

"""Run page: a run record of the runs directory, chosen by name from its listing: sources, world sizes,
segments, gaps, time spent waiting for data, and a grid of steps × ranks whose cells link to that
batch's replay (checked against the record). The check of the whole record runs only when asked.

Deep link: `runs?run=NAME[&steps=A:B]`; a name not in the listing opens nothing (see models/runs_dir.py).
Bounds (models/run.py): at most 60 step buckets × 64 ranks drawn, and a check of at most
MAX_CHECK_SAMPLES samples; more is refused with the command line to use instead.
"""

import streamlit as st

from dsinspect.inspect.runs import MAX_ROWS
from dsinspect.web import settings
from dsinspect.web.models import run, runs_dir
from dsinspect.web.ui import cache
from dsinspect.web.ui.learner import learner_verdict
from dsinspect.web.ui.nav import page_file
from dsinspect.web.ui.page import md, mono, or_stop
from dsinspect.web.ui.url import follow_url

url = cache.url()
st.title("Run")
params = st.query_params
names = cache.run_names(url)
given = params.get("run", "")


def set_run() -> None:
    params["run"] = st.session_state["rn_run"]
    if "steps" in params:
        del params["steps"]


if not names:
    st.info(md(f"No run records in {runs_dir.runs_url(url)} (a job's record_dir: folders holding specs/ and "
               "fingerprints/). `dsinspect web --runs DIR` names another folder."))
    st.stop()
st.selectbox("Run record", ["", *names], index=([""] + names).index(given) if given in names else 0, key="rn_run",
             format_func=lambda n: n or "—", on_change=set_run)
if not given:
    st.info("Pick a run record; the page's URL then names it.")
    st.stop()
view = or_stop(lambda: cache.run_view(url, given), "That run record cannot be opened.")
learner = view.learner is not None  # a stream learner's record: its check and its cells' pages are its own
summary_area, grid_area, check_area = st.container(), st.container(), st.container()  # drawn in this order

with grid_area:
    st.markdown("#### Steps × ranks")
    left, right = st.columns([3, 1])
    follow_url("rn_steps", params.get("steps", ""))
    steps = left.text_input("Steps (A:B, B excluded; blank: the whole run)", key="rn_steps").strip() or None
    pages = run.rank_pages(view)
    page = int(right.number_input(f"Ranks page ({MAX_ROWS} ranks each, of {pages})", min_value=1, max_value=pages,
                                  value=1, key="rn_page")) - 1 if pages > 1 else 0
if (steps or "") != params.get("steps", ""):
    if steps:
        params["steps"] = steps
    else:
        del params["steps"]

transform = settings.preset_transform()
checked_key = (given, steps, transform)
with check_area:
    if st.button("Check these steps against the catalog", key="rn_check", icon=":material/fact_check:"):
        st.session_state["rn_checked"] = checked_key
    st.caption(f"Never on page load: a check reads every kept line's rows (at most {run.MAX_CHECK_SAMPLES:,} "
               "samples per page; the command line checks any run). A transformed log is checked with the "
               "operator's transform (`dsinspect web --transform`).")
    check = None
    if st.session_state.get("rn_checked") == checked_key:
        check = or_stop(lambda: cache.learner_check(url, given, steps) if learner else
                        cache.run_check(url, given, steps, transform), "The run record cannot be checked.")
    if check is not None and learner:
        learner_verdict(check, given)
    elif check is not None:
        d = check["divergence"]
        span = f"steps {check['steps'][0]:,}..{check['steps'][1]:,}" if check["steps"] else "no steps"
        if d is not None:
            where = f"positions {', '.join(map(str, d['positions']))}" if d["positions"] else \
                "no position attributable"
            st.error(md(f"✗ first divergence at step {d['step']}, rank {d['rank']} ({d['of']}; {where})"))
            mono(f"logged    {d['logged']}\nreplayed  {d['replayed']}\n{d['reason']}")
            st.page_link(page_file("replay"), label=md(f"Open step {d['step']}, rank {d['rank']}"),
                         icon=":material/replay:", query_params={"run": given, "log": given, "step": str(d["step"]),
                                                                  "rank": str(d["rank"])})
        elif check["gaps"]:
            st.warning(md(f"The {check['checked']:,} kept line(s) match the catalog ({span}), but the record has "
                          "gaps."))
        else:
            st.success(md(f"✓ {check['checked']:,} kept line(s) match the catalog ({span}); the record's "
                          f"{check['superseded']:,} superseded line(s) are not evidence."))

model = or_stop(lambda: run.run_model(view, steps, page, check), "That run record cannot be opened.")
s, grid = model["summary"], model["grid"]

with summary_area:
    st.subheader(md(f"run {s['name']}"))
    sizes = [n for i, n in enumerate(s["world_sizes"]) if i == 0 or s["world_sizes"][i - 1] != n]
    wait = s["wait_per_step"]
    st.caption(md(f"{', '.join(s['sources']) or '-'} · ranks {' → '.join(map(str, sizes)) or '-'} · steps "
                  + (f"{s['steps'][0]:,}..{s['steps'][1]:,}" if s["steps"] else "-")
                  + f" · {s['lines']:,} kept lines · {s['superseded']:,} superseded · wait per step "
                  + (f"{wait * 1000:.2f} ms" if wait is not None else "not recorded")))
    if s["gaps"]:
        st.error(md(f"{len(s['gaps'])} gap range(s): {s['missing']:,} (step, rank) pair(s) of the kept history "
                    "have no line"))
        mono("\n".join(f"steps {g['steps'][0]:,}..{g['steps'][1]:,}  ranks {', '.join(map(str, g['ranks']))}"
                       for g in s["gaps"][:50]) + (f"\n… {len(s['gaps']) - 50} more" if len(s["gaps"]) > 50 else ""))
    else:
        st.success("No gaps: every (step, rank) of the kept history has its line.")

with grid_area:
    if grid.columns:
        per = f"{grid.bucket:,} steps per column (+ zooms into one)" if grid.bucket > 1 else "one step per column"
        st.caption(md(f"steps {grid.columns[0][0]:,}..{grid.columns[-1][1]:,}, {per}; ranks {grid.ranks[0]}.."
                      f"{grid.ranks[-1]} of {grid.all_ranks} · █ kept · ✗ gap · ░ only superseded lines · "
                      "! first divergence · a cell opens "
                      + ("the rollouts its rank consumed" if learner else "its batch's replay")))
        st.markdown(run.grid_html(grid, given, learner), unsafe_allow_html=True)
    else:
        st.info("No step of this run in these steps.")

st.markdown("#### Segments")
st.dataframe([{"segment": g["id"], "parent": g["parent"] or "", "start": g["start"], "world size": g["world_size"],
               "batch size": g["batch_size"], "lines": g["lines"],
               "steps": f"{g['steps'][0]}..{g['steps'][1]}" if g["steps"] else "", "kept": g["kept"],
               "started": g["started"] or "",
               "wait/step (ms)": round(g["wait_per_step"] * 1000, 3) if g["wait_per_step"] is not None else None}
              for g in s["segments"]], hide_index=True, width="stretch", key="rn_segments")

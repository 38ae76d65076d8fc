"""The Run page (streamlit.testing.v1.AppTest): a run record of the runs directory by its listed name,
its summary, segments, gaps and a steps × ranks grid whose cells link to that batch's replay; the
check only when asked (and marking the first divergence); bounds on what one link can make the
server do; names and record text shown as data, never markup. Records written by real Loaders."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from replay_diff_fixtures import rewrite_shard
from run_fixtures import toy_catalog, write_run
from streamlit.testing.v1 import AppTest
from web_fixtures import APP, UNC_IMG, codes, param, plain, run

import dsinspect
from dsinspect.inspect.runs import GLYPHS, open_run
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.records.run import read_run
from dsinspect.web.models import run as run_model
from dsinspect.web.ui.nav import page_for
from dsinspect.web.ui.page import md


@pytest.fixture
def job(tmp_path, monkeypatch):
    """CATALOG/runs/resumed: 3 ranks for steps 0..9, then 2 (A's 10..29 superseded), steps 25..34 a gap."""
    cat = toy_catalog(str(tmp_path / "cat"))
    record = str(tmp_path / "cat" / "runs" / "resumed")
    spec = write_run(cat, record)
    monkeypatch.setenv("DSINSPECT_CATALOG", cat.url)
    monkeypatch.delenv("DSINSPECT_RUNS", raising=False)
    monkeypatch.delenv("DSINSPECT_WEB_TRANSFORM", raising=False)
    return cat, spec, record


def runs_page(**params: str) -> AppTest:
    """The Run page at `runs?k=v&…`, run once, with no exception raised."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("app_pages/runs.py")
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def grid_of(at: AppTest) -> str:
    tables = [m.value for m in at.markdown if run_model.GRID_CLASS in m.value]
    assert len(tables) == 1
    return tables[0]


def grid_rows(table: str) -> dict[int, list[tuple[str, dict | None]]]:
    """rank -> each cell's (status, the link's query parameters or None)."""
    rows = {}
    for rank, body in re.findall(r"<tr><th>rank (\d+)</th>(.*?)</tr>", table):
        cells = []
        for status, rest in re.findall(r'<td class="(\w+)"(.*?)</td>', body):
            href = re.search(r'href="([^"]*)"', rest)
            cells.append((status, dict(parse_qsl(urlsplit(html.unescape(href.group(1))).query)) if href else None))
        rows[int(rank)] = cells
    return rows


def test_the_run_page_shows_summary_segments_gaps_and_a_grid_of_links(job):
    cat, spec, record = job
    at = runs_page(run="resumed")
    assert at.title[0].value == "Run" and at.subheader[0].value == md("run resumed")
    captions = [plain(c.value) for c in at.caption]
    assert any("ranks 3 → 2 · steps 0..39 · 70 kept lines · 60 superseded" in c for c in captions)
    assert plain(at.error[0].value) == "1 gap range(s): 20 (step, rank) pair(s) of the kept history have no line"
    assert "steps 25..34  ranks 0, 1" in codes(at)
    assert list(at.dataframe[0].value["world size"]) == [3, 2, 2]
    rows = grid_rows(grid_of(at))
    assert sorted(rows) == [0, 1, 2] and all(len(cells) == 40 for cells in rows.values())
    assert [c[0] for c in rows[0]] == ["kept"] * 25 + ["gap"] * 10 + ["kept"] * 5
    assert [c[0] for c in rows[2]] == ["kept"] * 10 + ["superseded"] * 20 + ["none"] * 10
    assert rows[0][27][1] == {"run": "resumed", "log": "resumed", "step": "27", "rank": "0"}
    assert rows[2][35][1] is None  # no rank 2 after the resume: nothing to open
    assert not any("divergence" in e.value for e in at.error)  # no check on page load

    # a cell's link is the replay page's run link, checked against the record at that step
    link = rows[0][27][1]
    assert page_for(link) == "replay"
    gap = run(**link)
    assert plain(gap.warning[0].value) == "step 27: the log has no line for this (step, rank)"
    kept = run(**rows[1][12][1])
    assert plain(kept.success[0].value).startswith("step 12: ✓ matches the log (1 line(s), 1 stored")
    assert any(p.label == md("Run record resumed: steps × ranks, segments, gaps") for p in kept.get("page_link"))


def test_the_check_runs_only_when_asked_and_marks_the_first_divergence(job):
    cat, spec, record = job
    index = int(dsinspect.batch_indices(read_run(record).spec_at(12), step=12, rank=1)[2])
    rewrite_shard(cat.resolve("toy"), index, "tokens", [1, 2, 3], rehash=False)
    at = runs_page(run="resumed")
    assert 'class="diverged"' not in grid_of(at)
    at.button(key="rn_check").click().run()
    assert not at.exception
    errors = [plain(e.value) for e in at.error]
    assert "✗ first divergence at step 12, rank 1 (stored; positions 2)" in errors
    assert "no longer hash to their stored row hash" in codes(at)
    rows = grid_rows(grid_of(at))
    assert rows[1][12][0] == "diverged" and [c[0] for c in rows[1]].count("diverged") == 1
    assert rows[1][12][1] == {"run": "resumed", "log": "resumed", "step": "12", "rank": "1"}
    at.run()  # the verdict stays on the next rerun (the check is cached, not re-run)
    assert "✗ first divergence at step 12, rank 1 (stored; positions 2)" in [plain(e.value) for e in at.error]


def test_zoom_by_steps_and_a_clean_check(job):
    at = runs_page(run="resumed", steps="0:10")
    rows = grid_rows(grid_of(at))
    assert [len(c) for c in rows.values()] == [10, 10, 10] and {c[0] for r in rows.values() for c in r} == {"kept"}
    at.button(key="rn_check").click().run()
    assert plain(at.success[-1].value) == ("✓ 30 kept line(s) match the catalog (steps 0..9); the record's 60 "
                                           "superseded line(s) are not evidence.")
    at.text_input(key="rn_steps").input("x").run()
    assert at.error[0].value == "That run record cannot be opened." and "steps must look like" in codes(at)


def test_a_big_run_is_bounded_bucketed_and_paged_and_its_check_refused(job, tmp_path):
    """100 ranks × 1,100 steps (110,000 lines, 220,000 samples): 60 columns × 64 ranks drawn, the rest
    a page away; the check refused before a row is read."""
    cat, spec, _ = job
    wide = dsinspect.RunSpec.create(cat, "toy", batch_size=2, world_size=100)
    for rank in range(100):
        recorder = RunRecorder(f"{cat.url}/runs/wide", rank, flush_every=2000)
        recorder.begin(wide)
        for step in range(1100):
            recorder.record(step, 0, f"{step:032x}", 2)
        recorder.close()
    at = runs_page(run="wide")
    table = grid_of(at)
    rows = grid_rows(table)
    # buckets of ceil(1100 / 60) = 19 steps: 58 columns
    assert sorted(rows) == list(range(64)) and {len(c) for c in rows.values()} == {58}
    assert table.count('title="zoom into steps') == 58 and 'title="zoom into steps 1,083..1,099"' in table
    at.number_input(key="rn_page").set_value(2).run()
    assert sorted(grid_rows(grid_of(at))) == list(range(64, 100))
    at.button(key="rn_check").click().run()
    assert at.error[0].value == "The run record cannot be checked."
    assert "hold 220,000 samples; a page checks at most 200,000" in codes(at)


def test_names_and_record_text_are_data_never_markup(job, tmp_path):
    cat, spec, record = job
    name = '<img src=x onerror=alert(1)>"x'
    view = open_run(record, name)
    table = run_model.grid_html(view.grid(), name)
    assert "<img" not in table and "onerror=alert(1)>" not in table and GLYPHS["gap"] in table
    assert "run=%3Cimg+src%3Dx+onerror%3Dalert%281%29%3E%22x" in table
    assert all(href.startswith(("replay?", "?")) for href in re.findall(r'href="([^"]*)"', table))
    # a run record named as Markdown (a file name can hold one) is listed and shown as its text
    RunRecorder(f"{cat.url}/runs/{UNC_IMG}", 0).begin(spec)
    at = runs_page(run=UNC_IMG)
    assert at.subheader[0].value == md(f"run {UNC_IMG}") and plain(at.subheader[0].value) == f"run {UNC_IMG}"
    assert any("No step of this run" in i.value for i in at.info)


@pytest.mark.parametrize("name", ["../cat", "resumed/..", "/etc", "nope"])
def test_only_listed_run_records_open(job, name):
    at = runs_page(run=name)
    assert at.selectbox(key="rn_run").value == ""
    assert at.error[0].value == "That run record cannot be opened." and "no run record" in codes(at)


def test_picking_a_run_names_it_in_the_url(job, monkeypatch, tmp_path):
    at = runs_page()
    assert at.selectbox(key="rn_run").options == ["—", "resumed"]
    at.selectbox(key="rn_run").select("resumed").run()
    assert param(at, "run") == "resumed" and grid_of(at)
    monkeypatch.setenv("DSINSPECT_RUNS", str(tmp_path / "empty"))  # `dsinspect web --runs DIR` with nothing there
    at = runs_page()
    assert "No run records in" in at.info[0].value

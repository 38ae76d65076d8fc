"""The run screen: a run record's summary, segments, gaps and steps × ranks grid; Enter on a cell opens
that batch's replay checked against the record; `k` checks the whole record and marks the first
divergence; `z`/`Z` zoom; reached by `dsinspect tui RUNDIR` (the app's `run=`), `r` on a replay of
a run record, and the command palette. Records written by real Loaders, checked against real Parquet."""

from __future__ import annotations

import pytest
from replay_diff_fixtures import rewrite_shard
from run_fixtures import toy_catalog, write_run
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from tui_helpers import SIZE, screen_text, until

import dsinspect
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.records.run import read_run
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.replay import ReplayScreen
from dsinspect.tui.screens.run import RunScreen


@pytest.fixture
def job(tmp_path):
    """A catalog and its run record `resumed`: 3 ranks for steps 0..9, then 2 (A's 10..29 superseded),
    steps 25..34 a gap, 35..39 logged."""
    cat = toy_catalog(str(tmp_path / "cat"))
    record = str(tmp_path / "cat" / "runs" / "resumed")
    spec = write_run(cat, record)
    return cat, spec, record


def app_on(cat, **kwargs) -> DsinspectApp:
    return DsinspectApp(source=DataSource(catalog=Catalog(cat.url)), **kwargs)


def grid_row(screen: RunScreen, rank: int) -> str:
    return screen.grid.rows_text()[screen.grid.ranks.index(rank)]


async def replayed(pilot, app, record: str, step: int, rank: int) -> ReplayScreen:
    """The replay screen a key opened: of (step, rank) of `record`, checked against it, holding the
    rows batch_indices names for the segment the job kept at that step."""
    await until(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.result is not None,
                what="replay")
    replay = app.screen
    assert (replay.spec, replay.step, replay.rank, replay.log_path) == (record, step, str(rank), record)
    expected = dsinspect.batch_indices(read_run(record).spec_at(step), step=step, rank=rank)
    assert [s.index for s in replay.result.samples] == [int(i) for i in expected]
    return replay


async def open_run(pilot, app) -> RunScreen:
    await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.grid is not None, what="run screen")
    return app.screen


@pytest.mark.asyncio
async def test_the_run_screen_shows_segments_gaps_and_the_grid_and_enter_replays_a_cell(job):
    cat, spec, record = job
    app = app_on(cat, run=record)  # what `dsinspect tui RUNDIR` starts
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_run(pilot, app)
        assert grid_row(screen, 0) == "█" * 25 + "✗" * 10 + "█" * 5
        assert grid_row(screen, 2).rstrip() == "█" * 10 + "░" * 20
        assert screen.query_one("#run-segments", DataTable).row_count == 3
        gaps = "gaps: 1 range(s), 20 (step, rank) pair(s): steps 25..34, ranks 0-1"
        await until(pilot, lambda: gaps in screen_text(app), what="gaps line")  # the grid is set before the repaint
        text = screen_text(app)
        assert gaps in text
        assert "70 kept lines · 60 superseded" in text and "ranks 3 → 2" in text

        table = screen.query_one("#run-grid", DataTable)
        table.cursor_coordinate = Coordinate(0, 27)  # rank 0, step 27: a gap
        await until(pilot, lambda: "rank 0, step 27: a gap" in screen_text(app), what="cell line")
        await pilot.press("enter")
        await replayed(pilot, app, record, 27, 0)
        assert read_run(record).spec_at(27).world_size == 2  # the segment the job kept for step 27 (B's, 2 ranks)
        await until(pilot, lambda: "the log has no line for this step" in screen_text(app), what="gap verdict")

        await pilot.press("r")  # the replay reads a run record: `r` opens it
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen is not screen, what="r")
        await open_run(pilot, app)
        assert app.screen.path == record


@pytest.mark.asyncio
async def test_the_check_marks_the_first_divergence_and_its_cell_replays_it(job):
    cat, spec, record = job
    # a row read once in the kept history: by B's rank 1 at step 12, position 2
    index = int(dsinspect.batch_indices(read_run(record).spec_at(12), step=12, rank=1)[2])
    rewrite_shard(cat.resolve("toy"), index, "tokens", [1, 2, 3], rehash=False)
    app = app_on(cat)
    async with app.run_test(size=SIZE) as pilot:
        app.action_run(record)
        screen = await open_run(pilot, app)
        assert "!" not in grid_row(screen, 1)
        await pilot.press("k")
        await until(pilot, lambda: screen.check_result is not None, what="check")
        await until(pilot, lambda: grid_row(screen, 1)[12] == "!", what="divergence marked")
        assert "✗ first divergence at step 12, rank 1 (stored; positions [2])" in screen_text(app)
        table = screen.query_one("#run-grid", DataTable)
        table.cursor_coordinate = Coordinate(1, 12)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.result is not None)
        await until(pilot, lambda: "DIVERGES" in screen_text(app), what="replay marks it")
        assert (app.screen.step, app.screen.rank) == (12, "1")


@pytest.mark.asyncio
async def test_a_long_run_is_bucketed_and_zooms(tmp_path):
    cat = toy_catalog(str(tmp_path / "cat"))
    spec = dsinspect.RunSpec.create(cat, "toy", batch_size=2, world_size=2)
    for rank in (0, 1):
        recorder = RunRecorder(str(tmp_path / "run"), rank, flush_every=1000)
        recorder.begin(spec)
        for step in range(600):
            if not (rank == 1 and step == 433):
                recorder.record(step, 0, f"{step:032x}", 2)
        recorder.close()
    app = app_on(cat)
    async with app.run_test(size=SIZE) as pilot:
        app.action_run(str(tmp_path / "run"))
        screen = await open_run(pilot, app)
        assert screen.grid.bucket == 10 and grid_row(screen, 1) == "█" * 43 + "✗" + "█" * 16
        assert "steps 0..599 (10 steps per column)" in screen_text(app)
        screen.query_one("#run-grid", DataTable).cursor_coordinate = Coordinate(1, 43)
        await pilot.press("z")
        await until(pilot, lambda: screen.grid.bucket == 1, what="zoom in")
        assert screen.grid.columns[0] == (430, 430) and grid_row(screen, 1) == "███✗██████"
        await pilot.press("Z")
        await until(pilot, lambda: screen.grid.bucket == 10, what="zoom out")


@pytest.mark.asyncio
async def test_a_spec_file_replay_offers_no_run_and_a_bad_path_is_one_notification(job, tmp_path):
    cat, spec, record = job
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    app = app_on(cat)
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(str(path), 0, "0")
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.result is not None)
        assert "Run record" not in screen_text(app)  # `r` is shown (and works) only for a run record
        await pilot.press("r")
        assert isinstance(app.screen, ReplayScreen)
        app.action_run(str(tmp_path / "nope"))
        await until(pilot, lambda: any("no such run record directory" in n.message for n in app._notifications))
        assert isinstance(app.screen, RunScreen) and app.is_running


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_R_on_the_run_screen_opens_the_replay_of_the_highlighted_cell(job, size):
    """`R` was the app's key there: an empty replay form, the run not filled in (issue #31)."""
    cat, _, record = job
    app = app_on(cat, run=record)
    async with app.run_test(size=size) as pilot:
        screen = await open_run(pilot, app)
        screen.query_one("#run-grid", DataTable).cursor_coordinate = Coordinate(1, 12)  # rank 1, step 12
        await until(pilot, lambda: "rank 1, step 12" in screen_text(app), what="cell line")
        await pilot.press("R")
        await replayed(pilot, app, record, 12, 1)


@pytest.mark.asyncio
async def test_a_run_is_opened_and_replayed_by_its_name_in_the_catalogs_runs(job):
    """As `dsinspect runs`, `replay --spec NAME` and the web app name it: the folder in <catalog>/runs."""
    cat, _, record = job
    app = app_on(cat)
    async with app.run_test(size=SIZE) as pilot:
        app.action_run("resumed")
        screen = await open_run(pilot, app)
        assert screen.view is not None and grid_row(screen, 0).startswith("█" * 25)
        app.action_replay("resumed", 3, "0", log="resumed")
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.result is not None,
                    what="replay by name")
        assert [s.index for s in app.screen.result.samples] == \
            [int(i) for i in dsinspect.batch_indices(read_run(record).spec_at(3), step=3, rank=0)]
        await until(pilot, lambda: app.screen.run_record == record, what="the run record found by name")
        await until(pilot, lambda: "step 3: ✓ matches the log" in screen_text(app),
                    what="the step checked against the record")


@pytest.mark.asyncio
async def test_a_replay_beyond_the_byte_bound_is_one_notification_naming_the_export(job):
    """As `dsinspect replay` and the web app bound theirs: the TUI held any batch whole (issue #31's
    2.7 GB page, left alone in the terminal). A bound of 256 bytes refuses the toy batch of all ranks."""
    cat, _, record = job
    app = DsinspectApp(source=DataSource(catalog=Catalog(cat.url), replay_bytes=256))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(record, 3, "all")
        await until(pilot, lambda: any("more than the bound of 256 B" in n.message for n in app._notifications),
                    what="the refusal")
        note = next(n.message for n in app._notifications if "bound" in n.message)
        assert note.count("\n") == 0 and f"dsinspect replay --spec {record} --step 3 --rank all --export DIR" in note
        assert isinstance(app.screen, ReplayScreen) and app.screen.result is None

"""Snapshot tests (pytest-textual-snapshot) of the main screens on the sample catalog.

Each test drives the app until the screen's content is loaded (workers finished), then compares an
SVG screenshot with the one stored under tests/__snapshots__/test_tui_snapshots/. After an
intended change, look at the new pictures and accept them with
`python -m pytest tests/test_tui_snapshots.py --snapshot-update`.

Determinism: a fixed terminal size; the catalog shown by a fixed name instead of its path on this
machine; pictures forced to half-block cells (no terminal graphics probing); no cursor blink.
"""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input, OptionList
from tui_helpers import SIZE, downs_to, until

import dsinspect
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.catalog import CatalogScreen
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.diff import DiffScreen
from dsinspect.tui.screens.replay import ReplayScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets import pictures
from dsinspect.tui.widgets.field_view import FieldView
from dsinspect.tui.widgets.sample_table import SampleTable
from dsinspect.tui.widgets.step_rows import StepRowsView

pytest.importorskip("pytest_textual_snapshot")


class SampleCatalog(DataSource):
    """The bundled sample catalog, named without the path it has on this machine."""

    def listing(self):
        return {**super().listing(), "catalog": "(sample catalog)"}


@pytest.fixture(autouse=True)
def half_blocks(monkeypatch):
    monkeypatch.setattr(pictures, "_Widget", pictures._Widget)  # restored after the test
    pictures.use_half_blocks()


def app(address: str | None = None) -> DsinspectApp:
    return DsinspectApp(source=SampleCatalog(), address=address)


async def settle(pilot) -> None:
    """Stop cursor blinks and let the last layout land; on a sample screen, wait for the hashes and
    hex too (they are redrawn after the decoded view: under load CI took pictures without them)."""
    screen = pilot.app.screen
    if isinstance(screen, SampleScreen):
        await until(pilot, lambda: screen.query_one("#raw-body").content, what="hashes and hex")
    for field in screen.query(Input):
        field.cursor_blink = False
    await pilot.pause(0.1)


async def open_field(pilot, field: str) -> SampleScreen:
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="sample")
    screen = app.screen
    names = [f.name for f in screen.sample.fields]
    screen.query_one("#fields", OptionList).highlighted = names.index(field)
    await until(pilot, lambda: screen.query_one(FieldView).prepared.info.name == field, what=f"field {field}")
    await until(pilot, lambda: screen.query_one("#raw-body").content, what="hashes and hex")
    return screen


def test_catalog(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="listing")
        await pilot.press(*downs_to(app, "demo-text"))  # two versions
        await until(pilot, lambda: app.screen.query_one("#versions", DataTable).row_count == 2)
        await settle(pilot)

    assert snap_compare(app(), terminal_size=SIZE, run_before=run_before)


def test_dataset(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable),
                    what="sample table")
        table = app.screen.query_one(SampleTable)
        await until(pilot, lambda: table.row_cells(table.cursor) is not None, what="rows")
        await settle(pilot)

    assert snap_compare(app("demo-text@v1"), terminal_size=SIZE, run_before=run_before)


def test_sample_tokens(snap_compare):
    async def run_before(pilot):
        await open_field(pilot, "tokens")
        await pilot.press("right", "right")  # the cursor on the third piece
        await settle(pilot)

    assert snap_compare(app("demo-text@v1:0"), terminal_size=SIZE, run_before=run_before)


def test_sample_image(snap_compare):
    async def run_before(pilot):
        screen = await open_field(pilot, "image")
        await until(pilot, lambda: screen.query_one("#image-picture").region.height, what="picture")
        await settle(pilot)

    assert snap_compare(app("demo-images@v1:3"), terminal_size=SIZE, run_before=run_before)


def test_sample_video_third_frame(snap_compare):
    async def run_before(pilot):
        screen = await open_field(pilot, "video")
        await pilot.press("full_stop", "full_stop")
        await until(pilot, lambda: "frame 2 (0..17)" in str(screen.query_one("#frame-label").render()),
                    what="frame 2 (the third)")
        await settle(pilot)

    assert snap_compare(app("demo-video@v1:1"), terminal_size=SIZE, run_before=run_before)


def test_sample_trajectory_last_step(snap_compare):
    async def run_before(pilot):
        await open_field(pilot, "trajectory")
        await pilot.press("tab", "end")
        table = pilot.app.screen.query_one("#steps", StepRowsView)
        await until(pilot, lambda: table.cursor_row == 119, what="last step")
        await settle(pilot)

    assert snap_compare(app("demo-rl@v1:2"), terminal_size=SIZE, run_before=run_before)


def test_replay_two_ranks(snap_compare, tmp_path, monkeypatch):
    spec = dsinspect.RunSpec.create(dsinspect.open_catalog(), "demo-text@v1", seed=0, batch_size=4, world_size=2,
                                    shuffle="global")
    (tmp_path / "run.json").write_text(spec.dumps())
    monkeypatch.chdir(tmp_path)  # the spec is shown by its relative name, the same on every machine

    async def run_before(pilot):
        app = pilot.app
        app.action_replay("run.json", 3, "all")
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.result, what="replay")
        await settle(pilot)

    assert snap_compare(app(), terminal_size=SIZE, run_before=run_before)


def test_diff(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        app.open_diff("demo-text@v1", "demo-text@v2")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.result, what="diff")
        await settle(pilot)

    assert snap_compare(app(), terminal_size=SIZE, run_before=run_before)

"""The sample screen: every role's decoded view beside its hashes and raw hex, the token cursor,
video frame stepping, trajectories with sparklines, and error views for broken fields."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from textual.widgets import OptionList
from tui_helpers import SIZE, screen_text, until

import dsinspect
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.term import sparkline
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.field_view import FieldView
from dsinspect.tui.widgets.step_rows import StepRowsView
from dsinspect.tui.widgets.token_strip import TokenStrip
from dsinspect.tui.widgets.video_player import VideoPlayer


async def open_field(pilot, app, address: str, field: str) -> SampleScreen:
    app.open_address(address)
    await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="sample")
    screen = app.screen
    names = [f.name for f in screen.sample.fields]
    screen.query_one("#fields", OptionList).highlighted = names.index(field)
    await until(pilot, lambda: screen.query(FieldView) and screen.query_one(FieldView).prepared.info.name == field,
                what=f"field {field}")
    await until(pilot, lambda: screen.query_one("#raw-body").content, what="hashes and hex")
    await pilot.pause(0.05)
    return screen


@pytest.mark.asyncio
async def test_tokens_coloured_with_the_id_under_the_cursor():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_field(pilot, app, "demo-text@v1:0", "tokens")
        strip = screen.query_one(TokenStrip)
        ids = screen.sample.view("tokens").ids
        await until(pilot, lambda: f"token #0  id {ids[0]}" in screen_text(app), what="token cursor")
        await pilot.press("right", "right")
        assert strip.cursor == 2
        await until(pilot, lambda: f"token #2  id {ids[2]}" in screen_text(app))
        assert "field hash (xxh3-128) " + screen.sample.field("tokens").hash in screen_text(app)
        assert "canonical bytes" in screen_text(app)
        # boundaries: neighbouring pieces get different backgrounds
        rendered = strip.render().renderables[1]
        backgrounds = {str(span.style) for span in rendered.spans}
        assert len(backgrounds) >= 3


@pytest.mark.asyncio
async def test_footer_follows_the_focused_widgets_keys():
    """The footer skips rebuilding when its keys are unchanged, but not when they change."""
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_field(pilot, app, "demo-text@v1:0", "tokens")
        await until(pilot, lambda: "x Hex" in screen_text(app) and "Next token" not in screen_text(app))
        await pilot.press("tab")  # into the token strip: its keys join the footer
        assert app.focused is screen.query_one(TokenStrip)
        await until(pilot, lambda: "Next token" in screen_text(app), what="token keys in the footer")
        await pilot.press("shift+tab")
        await until(pilot, lambda: "Next token" not in screen_text(app), what="token keys gone")


@pytest.mark.asyncio
async def test_text_image_json_and_scalar_fields():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_field(pilot, app, "demo-text@v1:2", "text")
        assert "Tiny changelog" in screen_text(app) and "raw bytes (258)" in screen_text(app)
        screen = await open_field(pilot, app, "demo-images@v1:3", "image")
        await until(pilot, lambda: screen.query("#image-picture"), what="image")
        text = screen_text(app)
        assert ("JPEG" in text or "PNG" in text) and ("▀" in text or "▄" in text)
        screen = await open_field(pilot, app, "demo-video@v1:0", "info")
        assert '"codec"' in screen_text(app)
        screen = await open_field(pilot, app, "demo-video@v1:0", "fps")
        assert str(screen.sample.value("fps")) in screen_text(app)


@pytest.mark.asyncio
async def test_video_frames_step_forward_and_back():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_field(pilot, app, "demo-video@v1:1", "video")
        player = screen.query_one(VideoPlayer)
        await until(pilot, lambda: "frame 0 (0..17)" in screen_text(app) and screen.query("#frame-picture"),
                    what="first frame")  # decoded in a worker: wait, do not race it
        await pilot.press("full_stop", "full_stop")
        await until(pilot, lambda: "frame 2 (0..17)" in screen_text(app), what="frame 2")
        await pilot.press("comma")
        await until(pilot, lambda: "frame 1 (0..17)" in screen_text(app), what="frame 1")
        await pilot.press("comma", "comma")
        await until(pilot, lambda: "frame 17 (0..17)" in screen_text(app), what="wrap to the last frame")
        assert player.frame_index == 17


@pytest.mark.asyncio
async def test_trajectory_table_with_sparklines_and_next_sample():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_field(pilot, app, "demo-rl@v1:1", "trajectory")
        text = screen_text(app)
        assert "episode: 33 steps" in text and "reward  ▁" in text and "return  ▁" in text and "terminated" in text
        await pilot.press("n")
        await until(pilot, lambda: screen.sample.index == 2 and screen.query_one(FieldView).prepared.info.name
                    == "trajectory" and "episode: 120 steps" in screen_text(app), what="next sample")
        await pilot.press("p", "p", "p")
        await until(pilot, lambda: screen.sample.index == 0)
        await pilot.press("p")
        await until(pilot, lambda: [n for n in app._notifications if "no sample -1" in n.message])


@pytest.mark.asyncio
async def test_trajectory_pages_through_every_step_of_a_long_episode():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_field(pilot, app, "demo-rl@v1:2", "trajectory")
        view = screen.sample.view("trajectory")
        assert view.length == 120
        table = screen.query_one("#steps", StepRowsView)
        assert table.row_count == 120
        expected = [r for n in range(view.pages) for r in view.page(n).rows]  # the core's own paging
        cells = [table.row_texts(i) for i in range(120)]
        assert [[c[0], *c[2:5]] for c in cells] == [
            [str(r.step), str(r.action), f"{r.reward:.4g}", f"{r.cumulative:.4g}"] for r in expected]
        assert all(str(r.observation).startswith(c[1].rstrip("…")) for c, r in zip(cells, expected))
        await pilot.press("tab")  # from the field list into the step table
        assert app.focused is table
        await pilot.press("pagedown")
        assert table.cursor_row > 10
        await until(pilot, lambda: f"step {table.cursor_row} (0..119)" in screen_text(app), what="marker follows")
        await pilot.press("end")
        await until(pilot, lambda: "step 119 (0..119)" in screen_text(app), what="marker at the last step")
        assert table.cursor_row == 119
        last = view.page(-1).rows[-1]
        row = table.row_texts(119)
        assert row[0] == "119" and row[4] == f"{last.cumulative:.4g}"
        assert "reward  " + sparkline(view.rewards, 64) in screen_text(app)
        assert re.search(rf" 119 .* {re.escape(row[4])} ", screen_text(app)), "the last step's row is drawn"
        await pilot.press("home")
        await until(pilot, lambda: "step 0 (0..119)" in screen_text(app), what="back to the first step")


@pytest.mark.asyncio
async def test_trajectory_step_row_follows_keys_and_mouse_clicks():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_field(pilot, app, "demo-rl@v1:2", "trajectory")
        table = screen.query_one("#steps", StepRowsView)
        await pilot.press("tab", "down", "down", "down")
        await until(pilot, lambda: "step 3 (0..119)" in screen_text(app), what="marker at step 3")
        assert table.cursor_row == 3
        await pilot.press("up")
        await until(pilot, lambda: "step 2 (0..119)" in screen_text(app), what="marker at step 2")
        await pilot.click(table, offset=(2, 6))  # line 0 is the header: line 6 is step 5 (index 5)
        await until(pilot, lambda: table.cursor_row == 5, what="clicked row")
        await until(pilot, lambda: "step 5 (0..119)" in screen_text(app), what="marker at the clicked step")
        await pilot.press("end", "pageup")
        rows_per_page = table.scrollable_content_region.height - 1
        assert table.cursor_row == 119 - rows_per_page and rows_per_page >= 5
        await pilot.click(table, offset=(2, 0))  # the header is not a step
        assert table.cursor_row == 119 - rows_per_page


def test_step_cells_fit_their_columns_and_flag_bad_numbers():
    from rich.cells import cell_len

    from dsinspect.inspect import StepRow
    from dsinspect.tui.widgets.step_rows import STEP_COLUMNS, StepRowsView, fit_cell, step_cells

    rows = [StepRow(0, "観測値の要約がとても長い観測値の要約", 3, None, float("inf"), True, None,
                    {"info": "x\x1b[31m"}),
            StepRow(1, "short", 1, -1.234e5, -0.003394, False, False, {"info": "ok"})]
    cells = step_cells(rows[0], ["info"])
    assert [c.style for c in cells[3:7]] == ["red", "bold red", "bold", "dim"] and cells[6].text == "-"
    assert "\x1b" not in cells[7].text  # control characters never reach the terminal
    widths = [w for _, w in STEP_COLUMNS]
    assert [cell_len(fit_cell(c, w)) for c, w in zip(cells, widths)] == widths  # wide characters count two
    assert fit_cell(cells[1], 26).rstrip().endswith("…") and fit_cell(cells[3], 10) == "      null"
    view = StepRowsView(rows)
    assert view.row_count == 2 and view.row_texts(0)[1] == fit_cell(cells[1], 26).strip()
    assert view.row_texts(1)[3:5] == ["-1.234e+05", "-0.003394"]  # the widest .4g numbers are not cut


@pytest.fixture
def broken_source(tmp_path):
    """A dataset whose image, video and JSON fields hold broken bytes."""
    video = dsinspect.open_catalog().resolve("demo-video@v1").row(0)["video"]
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("broken", [{"image": b"\x89PNG\r\n\x1a\n not really", "video": video[: len(video) // 2],
                                      "info": '{"unclosed": [1, 2'}],
                          [Field("image", pa.binary(), "image"), Field("video", pa.binary(), "video"),
                           Field("info", pa.string(), "json")], tags=["v1"])
    return DataSource(catalog=catalog)


@pytest.mark.asyncio
async def test_broken_fields_show_error_views_with_their_bytes(broken_source):
    app = DsinspectApp(source=broken_source)
    async with app.run_test(size=SIZE) as pilot:
        for field in ("image", "info", "video"):
            screen = await open_field(pilot, app, "broken@v1:0", field)
            text = screen_text(app)
            view = screen.sample.view(field)
            if view.kind == "error":
                assert "could not decode as" in text and screen.query_one(FieldView).has_class("broken")
            else:  # a half video still decodes its complete frames, with findings
                assert view.findings
            assert "field hash" in text
        assert app.is_running


def test_half_block_fallback_draws_a_picture_without_textual_image():
    from PIL import Image

    from dsinspect.tui.widgets.pictures import half_block_text

    text = half_block_text(Image.new("RGB", (20, 10), (255, 0, 0)))
    lines = text.plain.splitlines()
    assert len(lines) == 5 and set(lines[0]) == {"▀"}
    assert text.spans[0].style.color.get_truecolor() == (255, 0, 0)

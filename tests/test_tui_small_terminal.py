"""An 80×24 terminal (issue #31): the footer kept the screen's keys and cut the app's (`c`, `D`,
`R`, `q`); hex lines wrapped, so offsets, hex and ASCII no longer lined up; the help dialog was cut
at the right edge. Each at 80×24 and at 120×40, on the sample catalog."""

from __future__ import annotations

import re

import pytest
from tui_helpers import screen_text, until

from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.catalog import CatalogScreen
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.help import HelpScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.sample_table import SampleTable

SIZES = [(80, 24), (120, 40)]
APP_KEYS = ("g Go to", "? Help", "c Catalog", "D Diff", "R Replay", "q Quit")
HEX_LINE = re.compile(r"\b([0-9a-f]{8})  ([0-9a-f ]+?)\s*│(.+?)│")


def footer(app) -> str:
    return screen_text(app).splitlines()[-1]


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_every_footer_keeps_the_apps_keys(size):
    app = DsinspectApp()
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="catalog")
        await until(pilot, lambda: all(k in footer(app) for k in APP_KEYS), what=f"the catalog's footer {APP_KEYS}")
        app.open_address("demo-text@v1")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable),
                    what="dataset")
        await until(pilot, lambda: all(k in footer(app) for k in (*APP_KEYS, "esc Back")), what="the dataset's footer")
        app.open_address("demo-text@v1:2")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="sample")
        keys = (*APP_KEYS, "esc Back", "n Next", "p Prev", "x Hex")
        await until(pilot, lambda: all(k in footer(app) for k in keys), what=f"the sample's footer {keys}")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_hex_lines_never_wrap(size):
    app = DsinspectApp(address="demo-images@v1:3")
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample
                    and app.screen.query_one("#raw-body").content, what="the image's hex")
        await until(pilot, lambda: "ff d8 ff e0" in screen_text(app), what="the first hex line drawn")
        lines = [m for m in map(HEX_LINE.search, screen_text(app).splitlines()) if m]
        assert len(lines) >= 3
        width = 16 if size[0] >= 120 else 8  # as many bytes as fit the pane
        offsets = [int(m.group(1), 16) for m in lines]
        assert offsets == [offsets[0] + width * i for i in range(len(offsets))]  # one line each, in order
        for m in lines:
            assert len(m.group(2).split()) == width and len(m.group(3)) == width  # hex and ASCII whole


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_help_dialog_fits_the_terminal(size):
    app = DsinspectApp()
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        box = app.screen.query_one("#help-body")
        await until(pilot, lambda: box.region.width > 0, what="laid out")
        assert box.region.x >= 0 and box.region.right <= size[0]
        assert "NAME[@REF][:INDEX]" in screen_text(app)


async def open_field(pilot, app, address: str):
    app.open_address(address)
    await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample
                and app.screen.query("#field-view"), what=address)
    return app.screen


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_an_image_is_shown_whole_in_its_pane(size):
    """It showed 8 of its 24 rows at 80×24 (20 of 24 at 120×40): now scaled to the pane's room."""
    app = DsinspectApp()
    async with app.run_test(size=size) as pilot:
        screen = await open_field(pilot, app, "demo-images@v1:3")
        await until(pilot, lambda: screen.query("#image-picture"), what="the picture")
        await pilot.pause()
        pane, image = screen.query_one("#decoded"), screen.query_one("#image-picture")
        assert image.region.height >= 8 and image.region.height == image.styles.height.value
        assert pane.region.contains_region(image.region) and pane.max_scroll_y == 0  # nothing below the fold


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_trajectory_and_video_headers_are_one_readable_line(size):
    """The trajectory's title printed the whole Arrow type over 3 lines, its observation cells ended
    in "……", and a video's container read `mov,mp4,m4a,3gp,3g2,mj2`."""
    app = DsinspectApp()
    async with app.run_test(size=size) as pilot:
        screen = await open_field(pilot, app, "demo-rl@v1:0")
        await until(pilot, lambda: "observation" in screen_text(app) and "step 0 (" in screen_text(app),
                    what="the steps")
        title = screen.query_one(".field-title")
        assert title.region.height == 1 and "item:" not in screen_text(app)
        assert "trajectory · trajectory · struct<observation" in screen_text(app)
        cells = [line for line in screen_text(app).splitlines() if "[" in line and "…" in line]
        assert cells and not any(re.search(r"……|[,-] ?…(?!\])", line) for line in cells)  # one "…", after a value
        screen = await open_field(pilot, app, "demo-video@v1:0")
        await until(pilot, lambda: "h264" in screen_text(app), what="the video's line")
        assert "mp4 · h264 96x64" in screen_text(app) and "mov,mp4" not in screen_text(app)


def test_a_container_is_named_by_its_major_brand():
    from dsinspect.inspect.video import container_name

    mp4 = b"\0\0\0\x20ftypisom\0\0\2\0"
    assert container_name("mov,mp4,m4a,3gp,3g2,mj2", mp4) == "mp4"
    assert container_name("mov,mp4,m4a,3gp,3g2,mj2", b"\0\0\0\x14ftypqt  \0\0\0\0") == "mov"
    assert container_name("mov,mp4,m4a,3gp,3g2,mj2", b"\0\0\0\x14ftyp3gp5\0\0\0\0") == "3gp"
    assert container_name("mov,mp4,m4a,3gp,3g2,mj2", b"no box here") == "mov"
    assert container_name("matroska,webm", b"\x1a\x45\xdf\xa3") == "matroska" and container_name("avi", b"") == "avi"


@pytest.mark.asyncio
async def test_the_shards_tab_has_a_key():
    """Issue #31: samples, schema and history had keys (s, m, h); shards had none."""
    from textual.widgets import TabbedContent

    app = DsinspectApp(address="demo-text@v1")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable),
                    what="dataset")
        await pilot.press("S")
        await until(pilot, lambda: app.screen.query_one(TabbedContent).active == "shards", what="the shards tab")
        assert app.focused is app.screen.query_one("#shards-table") and "sha256" in screen_text(app)

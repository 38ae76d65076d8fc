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

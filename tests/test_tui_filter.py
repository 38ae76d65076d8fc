"""The filter box on the dataset screen (issue #20): `/` focuses it, an SQL condition over the query
view v (the syntax of `dsinspect query --where`) runs in a worker through the adapter, the matches page
like the full table and open their samples, a bad condition is one line in the UI, and Escape or an
empty box brings the full table back. The queries write derived values into the catalog: a copy."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import Input, TabbedContent
from tui_helpers import SIZE, screen_text, until

from dsinspect.inspect.query import VersionQuery
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.help import HELP
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.sample_table import SampleTable

CONDITION = "tokens_len > 100 AND lang = 'en'"


@pytest.fixture(scope="module")
def expected(sample_copy):
    """The indexes `dsinspect query --where CONDITION` finds (the core, not the UI)."""
    with VersionQuery(sample_copy.resolve("demo-text@v1")) as q:
        found = q.where(CONDITION, limit=1000)
    return [row[0] for row in found.rows]


async def open_dataset(pilot, app, address="demo-text@v1") -> DatasetScreen:
    app.open_address(address)
    await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query("#sample-table")
                and app.screen.query_one("#sample-table", SampleTable).row_cells(0), what="the full table")
    return app.screen


async def filtered(pilot, screen, condition: str) -> SampleTable:
    await until(pilot, lambda: screen.condition == condition and screen.query("#filter-table"),
                what=f"results of {condition}")
    table = screen.query_one("#filter-table", SampleTable)
    await until(pilot, lambda: table.num_rows == 0 or table.row_cells(0), what="the first page of results")
    return table


@pytest.mark.asyncio
async def test_slash_focuses_the_box_and_the_matches_open_their_samples(sample_copy, expected):
    source = DataSource(catalog=sample_copy)
    app = DsinspectApp(source=source)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dataset(pilot, app)
        assert "/ Filter" in screen_text(app)  # the key is in the footer
        await pilot.press("slash")
        box = screen.query_one("#filter", Input)
        assert app.focused is box
        await pilot.press(*CONDITION, "enter")  # letters are text in the box (s, m, h, d are screen keys)
        table = await filtered(pilot, screen, CONDITION)
        assert box.value == CONDITION and screen.query_one(TabbedContent).active == "samples"
        assert not screen.query_one("#sample-table").display  # the results replace the full table
        shown = [int(table.row_cells(i)[0]) for i in range(table.num_rows)]
        assert shown == expected and 0 < len(expected) < 240
        assert f"{len(expected)} of 240 samples match" in screen_text(app)
        assert table.columns[:4] == ["#", "text_chars", "text_bytes", "tokens_len"]  # derived values shown
        await pilot.press("down", "enter")  # the second match opens its own sample
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="the sample")
        assert app.screen.sample.index == expected[1]
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        assert screen.condition == CONDITION and screen.query_one("#filter-table", SampleTable).cursor == 1
        await pilot.press("escape")  # escape: back to the full table, the box empty
        await until(pilot, lambda: not screen.query("#filter-table"), what="the full table again")
        assert screen.query_one("#sample-table").display and box.value == "" and "samples match" not in \
            screen_text(app)
        assert app.focused is screen.query_one("#sample-table")
        await pilot.press("escape")  # and escape again leaves the screen
        await until(pilot, lambda: app.screen is not screen, what="back")
        assert len(source._queries) == 1  # one VersionQuery for the version, kept


@pytest.mark.asyncio
async def test_matches_page_like_the_full_table_and_clearing_the_box_returns_to_it(sample_copy):
    source = DataSource(catalog=sample_copy)
    app = DsinspectApp(source=source)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dataset(pilot, app)
        await pilot.press("m", "slash")  # from another tab: `/` brings the samples and the box
        assert screen.query_one(TabbedContent).active == "samples"
        await pilot.press(*"_index >= 3", "enter")
        table = await filtered(pilot, screen, "_index >= 3")
        assert table.num_rows == 237 and table.row_cells(200) is None  # one page of 128 came first
        await pilot.press("end")
        await until(pilot, lambda: table.row_cells(236), what="the last page")
        assert table.row_cells(236)[0] == "239" and table.row_cells(128)[0] == "131"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="the sample")
        assert app.screen.sample.index == 239
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await pilot.press("slash", "home", "ctrl+k")  # the box emptied by hand: the full table
        await until(pilot, lambda: not screen.query("#filter-table") and screen.query_one("#sample-table").display,
                    what="the full table")
        assert app.focused is screen.query_one("#filter", Input)  # still typing: the keys stay text
        await pilot.press("escape")  # out of the empty box: focus to the table, still this screen
        assert app.screen is screen and app.focused is screen.query_one("#sample-table")


@pytest.mark.asyncio
async def test_a_bad_condition_is_one_line_in_the_ui_never_a_traceback(sample_copy):
    app = DsinspectApp(source=DataSource(catalog=sample_copy))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_dataset(pilot, app)
        status = screen.query_one("#filter-status")
        for bad, says in [("nosuch_field > 1", "bad query"), ("1); DROP TABLE v; SELECT (1", "one SELECT"),
                          ("tokens_len >", "bad")]:
            await pilot.press("slash", "home", "ctrl+k", *bad, "enter")
            await until(pilot, lambda says=says: says in str(status.render()), what=f"the error of {bad!r}")
            line = str(status.render())
            assert "\n" not in line.strip() and "Traceback" not in screen_text(app), line
            assert app.screen is screen and not screen.query("#filter-table")
        await pilot.press("home", "ctrl+k", *"lang = 'el'", "enter")  # and a good one after them works
        table = await filtered(pilot, screen, "lang = 'el'")
        assert table.num_rows > 0 and "bad" not in str(status.render())


class HeldSource(DataSource):
    """The adapter with a filter that waits until the test sets `release`."""

    def __init__(self, catalog) -> None:
        super().__init__(catalog=catalog)
        self.release = threading.Event()

    def filter(self, *args, **kwargs):
        self.release.wait(30)
        return super().filter(*args, **kwargs)


@pytest.mark.asyncio
async def test_the_filter_runs_in_a_worker_the_table_moves_meanwhile(sample_copy):
    source = HeldSource(sample_copy)
    app = DsinspectApp(source=source)
    async with app.run_test(size=SIZE) as pilot:
        try:
            screen = await open_dataset(pilot, app)
            await pilot.press("slash", *"_index < 5", "enter")
            await until(pilot, lambda: "filtering" in screen_text(app), what="the filter under way")
            full = screen.query_one("#sample-table", SampleTable)
            full.focus()
            await pilot.press("down", "down")
            assert full.cursor == 2 and not screen.query("#filter-table")  # the UI did not wait
        finally:
            source.release.set()
        table = await filtered(pilot, screen, "_index < 5")
        assert table.num_rows == 5


def test_help_names_the_filter_key():
    assert "`/`" in HELP and "dsinspect query --where" in HELP


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_n_and_p_on_a_sample_opened_from_the_matches_step_through_the_matches(sample_copy, expected, size):
    """Issue #31: they stepped to the next index (49 → 50 → 51) when the next match was 77."""
    app = DsinspectApp(source=DataSource(catalog=sample_copy))
    async with app.run_test(size=size) as pilot:
        screen = await open_dataset(pilot, app)
        await pilot.press("slash", *CONDITION, "enter")
        await filtered(pilot, screen, CONDITION)
        assert any(b - a > 1 for a, b in zip(expected, expected[1:]))  # matches that are not neighbours
        await pilot.press("down", "enter")  # the second match
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="the sample")
        sample = app.screen
        seen = [sample.sample.index]
        for _ in range(3):
            await pilot.press("n")
            await until(pilot, lambda: sample.sample is not None and sample.sample.index != seen[-1]
                        and sample.wanted.index == sample.sample.index, what="the next match")
            seen.append(sample.sample.index)
        assert seen == expected[1:5]
        await pilot.press("p")
        await until(pilot, lambda: sample.sample is not None and sample.sample.index == expected[3], what="back one")
        for _ in range(3):
            await pilot.press("p")
        await until(pilot, lambda: sample.sample is not None and sample.sample.index == expected[0], what="the first")
        await pilot.press("p")  # before the first match: said, and the sample stays
        await until(pilot, lambda: any("no previous match" in n.message for n in app._notifications), what="the end")
        assert sample.sample.index == expected[0]

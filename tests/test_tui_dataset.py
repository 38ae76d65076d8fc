"""The dataset screen: schema with roles, shards, history, and a virtualised sample table that stays
responsive on a million-row version."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
from textual.widgets import DataTable, TabbedContent
from tui_helpers import SIZE, screen_text, until

from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.sample_table import PAGE_ROWS, SampleTable

MILLION = 1_000_000


@pytest.fixture(scope="module")
def million_catalog(tmp_path_factory):
    """A catalog holding one 10^6-row version of small rows (1,024-row row groups)."""
    catalog = Catalog(str(tmp_path_factory.mktemp("million")))
    ids = np.arange(MILLION, dtype=np.int64)
    labels = pa.array([f"row-{i}" for i in range(1000)]).take(pa.array(ids % 1000))  # "row-{id % 1000}"
    table = pa.table({"id": ids, "x": (ids % 997).astype(np.int32), "label": labels})
    catalog.write_version("big", table, [Field("id", pa.int64(), "scalar", nullable=False),
                                         Field("x", pa.int32(), "scalar"), Field("label", pa.string(), "scalar")],
                          tags=["v1"], message="a million small rows")
    return catalog


async def open_dataset(pilot, app, address):
    app.open_address(address)
    await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable), what="table")
    table = app.screen.query_one(SampleTable)
    await until(pilot, lambda: table.row_cells(table.cursor) is not None, what="first page")
    return table


@pytest.mark.asyncio
async def test_schema_shards_and_history_tabs():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await open_dataset(pilot, app, "demo-text@v2")
        screen = app.screen
        text = screen_text(app)
        assert "242 rows" in text and "5 shards" in text and "key doc_id" in text
        await pilot.press("m")
        assert screen.query_one(TabbedContent).active == "schema"
        schema = screen.query_one("#schema-table", DataTable)
        rows = [schema.get_row_at(i) for i in range(schema.row_count)]
        assert [(r[0], r[1]) for r in rows] == [("doc_id (key)", "scalar"), ("lang", "scalar"), ("text", "text"),
                                               ("tokens", "tokens")]
        assert "huggingface" in rows[3][4]  # the tokenizer option
        shards = screen.query_one("#shards-table", DataTable)
        assert shards.row_count == 5
        await pilot.press("h")
        history = screen.query_one("#history-table", DataTable)
        assert history.row_count == 2 and history.get_row_at(0)[0] == "●"  # v2 is the newest and current
        await pilot.press("s")
        assert screen.query_one(TabbedContent).active == "samples"


@pytest.mark.asyncio
async def test_page_through_samples_and_open_one():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_dataset(pilot, app, "demo-text@v1")
        assert table.row_cells(0)[:3] == ["0", "0", "en"]
        await pilot.press("pagedown", "pagedown", "down")
        assert table.cursor == 2 * table.visible_rows + 1
        await pilot.press("end")
        assert table.cursor == 239
        await until(pilot, lambda: "Meeting transcript" in screen_text(app))
        await pilot.press("home", "down", "enter")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample)
        assert app.screen.sample.index == 1


@pytest.mark.asyncio
async def test_million_rows_fetches_pages_by_row_group_and_stays_responsive(million_catalog):
    app = DsinspectApp(source=DataSource(catalog=million_catalog))
    async with app.run_test(size=SIZE) as pilot:
        table = await open_dataset(pilot, app, "big@v1")
        assert table.num_rows == MILLION
        started = time.perf_counter()
        await pilot.press("end")  # the last row: one row group read, not a million rows
        await until(pilot, lambda: table.row_cells(MILLION - 1) is not None, timeout=5, what="last page")
        assert table.row_cells(MILLION - 1)[:3] == ["999999", "999999", str(999999 % 997)]
        for _ in range(20):  # scroll on; every key is handled while pages load in workers
            await pilot.press("pageup")
        await until(pilot, lambda: table.row_cells(table.cursor) is not None, timeout=5)
        await pilot.press("home")
        for _ in range(30):
            await pilot.press("pagedown")
        await until(pilot, lambda: table.row_cells(table.cursor) is not None, timeout=5)
        elapsed = time.perf_counter() - started
        assert elapsed < 20, elapsed  # generous: two busy cores; typically well under 2 s
        assert len(table._pages) <= 64  # memory stays bounded
        app.open_address("big@v1:543210")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample)
        assert app.screen.sample.index == 543210


def test_adapter_rows_reads_only_the_row_groups_it_needs(million_catalog):
    source = DataSource(catalog=million_catalog)
    version = source.version("big@v1")
    page = source.rows(version, 500_000, PAGE_ROWS)
    assert page.start == 500_000 and len(page.cells) == PAGE_ROWS
    assert page.cells[0] == ["500000", "500000", str(500_000 % 997), "row-0"]
    assert len(source._groups) <= 2  # a page spans at most two 1,024-row groups
    assert source.rows(version, MILLION - 3, PAGE_ROWS).cells[-1][0] == str(MILLION - 1)

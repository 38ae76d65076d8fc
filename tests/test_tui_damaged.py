"""A dataset whose tags.json is damaged (issue #31: the TUI sat on "reading the manifest…" with no
word): a tag cannot be resolved, and the screen says so where "loading…" was; the versions stay
reachable by id, from the catalog's Enter or an address, with their tags shown as unknown."""

from __future__ import annotations

import shutil

import pytest
from textual.widgets import OptionList
from tui_helpers import screen_text, until

from dsinspect.defaults import BUNDLED
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.catalog import CatalogScreen
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.widgets.sample_table import SampleTable

SIZES = [(80, 24), (120, 40)]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("damaged") / "catalog"
    shutil.copytree(BUNDLED, root)
    (root / "datasets" / "demo-text" / "tags.json").write_text('{"latest": "6f47')  # cut mid-write
    return str(root)


def flat(app) -> str:
    """The screen's words, wrapped lines joined (a long line wraps at 80 columns)."""
    return " ".join(screen_text(app).split())


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_a_tag_of_a_dataset_with_a_damaged_tags_json_says_why_on_the_screen(damaged, size):
    app = DsinspectApp(source=DataSource(damaged), address="demo-text@latest")
    async with app.run_test(size=size) as pilot:
        # on the screen itself, not only in the notification (posted first)
        await until(pilot, lambda: "nothing to show" in flat(app), what="the failure on the screen")
        assert isinstance(app.screen, DatasetScreen)
        text, said = flat(app), str(app.screen.query_one("#summary").render())
        assert "could not open demo-text@latest" in text  # on screen; the path wraps anywhere at 80 columns
        assert said.startswith("could not open demo-text@latest: ") and "tags.json: not valid JSON" in said
        assert "reading the manifest" not in text and "loading…" not in text


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_catalog_opens_the_newest_version_of_a_dataset_whose_tags_json_is_damaged(damaged, size):
    app = DsinspectApp(source=DataSource(damaged))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="listing")
        names = [d["name"] for d in app.screen.listing["datasets"]]
        app.screen.query_one("#datasets", OptionList).highlighted = names.index("demo-text")
        await until(pilot, lambda: "versions of demo-text" in screen_text(app), what="demo-text's versions")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable),
                    what="the newest version's samples")
        assert app.screen.info["rows"] == 242 and "tags: unknown: tags.json cannot be read" in flat(app)


@pytest.mark.asyncio
async def test_an_id_prefix_resolves_beside_a_damaged_tags_json(damaged):
    source = DataSource(damaged)
    newest = max(source.catalog.versions("demo-text"), key=lambda v: v.manifest.meta["created_at"])
    assert source.catalog.resolve(f"demo-text@{newest.id[:12]}").id == newest.id
    assert source.info(newest)["tags"] == [] and "not valid JSON" in source.info(newest)["tags_error"]

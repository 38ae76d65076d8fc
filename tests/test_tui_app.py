"""The terminal UI's shell and catalog screen, driven by Textual's Pilot on the sample catalog."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from textual.widgets import DataTable, Input, OptionList
from tui_helpers import SIZE, downs_to, screen_text, until

from dsinspect.defaults import BUNDLED
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.catalog import CatalogScreen
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.goto import GoToScreen
from dsinspect.tui.screens.help import HelpScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.field_view import FieldView

_SAMPLES = json.loads((BUNDLED / "sample-data.json").read_text())["datasets"]
IMAGES_V2, TEXT_V1, TEXT_V2 = (_SAMPLES[n][v][:12] for n, v in
                               (("demo-images", "v2"), ("demo-text", "v1"), ("demo-text", "v2")))


def notes(app) -> list[str]:
    return [n.message for n in app._notifications]


@pytest.mark.asyncio
async def test_opens_on_the_catalog_with_datasets_versions_and_tags():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="listing")
        text = screen_text(app)
        for name in ("demo-images", "demo-rl", "demo-text", "demo-video"):
            assert name in text
        assert IMAGES_V2 in text and "latest, v2" in text and f"tags: latest → {IMAGES_V2}" in text
        # the footer shows the bindings (drawn a frame later on a busy machine)
        await until(pilot, lambda: "g Go to" in screen_text(app) and "? Help" in screen_text(app), what="footer")
        await pilot.press(*downs_to(app, "demo-text"))
        await until(pilot, lambda: "versions of demo-text" in screen_text(app))
        table = app.screen.query_one("#versions", DataTable)
        assert table.row_count == 2
        assert [c.label.plain for c in table.columns.values()] == [
            "version", "tags", "parent", "created", "rows", "bytes", "shards", "message"]
        await until(pilot, lambda: TEXT_V2 in screen_text(app) and "242" in screen_text(app))
        await pilot.press("tab")  # into the versions table (enter on a dataset opens its latest version)
        await pilot.press("down", "enter")  # v1
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen))
        assert app.screen.address.startswith(f"demo-text@{TEXT_V1}")


@pytest.mark.asyncio
async def test_help_screen_opens_and_closes():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert "NAME[@REF][:INDEX]" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen))


@pytest.mark.asyncio
async def test_goto_prompt_opens_a_sample_and_refuses_a_bad_address():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GoToScreen))
        await pilot.press(*"demo-text@@", "enter")
        assert isinstance(app.screen, GoToScreen)  # a malformed address stays in the prompt, explained
        assert "bad address" in screen_text(app)
        app.screen.query_one(Input).value = "demo-text@v1:17"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="sample")
        assert app.screen.sample.index == 17
        await pilot.press("escape")
        assert isinstance(app.screen, DatasetScreen)


@pytest.mark.asyncio
async def test_unknown_dataset_is_a_notification_not_a_crash():
    app = DsinspectApp(address="no-such-dataset@v1:3")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: notes(app), what="a notification")
        assert any("no-such-dataset" in n for n in notes(app))
        assert app.is_running
        app.open_address("demo-text@v1:99999")  # out of range
        await until(pilot, lambda: any("out of range" in n for n in notes(app)))
        app.open_address("bad address!")
        await until(pilot, lambda: any("bad" in n for n in notes(app)[2:]))
        assert app.is_running


@pytest.mark.asyncio
async def test_command_palette_lists_datasets_and_opens_one():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.dataset_names)
        await pilot.press("ctrl+p")
        await pilot.press(*"open demo-rl")
        await until(pilot, lambda: "Open demo-rl" in screen_text(app), what="palette hit")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.info, what="dataset")
        assert app.screen.info["name"] == "demo-rl"


@pytest.mark.asyncio
async def test_start_address_with_index_opens_dataset_then_sample():
    app = DsinspectApp(address="demo-images@v1:5")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample)
        assert [type(s).__name__ for s in app.screen_stack[1:]] == ["CatalogScreen", "DatasetScreen", "SampleScreen"]
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.info)
        assert app.screen.query_one("SampleTable").cursor == 5


class HeldSource(DataSource):
    """A remote that does not answer: `sample()` blocks until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def sample(self, address):
        self.release.wait(30)
        return super().sample(address)


@pytest.mark.asyncio
async def test_a_slow_read_never_freezes_the_ui():
    source = HeldSource()
    app = DsinspectApp(source=source, address="demo-text@v1:0")
    async with app.run_test(size=SIZE) as pilot:
        try:
            await until(pilot, lambda: isinstance(app.screen, SampleScreen), what="sample screen")
            screen = app.screen
            await pilot.press("question_mark")  # keys still work while the read hangs in its worker
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help over a pending read")
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen and "reading" in screen_text(app))
            assert screen.sample is None
        finally:
            source.release.set()
        await until(pilot, lambda: screen.sample is not None and screen.query(FieldView), what="the late sample")


@pytest.mark.asyncio
async def test_mouse_picks_a_field_and_opens_a_catalog_version():
    app = DsinspectApp(address="demo-text@v1:0")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.query(FieldView), what="sample")
        screen = app.screen
        fields = screen.query_one("#fields", OptionList)
        names = [f.name for f in screen.sample.fields]
        target = names.index("text")  # each option is two lines (name, role and size) below the list's top edge
        await pilot.click(fields, offset=(4, 1 + 2 * target))
        await until(pilot, lambda: screen.query_one(FieldView).prepared.info.name == "text", what="clicked field")
        app.action_catalog()
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="catalog")
        versions = app.screen.query_one("#versions", DataTable)
        await until(pilot, lambda: versions.row_count == 2, what="versions")
        await pilot.click(versions, offset=(3, 2))  # the second row (older version): the cursor moves there
        await until(pilot, lambda: versions.cursor_row == 1, what="row clicked")
        await pilot.click(versions, offset=(3, 2))  # a click on the highlighted row selects it
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen), what="version opened by mouse")
        assert app.screen.address.endswith("@" + app.screen_stack[-2].query_one("#versions", DataTable)
                                           .coordinate_to_cell_key((1, 0)).row_key.value)


@pytest.mark.asyncio
async def test_a_broken_manifest_is_listed_as_broken_beside_the_intact_datasets(tmp_path):
    """One truncated manifest once made the listing fail as a whole: no dataset showed at all."""
    import shutil

    from dsinspect.defaults import BUNDLED
    from dsinspect.loaders.store.catalog import Catalog

    shutil.copytree(BUNDLED, tmp_path / "catalog")
    vid = Catalog(str(tmp_path / "catalog")).resolve("demo-video@v1").id
    path = tmp_path / "catalog" / "datasets" / "demo-video" / "versions" / f"{vid}.json"
    path.write_bytes(path.read_bytes()[:300])
    app = DsinspectApp(source=DataSource(str(tmp_path / "catalog")))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "demo-video  (1 ok, 1 broken)" in screen_text(app), what="listing")
        text = screen_text(app)
        for name in ("demo-images  (2 versions)", "demo-rl  (2 versions)", "demo-text  (2 versions)"):
            assert name in text
        assert any("cannot be read" in n and str(path) in n for n in notes(app))
        await pilot.press(*downs_to(app, "demo-video"))
        await until(pilot, lambda: "versions of demo-video" in screen_text(app))
        table = app.screen.query_one("#versions", DataTable)
        assert table.row_count == 2
        broken_row = [c.plain if hasattr(c, "plain") else c for c in table.get_row_at(1)]
        assert broken_row[0] == vid[:12] and broken_row[1] == "v1" and broken_row[-1].startswith("BROKEN: ")
        await pilot.press("tab", "down")  # highlighted: the whole reason under the table (the column is cut)
        under = app.screen.query_one("#version-message")
        await until(pilot, lambda: "BROKEN: " in str(under.content), what="the broken entry's reason")
        assert str(path) in str(under.content) and "not valid JSON" in str(under.content)
        await pilot.press("enter")  # selecting the broken row explains, opens nothing
        await until(pilot, lambda: any(n.startswith("cannot open") for n in notes(app)), what="refusal")
        assert isinstance(app.screen, CatalogScreen)


def test_tui_package_imports_neither_web_nor_textual_eagerly():
    code = ("import sys, dsinspect.tui; assert 'textual' not in sys.modules; "
            "import dsinspect.tui.app; assert not any(m.startswith('dsinspect.web') for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dsinspect_without_a_terminal_lists_instead_of_opening_the_ui():
    done = subprocess.run([sys.executable, "-m", "dsinspect"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60)
    assert done.returncode == 0 and "demo-text" in done.stdout


@pytest.mark.parametrize("args", [("tui",), ("tui", "demo-text@v1:3"), ("tui", "nosuch")])
def test_tui_without_a_terminal_is_one_line_exit_2(args):
    """Without a terminal the UI never got a key and never exited (one run spun at ~74% CPU for 10
    minutes): refused at once. The timeout only bounds a hang; a refusal takes a few seconds."""
    done = subprocess.run([sys.executable, "-m", "dsinspect", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "needs a terminal" in done.stderr and "dsinspect show" in done.stderr
    assert done.stdout == ""


def test_entry_point_freezes_startup_objects_before_the_app_exists():
    """`run` hands the cyclic collector's full passes only what the UI creates: what is alive before the
    app (modules, the catalog) is frozen, the app itself is not (it must stay collectable)."""
    code = """
import gc
from dsinspect.tui import app as app_module, run
seen = {}
def fake_run(self):
    seen["frozen"] = gc.get_freeze_count()
    seen["app_tracked"] = any(o is self for o in gc.get_objects())
app_module.DsinspectApp.run = fake_run
before = gc.get_freeze_count()
run()
print(before, seen["frozen"] > 10_000, seen["app_tracked"])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "True", "True"]


@pytest.mark.asyncio
async def test_the_palette_has_statistics_and_one_help():
    """It had no statistics entry, and two helps: ours and Textual's "Keys" (issue #31)."""
    from dsinspect.tui.screens.stats import StatsScreen

    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.dataset_names, what="listing")
        await pilot.press("ctrl+p")
        await until(pilot, lambda: "Go to address" in screen_text(app), what="the palette's entries")
        text = screen_text(app)
        assert "Statistics" in text and "Help" in text and "Keys" not in text
        await pilot.press(*"statis", "enter")  # on the catalog: which version is asked for
        await until(pilot, lambda: isinstance(app.screen, GoToScreen), what="the version prompt")
        assert "Statistics of a version" in screen_text(app)
        await pilot.press(*"demo-text@v1", "enter")
        await until(pilot, lambda: isinstance(app.screen, StatsScreen), what="statistics")
        assert app.screen.a == "demo-text@v1" and app.screen.b is None
        app.open_address("demo-images@v2")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.info, what="dataset")
        await pilot.press("ctrl+p")
        await until(pilot, lambda: "Go to address" in screen_text(app), what="the palette")
        await pilot.press(*"statis", "enter")  # on a dataset screen: that version's statistics at once
        await until(pilot, lambda: isinstance(app.screen, StatsScreen), what="the version's statistics")
        assert app.screen.a == f"demo-images@{app.screen_stack[-2].info['id']}"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_a_dataset_of_one_version_says_1_version(tmp_path, size):
    import pyarrow as pa

    from dsinspect.loaders.format.manifest import Field
    from dsinspect.loaders.store.catalog import Catalog

    catalog = Catalog(str(tmp_path / "catalog"))
    fields = [Field("id", pa.int64(), "scalar", nullable=False)]
    catalog.write_version("single", [{"id": 1}], fields)
    catalog.write_version("pair", [{"id": 1}], fields)
    catalog.write_version("pair", [{"id": 2}], fields)
    app = DsinspectApp(source=DataSource(catalog=catalog))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: "single  (1 version)" in screen_text(app), what="the dataset list")
        assert "pair  (2 versions)" in screen_text(app) and "(1 versions)" not in screen_text(app)

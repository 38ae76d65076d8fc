"""Rough edges a newcomer hit in the terminal UI (issue #20), each pinned by a test: one Enter opens a
catalog version, a slow sample never shows the previous one under its title, the diff prompt is
centred, screen keys on the replay form, 0-based step numbers, `x` hides only the hex, a readable
version message, wide scripts in the sample table, and partial UTF-8 token pieces."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import OptionList
from tui_helpers import SIZE, downs_to, screen_text, until

from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.field_view import FieldView
from dsinspect.tui.widgets.sample_table import SampleTable


async def open_sample(pilot, app, address: str, field: str | None = None) -> SampleScreen:
    app.open_address(address)
    await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample
                and app.screen.query(FieldView), what=f"sample {address}")
    screen = app.screen
    if field is not None:
        names = [f.name for f in screen.sample.fields]
        screen.query_one("#fields", OptionList).highlighted = names.index(field)
        await until(pilot, lambda: screen.query_one(FieldView).prepared.info.name == field, what=f"field {field}")
    await until(pilot, lambda: screen.query_one("#raw-body").content, what="hashes and hex")
    return screen


# -- 2: a sample that is slow to read never shows the previous one under its title ----------------

class HeldSource(DataSource):
    """The adapter with a slow `sample()` for the addresses in `held`, until the test sets `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()
        self.release = threading.Event()

    def sample(self, address):
        if str(address) in self.held:
            self.release.wait(30)
        return super().sample(address)


@pytest.mark.asyncio
async def test_a_slow_sample_shows_its_own_title_and_a_placeholder_never_the_previous_sample():
    source = HeldSource()
    app = DsinspectApp(source=source)
    async with app.run_test(size=SIZE) as pilot:
        a = await open_sample(pilot, app, "demo-text@v1:2", "text")
        a_sample = a.sample
        a_marks = ["Tiny changelog", a_sample.address, a_sample.row_hash.stored, a_sample.field("text").hash]
        assert all(m in screen_text(app) for m in a_marks[:2])
        await pilot.press("escape")
        app.open_address("demo-video@v1")  # the video dataset's table, as a person would go there
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable)
                    and app.screen.query_one(SampleTable).row_cells(1), what="the video table")
        version = app.screen.version
        source.held.add(f"demo-video@{version.id}:1")
        b = f"demo-video@{version.id[:12]}:1"  # as a sample's title shows it

        frames: list[str] = []  # every frame the sample screen sends to the terminal while B is read
        display = app._display

        def spy(screen, renderable):
            display(screen, renderable)
            if renderable is not None and not app._batch_count and isinstance(app.screen, SampleScreen) \
                    and not source.release.is_set():
                frames.append(screen_text(app))

        app._display = spy
        try:
            await pilot.press("down", "enter")
            await until(pilot, lambda: isinstance(app.screen, SampleScreen), what="the sample screen")
            screen = app.screen
            assert screen is a  # the reused screen: the one that showed A
            for _ in range(5):  # frames keep coming (a resize, a refresh) while the read is held
                await pilot.pause(0.05)
                frames.append(screen_text(app))
                screen.refresh(layout=True)
            await pilot.resize_terminal(110, 34)
            await pilot.pause(0.05)
            frames.append(screen_text(app))
        finally:
            source.release.set()
        assert frames
        for frame in frames:
            assert b in frame.splitlines()[0], frame  # B's address in the title
            assert f"reading {b}" in frame, frame  # and a placeholder
            assert not [m for m in a_marks if m in frame], frame  # nothing of A
        await until(pilot, lambda: screen.sample is not None and screen.sample.address.endswith(":1")
                    and screen.query(FieldView), what="B shown")
        await until(pilot, lambda: "reading" not in screen_text(app), what="the placeholder gone")
        text = screen_text(app)
        assert b in text.splitlines()[0] and not [m for m in a_marks if m in text]


@pytest.mark.asyncio
async def test_a_late_read_of_a_sample_left_behind_is_not_shown():
    """Next, next: the first read finishing after the second must not replace it."""
    source = HeldSource()
    app = DsinspectApp(source=source)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_sample(pilot, app, "demo-text@v1:2")
        source.held.add(f"demo-text@{screen.addr.ref}:3")
        first = f"demo-text@{screen.addr.ref[:12]}:3"
        await pilot.press("n")  # sample 3: held
        await until(pilot, lambda: f"reading {first}" in screen_text(app), what="placeholder of 3")
        await pilot.press("n")  # sample 4: not held
        await until(pilot, lambda: screen.sample.index == 4 and "reading" not in screen_text(app), what="sample 4")
        source.release.set()
        await pilot.pause(0.3)
        assert screen.sample.index == 4 and screen.addr.index == 4


# -- 6: `x` hides the hex, never the hashes -----------------------------------------------------

@pytest.mark.asyncio
async def test_x_hides_the_hex_dumps_and_keeps_the_hashes():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_sample(pilot, app, "demo-text@v1:0", "text")
        field_hash = screen.sample.field("text").hash
        await until(pilot, lambda: " bytes (" in screen_text(app), what="hex")
        await pilot.press("x")
        await until(pilot, lambda: " bytes (" not in screen_text(app), what="hex hidden")
        text = screen_text(app)
        assert "field hash (xxh3-128) " + field_hash in text and "row hash" in text
        await pilot.press("x")
        await until(pilot, lambda: " bytes (" in screen_text(app), what="hex shown again")


# -- 5: step and frame numbers are 0-based, as in the data and `dsinspect show` ---------------------

@pytest.mark.asyncio
async def test_trajectory_steps_and_video_frames_are_numbered_from_0_like_the_table_and_the_cli():
    from dsinspect.tui.widgets.step_rows import StepRowsView

    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_sample(pilot, app, "demo-rl@v1:2", "trajectory")
        table = screen.query_one("#steps", StepRowsView)
        await until(pilot, lambda: "step 0 (0..119)" in screen_text(app), what="marker on the first step")
        await pilot.press("tab", "down", "down")
        await until(pilot, lambda: "step 2 (0..119)" in screen_text(app), what="marker on step 2")
        assert table.row_texts(table.cursor_row)[0] == "2"  # the step column says the same number
        await pilot.press("end")
        await until(pilot, lambda: "step 119 (0..119)" in screen_text(app), what="the last step")
        view = screen.sample.view("trajectory")
        assert table.row_texts(119)[0] == "119" and view.page(-1).rows[-1].step == 119
        screen = await open_sample(pilot, app, "demo-video@v1:1", "video")
        await until(pilot, lambda: "frame 0 (0..17)" in screen_text(app), what="the first frame")
        await pilot.press("full_stop")
        await until(pilot, lambda: "frame 1 (0..17)" in screen_text(app), what="the next frame")


# -- 9: a token piece that is part of a character is escaped once -------------------------------

@pytest.mark.asyncio
async def test_a_partial_utf8_token_piece_is_shown_escaped_once():
    from dsinspect.tui.widgets.token_strip import TokenStrip

    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_sample(pilot, app, "demo-text@v1:2", "tokens")
        strip = screen.query_one(TokenStrip)
        partial = next(p for p in strip.view.pieces(0, len(strip.view.ids)) if p.partial)
        assert partial.display == " \\xf0\\x9f\\x93"  # the first bytes of 📝: the core escapes them once
        await pilot.press("tab", *["right"] * partial.position)
        await until(pilot, lambda: f"token #{partial.position} " in screen_text(app), what="cursor on the piece")
        line = next(t for t in screen_text(app).splitlines() if f"token #{partial.position} " in t)
        assert "piece ' \\xf0\\x9f\\x93' partial" in line, line
        assert "\\\\x" not in screen_text(app)


# -- 1: one Enter on a dataset opens it, and the footer says what Enter does ----------------------

@pytest.mark.asyncio
async def test_one_enter_on_a_dataset_opens_its_latest_version_and_the_footer_says_so():
    from dsinspect.tui.screens.catalog import CatalogScreen

    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="listing")
        await until(pilot, lambda: "⏎ Open dataset" in screen_text(app), what="the key hint")
        await pilot.press(*downs_to(app, "demo-text"))
        await until(pilot, lambda: "versions of demo-text" in screen_text(app), what="demo-text highlighted")
        catalog = app.screen
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.info, what="one enter opens")
        latest = catalog.dataset("demo-text")["tags"]["latest"]
        assert app.screen.info["name"] == "demo-text" and app.screen.info["id"] == latest
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is catalog)
        await pilot.press("tab")  # the versions: their own hint
        await until(pilot, lambda: "⏎ Open version" in screen_text(app), what="the versions' key hint")


# -- 3: the diff prompt is centred ---------------------------------------------------------------

@pytest.mark.asyncio
async def test_the_diff_prompt_is_centred_on_the_screen():
    from dsinspect.tui.screens.diff_prompt import DiffPrompt

    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, DiffPrompt) and app.screen.query_one("#goto-box").region,
                    what="the diff prompt")
        await pilot.pause(0.05)
        box = app.screen.query_one("#goto-box").region
        width, height = SIZE
        assert box.width < width and box.height < height
        assert abs((box.x + box.right) - width) <= 1 and abs((box.y + box.bottom) - height) <= 1, box
        assert box.y > 1  # not over the header


# -- 8: wide scripts keep the sample table's columns in line ---------------------------------------

WIDE_ROWS = [
    {"id": 0, "text": "plain ascii text that is rather long indeed", "label": "a"},
    {"id": 1, "text": "안녕하세요 세계 한국어 텍스트입니다 아주 길어요", "label": "한국어"},
    {"id": 2, "text": "emoji 😀🎉👍🏽 ok and more emoji 🎉🎉🎉🎉🎉🎉🎉", "label": "😀😀"},
    {"id": 3, "text": "مرحبا بالعالم هذا نص عربي طويل جدا جدا", "label": "عربي"},
    {"id": 4, "text": "日本語のテキストはとても長いです。日本語のテキスト",
     "label": "日本語のラベルがとても長いです。とても長い"},
    {"id": 5, "text": "control \x1b[31m characters", "label": "x"},
]


@pytest.fixture
def wide_source(tmp_path):
    import pyarrow as pa

    from dsinspect.loaders.format.manifest import Field
    from dsinspect.loaders.store.catalog import Catalog

    catalog = Catalog(str(tmp_path / "catalog"))
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text"),
              Field("label", pa.string(), "scalar")]
    catalog.write_version("wide", WIDE_ROWS, fields, tags=["v1"])
    return DataSource(catalog=catalog)


@pytest.mark.asyncio
async def test_wide_scripts_are_measured_in_terminal_cells_and_keep_the_columns_in_line(wide_source):
    from rich.cells import cell_len

    from dsinspect.term import clean

    app = DsinspectApp(source=wide_source, address="wide@v1")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable)
                    and app.screen.query_one(SampleTable).row_cells(0), what="the table")
        table = app.screen.query_one(SampleTable)
        await pilot.pause(0.05)
        widths = table._widths
        cuts, at = [], 0
        for w in widths:
            at += w + 1  # the column, then the space between columns
            cuts.append(at)
        lines = [table.render_line(y) for y in range(len(WIDE_ROWS) + 1)]
        for y, strip in enumerate(lines):
            assert strip.cell_length == table.scrollable_content_region.width
            text = strip.text
            assert "\x1b" not in text
            columns = [s.text for s in strip.divide(cuts)][:len(widths)]
            for column, w in zip(columns, widths):
                assert cell_len(column) == w + 1 and column.endswith(" "), (y, column)  # the separator, in line
            if y:
                row = WIDE_ROWS[y - 1]
                for column, value in zip(columns[2:], (clean(row["text"]), clean(row["label"]))):
                    shown = column.rstrip()
                    # a value that does not fit is cut on cell width and says so; one that fits is whole
                    assert shown == value or (shown.endswith("…") and value.startswith(shown[:-1].rstrip())), (y, shown)
        text = screen_text(app)
        assert "안녕하세요" in text and "…" in text


# -- the catalog's version messages: the column takes the width left, the whole message under it ----

LONG_V1 = ("first import of the support tickets from the March export, deduplicated by ticket id, with the "
           "attachments dropped and the customer names replaced by stable pseudonyms; see ops/ingest.md")
LONG_V2 = ("relabelled 312 tickets after the taxonomy review (billing split into refunds and invoices), and "
           "removed the 14 tickets that were test traffic from the staging environment")


@pytest.fixture
def long_messages(tmp_path):
    import pyarrow as pa

    from dsinspect.loaders.format.manifest import Field
    from dsinspect.loaders.store.catalog import Catalog

    catalog = Catalog(str(tmp_path / "catalog"))
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("label", pa.string(), "scalar")]
    v1 = catalog.write_version("tickets", [{"id": i, "label": "a"} for i in range(3)], fields, tags=["v1"],
                               message=LONG_V1)
    catalog.write_version("tickets", [{"id": i, "label": "b"} for i in range(4)], fields, tags=["v2"],
                          message=LONG_V2, parent=v1.id)
    return DataSource(catalog=catalog)


def widget_text(app, widget) -> str:
    """The words a widget shows on the screen (its lines joined)."""
    region = widget.region
    lines = screen_text(app).splitlines()[region.y:region.bottom]
    return " ".join(" ".join(line[region.x:region.right].split()) for line in lines).strip()


def fitted(table) -> bool:
    """The versions table's columns reach the right edge and no further (no horizontal scroll)."""
    width = sum(c.get_render_width(table) for c in table.columns.values())
    return table.max_scroll_x == 0 and width == table.scrollable_content_region.width - 1


@pytest.mark.asyncio
async def test_a_long_version_message_fills_the_column_and_is_readable_in_full_at_120_columns(long_messages):
    from textual.widgets import DataTable

    from dsinspect.tui.screens.catalog import CatalogScreen

    app = DsinspectApp(source=long_messages)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="listing")
        screen = app.screen
        table = screen.query_one("#versions", DataTable)
        under = screen.query_one("#version-message")
        await until(pilot, lambda: LONG_V2 in widget_text(app, under), what="the newest version's message")
        column = table.columns["message"]
        await until(pilot, lambda: fitted(table), what="the columns to the edge")  # the table lays out when idle
        assert column.width >= 12
        cell = str(table.get_cell_at((0, len(table.columns) - 1)))
        assert cell.endswith("…") and LONG_V2.startswith(cell[:-1]) and len(cell) == column.width
        assert cell in screen_text(app)  # the column is on the screen, not scrolled off to the right
        await pilot.press("tab", "down")  # the older version: its message, in full
        await until(pilot, lambda: LONG_V1 in widget_text(app, under), what="the highlighted version's message")
        assert "created" in widget_text(app, under) and LONG_V2 not in widget_text(app, under)
        narrow = column.width
        await pilot.resize_terminal(160, 36)  # wider: the message column takes the new room
        await until(pilot, lambda: table.columns["message"].width >= narrow + 39, what="a wider column")
        assert table.max_scroll_x == 0


@pytest.mark.asyncio
async def test_the_message_column_fits_a_dataset_with_wider_cells_without_a_resize(long_messages):
    """The other columns are measured from their cells when the rows go in: the table's own widths
    catch up only when it is idle, after the fit (CI saw the column 17 cells too wide)."""
    from textual.widgets import DataTable

    from dsinspect.tui.screens.catalog import CatalogScreen

    catalog = long_messages.catalog
    wide_tag = "candidate-for-the-december-release"
    fields = catalog.resolve("tickets").manifest.fields
    catalog.write_version("zebra", [{"id": 1, "label": "x"}], fields, tags=[wide_tag], message=LONG_V2)
    app = DsinspectApp(source=DataSource(catalog=catalog))
    async with app.run_test(size=(160, 40)) as pilot:  # room for the wide tag and a message column
        await until(pilot, lambda: isinstance(app.screen, CatalogScreen) and app.screen.listing, what="listing")
        screen = app.screen
        table = screen.query_one("#versions", DataTable)
        await until(pilot, lambda: table.row_count == 2, what="the first dataset's versions")
        await pilot.pause()
        await pilot.press("down")  # the other dataset: wider tags, and no resize to set the width again
        await until(pilot, lambda: screen.current == "zebra" and table.row_count == 1, what="zebra's version")
        await pilot.pause()
        assert wide_tag in screen_text(app)
        await until(pilot, lambda: fitted(table), what="the columns to the edge")
        await pilot.pause(0.2)
        assert fitted(table)  # and it stays so: no resize comes to set it again

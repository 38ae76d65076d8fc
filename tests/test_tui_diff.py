"""The diff screens: two versions' summary, schema changes and changed rows, and one changed row
before and after, side by side."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input
from tui_helpers import SIZE, screen_text, until

from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.diff import DiffScreen
from dsinspect.tui.screens.diff_prompt import DiffPrompt
from dsinspect.tui.screens.row_diff import RowDiffScreen
from dsinspect.tui.widgets.field_view import FieldView


@pytest.mark.asyncio
async def test_diff_a_version_against_its_parent_and_open_a_changed_row():
    app = DsinspectApp(address="demo-text@v2")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: getattr(app.screen, "info", None))
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.result, what="diff")
        text = screen_text(app)
        assert "3 added, 1 removed, 2 changed" in text and "2 shared, 3 added, 2 removed" in text
        assert "no schema changes" in text
        rows = app.screen.query_one("#row-changes", DataTable)
        assert [rows.get_row_at(i)[0] for i in range(rows.row_count)] == ["changed"] * 2 + ["added"] * 3 + ["removed"]
        await pilot.press("enter")  # the first changed row
        await until(pilot, lambda: isinstance(app.screen, RowDiffScreen) and len(app.screen.query(FieldView)) == 4,
                    what="before/after views")
        before, after = app.screen.query_one("#before"), app.screen.query_one("#after")
        assert [f.prepared.info.name for f in before.query(FieldView)] == ["text", "tokens"]
        assert before.query(FieldView).first().prepared.view.chars == 188
        assert after.query(FieldView).first().prepared.view.chars == 125
        await pilot.press("escape")
        assert isinstance(app.screen, DiffScreen)
        app.screen.query_one("#row-changes", DataTable).move_cursor(row=5)  # removed: only a "before"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RowDiffScreen) and "absent on this side" in screen_text(app))


@pytest.mark.asyncio
async def test_diff_prompt_takes_two_addresses_and_refuses_bad_ones():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, DiffPrompt))
        await pilot.press(*"demo-images@v1", "enter", *"bad@@", "enter")
        assert isinstance(app.screen, DiffPrompt) and "bad address" in screen_text(app)
        app.screen.query_one("#diff-b", Input).value = "demo-images@v2"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.result, what="diff")
        await until(pilot, lambda: "2 changed" in screen_text(app), what="diff summary")


@pytest.mark.asyncio
async def test_the_highlighted_changed_row_shows_what_changed_with_the_stretch_marked():
    """Under the rows, the highlighted row's change as `dsinspect diff` prints it: in words, and the
    changed text and token stretch marked [-removed-] / {+added+}."""
    app = DsinspectApp(address="demo-text@v2")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: getattr(app.screen, "info", None))
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.result, what="diff")
        detail = app.screen.query_one("#row-change-detail")
        await until(pilot, lambda: "188 → 125 characters" in str(detail.render()), what="the first row's change")
        shown = str(detail.render())
        assert "first difference at 125" in shown and "[-άνοντας ερωτήσεις" in shown
        assert "110 → 73 tokens" in shown and "[-386 322 299" in shown
        app.screen.query_one("#row-changes", DataTable).move_cursor(row=1)
        await until(pilot, lambda: "26 → 17 characters" in str(detail.render()), what="the second row's change")
        app.screen.query_one("#row-changes", DataTable).move_cursor(row=2)
        await until(pilot, lambda: str(detail.render()) == "added row", what="an added row")


@pytest.mark.asyncio
async def test_a_changed_image_shows_where_before_and_after_differ_upright():
    """demo-images row 14 (EXIF orientation 8, stored 64×48) changed in v2: the row diff draws the
    difference figure too, upright like both pictures (48×64), and it is the difference of the two."""
    import numpy as np

    from dsinspect.defaults import open_catalog
    from dsinspect.inspect.image_diff import difference_image
    from dsinspect.inspect.sample import open_address
    from dsinspect.tui.widgets.pictures import Picture, _size

    catalog = open_catalog()
    before, after = (open_address(catalog, f"demo-images@{tag}:14") for tag in ("v1", "v2"))
    figure = difference_image(before.value("image"), after.value("image"))
    assert figure is not None and figure.size == (48, 64)  # upright, as the two pictures are drawn
    assert np.asarray(figure).max() == 255  # stretched: the largest difference is white
    app = DsinspectApp(address="demo-images@v2")
    async with app.run_test(size=SIZE) as pilot:
        app.push_screen(RowDiffScreen("demo-images@v1:14", "demo-images@v2:14", ["image"]))
        await until(pilot, lambda: "where before and after differ" in screen_text(app), what="the figure's title")
        pictures = app.screen.query_one("#after").query(".picture")
        assert len(pictures) >= 2  # the after picture and the difference figure
        assert (pictures.last().styles.width.value, pictures.last().styles.height.value) == _size(figure) \
            or isinstance(pictures.last(), Picture)  # drawn at the figure's (upright) proportions


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_change_sits_under_the_rows_and_the_row_view_marks_the_same_stretch(size):
    """Issue #31: a 19-line blank gap above a 3-line detail pane; the row view did not mark the
    changed caption stretch the list marks."""
    app = DsinspectApp()
    async with app.run_test(size=size) as pilot:
        app.open_diff("demo-images@v1", "demo-images@v2")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.result, what="diff")
        screen = app.screen
        rows, detail = screen.query_one("#row-changes", DataTable), screen.query_one("#row-change-detail")
        await until(pilot, lambda: "colours inverted+}" in screen_text(app), what="the first row's change")
        assert rows.region.height == rows.row_count + 1  # its rows and header, no blank band
        assert detail.region.y == rows.region.bottom and detail.region.height >= 3
        marked = "{+, colours inverted+}"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RowDiffScreen) and app.screen.query(FieldView),
                    what="the row view")
        summary = app.screen.query_one("#rowdiff-summary")
        assert marked in str(summary.render()) and "caption: 43 → 61 characters" in str(summary.render())
        assert marked in " ".join(screen_text(app).split())


@pytest.mark.asyncio
async def test_enter_on_an_empty_diff_field_says_what_is_missing():
    """Issue #31: Enter with empty fields moved the focus without a word."""
    app = DsinspectApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, DiffPrompt), what="the prompt")
        prompt = app.screen
        await pilot.press("enter")
        await until(pilot, lambda: "type the version before the change" in screen_text(app), what="the before hint")
        assert app.focused is prompt.query_one("#diff-a", Input)
        await pilot.press(*"demo-images@v1", "enter")
        await until(pilot, lambda: app.focused is prompt.query_one("#diff-b", Input), what="on to after")
        await pilot.press("enter")
        await until(pilot, lambda: "type the version after the change" in screen_text(app), what="the after hint")
        assert isinstance(app.screen, DiffPrompt) and app.focused is prompt.query_one("#diff-b", Input)
        prompt.query_one("#diff-a", Input).value = ""
        await pilot.press(*"demo-images@v2", "enter")  # before emptied meanwhile: said, and focused
        await until(pilot, lambda: "type the version before the change" in screen_text(app), what="before again")
        assert app.focused is prompt.query_one("#diff-a", Input)

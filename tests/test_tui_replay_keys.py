"""The replay screen's keys (issue #20): in a field every printable key is text, `D`, `R`, `[`, `]`
included; Escape leaves the field and then the screen's and the app's keys act; Tab goes spec → step →
rank → transform → log; the step field takes digits only, refuses anything else with a message and
never resets itself. tests/test_tui_tmux.py drives the same in a real terminal."""

from __future__ import annotations

import pytest
from textual.widgets import Input
from tui_helpers import SIZE, screen_text, until

import dsinspect
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.diff_prompt import DiffPrompt
from dsinspect.tui.screens.help import HELP
from dsinspect.tui.screens.replay import ReplayScreen


@pytest.fixture
def spec_file(tmp_path):
    spec = dsinspect.RunSpec.create(dsinspect.open_catalog(), "demo-text@v1", seed=0, batch_size=4, world_size=2,
                                    shuffle="global")
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    return str(path)


async def open_replay(pilot, app) -> ReplayScreen:
    await pilot.press("R")
    await until(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.focused is not None, what="replay")
    return app.screen


def field(screen, name: str) -> Input:
    return screen.query_one(f"#replay-{name}", Input)


@pytest.mark.asyncio
async def test_in_a_field_keys_are_text_and_escape_gives_them_to_the_screen():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(pilot, app)
        spec = field(screen, "spec")
        assert app.focused is spec
        await pilot.press("D", "R", "left_square_bracket", "right_square_bracket", "r", "g", "q", "c")
        assert spec.value == "DR[]rgqc" and app.screen is screen  # text: no diff prompt, no new replay, no quit
        await pilot.press("escape")  # leaves the field, stays on the screen
        assert app.screen is screen and app.focused is None
        await until(pilot, lambda: "keys act on the screen now" in screen_text(app), what="the hint")
        await pilot.press("D")  # now a key: the diff prompt
        await until(pilot, lambda: isinstance(app.screen, DiffPrompt), what="the diff prompt")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await pilot.press("tab")  # back into the fields, at the first one
        assert app.focused is spec and spec.value == "DR[]rgqc"
        await pilot.press("escape", "escape")  # out of the field, then back a screen
        await until(pilot, lambda: app.screen is not screen, what="back")


@pytest.mark.asyncio
async def test_tab_goes_spec_step_rank_transform_log_and_a_typed_form_replays(spec_file):
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(pilot, app)
        order = []
        for _ in range(5):
            order.append(app.focused.id)
            await pilot.press("tab")
        assert order == ["replay-spec", "replay-step", "replay-rank", "replay-transform", "replay-log"]
        await pilot.press("shift+tab", "shift+tab", "shift+tab", "shift+tab", "shift+tab")
        assert app.focused is field(screen, "spec")
        # the newcomer's path: type the spec, tab, the step, tab, the rank, enter
        await pilot.press(*spec_file, "tab", "backspace", "3", "tab", "backspace", *"all", "enter")
        assert field(screen, "spec").value == spec_file and field(screen, "step").value == "3"
        await until(pilot, lambda: screen.result is not None, what="the replay")
        assert screen.result.step == 3 and screen.result.ranks == [0, 1]
        await until(pilot, lambda: app.focused is not None and app.focused.id == "replay-batch", what="the batch")
        await pilot.press("right_square_bracket")  # out of the fields: a key again
        await until(pilot, lambda: screen.result.step == 4, what="the next step")
        assert field(screen, "step").value == "4"


@pytest.mark.asyncio
async def test_the_step_takes_digits_only_and_never_resets_itself(spec_file):
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(pilot, app)
        step = field(screen, "step")
        field(screen, "spec").value = spec_file
        await pilot.press("tab", "backspace", "1", "2")
        assert app.focused is step and step.value == "12"
        await pilot.press("x")  # refused, said, and the field keeps what was typed
        await until(pilot, lambda: "digits only" in screen_text(app), what="the message")
        assert step.value == "12" and "'x' refused" in screen_text(app)
        await pilot.press("minus", "D", "right_square_bracket")  # a sign and the screen's keys: refused too
        assert step.value == "12" and app.screen is screen
        await pilot.press("enter")
        await until(pilot, lambda: screen.result is not None, what="the replay")
        assert screen.result.step == 12 and step.value == "12"
        step.focus()
        await pilot.press("end", "backspace", "backspace", "enter")  # an empty step: refused, not read as 0
        await until(pilot, lambda: "enter a step" in screen_text(app), what="the empty step refused")
        assert step.value == "" and screen.step == 12 and screen.result.step == 12 and app.focused is step
        step.value = "1x"  # pasted or set: the same rule
        await pilot.pause(0.05)
        assert step.value == ""


@pytest.mark.asyncio
async def test_the_footer_shows_the_letter_keys_only_out_of_the_fields():
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await open_replay(pilot, app)
        await until(pilot, lambda: "esc Back" in screen_text(app), what="the footer")
        footer = screen_text(app).splitlines()[-1]
        assert "Next step" not in footer and "D Diff" not in footer  # in a field they are text
        await pilot.press("escape")
        await until(pilot, lambda: "] Next step" in screen_text(app).splitlines()[-1], what="the screen's keys")
        assert "D Diff" in screen_text(app).splitlines()[-1]


def test_help_says_how_keys_and_fields_share_the_keyboard():
    assert "escape leaves a field" in HELP.lower()

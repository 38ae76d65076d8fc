"""The replay screen: a spec file, a step and a rank or all ranks → the exact batch; step keys; open a sample."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input
from tui_helpers import SIZE, screen_text, until

import dsinspect
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.replay import ReplayScreen
from dsinspect.tui.screens.sample import SampleScreen


@pytest.fixture
def spec_file(tmp_path):
    spec = dsinspect.RunSpec.create(dsinspect.open_catalog(), "demo-text@v1", seed=0, batch_size=4, world_size=2,
                                    shuffle="global")
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    return spec, str(path)


def batch_indices(screen) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for s in screen.result.samples:
        out.setdefault(s.rank, []).append(s.index)
    return out


@pytest.mark.asyncio
async def test_replay_a_step_for_two_ranks_then_step_and_open_a_sample(spec_file):
    spec, path = spec_file
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen))
        screen = app.screen
        screen.query_one("#replay-spec", Input).value = path
        screen.query_one("#replay-step", Input).value = "3"
        screen.query_one("#replay-rank", Input).value = "all"
        screen.query_one("#replay-rank", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: screen.result is not None and screen.result.step == 3, what="replay")
        expected = {r: [int(i) for i in dsinspect.batch_indices(spec, step=3, rank=r)] for r in (0, 1)}
        assert batch_indices(screen) == expected
        assert screen.query_one("#replay-batch", DataTable).row_count == 8
        text = screen_text(app)
        assert "rank 0: " + screen.result.fingerprints[0] in text and "rank 1: " in text and "✓" in text
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: screen.result.step == 4, what="next step")
        assert batch_indices(screen)[1] == [int(i) for i in dsinspect.batch_indices(spec, step=4, rank=1)]
        await pilot.press("down", "enter")  # rank 0, position 1
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample, what="sample")
        assert app.screen.sample.index == int(dsinspect.batch_indices(spec, step=4, rank=0)[1])


@pytest.mark.asyncio
async def test_replay_of_a_missing_spec_is_a_notification(tmp_path):
    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(str(tmp_path / "nope.json"), 0, "0")
        await until(pilot, lambda: any("no such run spec" in n.message for n in app._notifications))
        assert isinstance(app.screen, ReplayScreen) and app.is_running

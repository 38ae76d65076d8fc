"""Shared helpers for the terminal-UI tests (a plain module, not a conftest: fixtures stay local)."""

from __future__ import annotations

import time
from typing import Callable

from textual.pilot import Pilot

SIZE = (120, 36)


async def until(pilot: Pilot, condition: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    """Let the app run until `condition()` is truthy; fail after `timeout` seconds (generous: CI machines
    are shared, and a passing wait returns as soon as the condition holds).

    Once it holds, the app settles for one idle pause: a condition on state (a worker's result set) can hold
    before the frame shows that state (the widgets' layout goes through messages), and a test that reads the
    screen next would read the frame before (a replay whose log check landed first lacked its side-by-side
    view in 4 of 20 runs here)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                await pilot.pause()
                return
        except Exception:  # noqa: BLE001 - a query before the widget exists
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await pilot.pause(0.02)


def screen_text(app) -> str:
    """What the screen shows, as plain text lines."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def downs_to(app, name: str) -> list[str]:
    """The `down` presses that move the catalog's dataset list from its highlighted entry to `name`,
    counted in the list on the screen (never by hand: a new sample dataset shifts the rows)."""
    datasets = app.screen.query_one("#datasets")
    steps = datasets.get_option_index(name) - (datasets.highlighted or 0)
    assert steps >= 0, f"{name} is above the highlighted dataset"
    return ["down"] * steps

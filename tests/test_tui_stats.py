"""The statistics screen (issue #20): `t` on a dataset shows each field's counts, nulls and distinct
values, few values as horizontal bars (a label distribution), numbers as histograms of bars (token
counts, image sizes, episode returns), computed in a worker through the adapter; `t` on a diff shows
both versions on shared bins. The statistics write derived values into the catalog: a copy."""

from __future__ import annotations

import io
import re

import pytest
from tui_helpers import SIZE, screen_text, until

from dsinspect.inspect.query import VersionQuery
from dsinspect.inspect.stats import compare_stats, version_stats
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.diff import DiffScreen
from dsinspect.tui.screens.help import HELP
from dsinspect.tui.screens.stats import StatsScreen, bar, share
from dsinspect.tui.widgets.sample_table import SampleTable


async def stats_of(pilot, app, address: str) -> StatsScreen:
    app.open_address(address)
    await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable),
                what="the dataset")
    await until(pilot, lambda: "t Stats" in screen_text(app), what="the key in the footer")
    await pilot.press("t")
    await until(pilot, lambda: isinstance(app.screen, StatsScreen) and app.screen.stats is not None,
                timeout=60, what="the statistics")
    await pilot.pause(0.05)
    return app.screen


def body_lines(screen) -> list[str]:
    """The whole statistics text as the screen draws it (also what is scrolled out of view)."""
    from rich.console import Console

    console = Console(width=screen.query_one("#stats-columns").content_region.width, record=True, file=io.StringIO())
    console.print(screen.view)
    return console.export_text().splitlines()


def body(screen) -> str:
    return "\n".join(body_lines(screen))


@pytest.mark.asyncio
async def test_t_shows_each_fields_counts_value_bars_and_a_token_count_histogram(sample_copy):
    expect = version_stats(VersionQuery(sample_copy.resolve("demo-text@v1")))
    app = DsinspectApp(source=DataSource(catalog=sample_copy))
    async with app.run_test(size=SIZE) as pilot:
        screen = await stats_of(pilot, app, "demo-text@v1")
        text = screen_text(app)
        assert "240 rows" in text and "statistics" in text
        lines = body_lines(screen)
        # the label distribution: one bar a value, the most common one a full bar
        lang = expect.column("lang")
        top_value, top_count = lang.values[0]
        line = next(t for t in lines if t.strip().startswith(f"{top_value} "))
        assert "█" * 30 in line and f" {top_count} " in line
        for value, n in lang.values:
            assert any(t.strip().startswith(f"{value} ") and t.rstrip().endswith(f"{n} {share(n, 240)}")
                       for t in lines), value
        # the token counts: a histogram, each bin a line with its count, bars scaled to the largest bin
        tokens = expect.column("tokens_len")
        i = next(k for k, t in enumerate(lines) if t.startswith("tokens_len"))
        assert "derived from tokens" in lines[i] and f"distinct {tokens.distinct}" in lines[i + 1]
        assert lines[i + 2].split() == ["min", "2", "·", "mean", f"{tokens.mean:.4g}", "·", "max", "687"]
        filled = [h for h in tokens.histogram if h[2]]  # empty bins are counted, not drawn
        bins = lines[i + 3:i + 3 + len(filled)]
        assert [int(t.split()[-1]) for t in bins] == [n for *_, n in filled]
        empty = len(tokens.histogram) - len(filled)
        assert not empty or lines[i + 3 + len(filled)].strip() == f"{empty} empty bin(s) of 20 not shown"
        biggest = max(n for *_, n in tokens.histogram)
        for t, (_, _, n) in zip(bins, filled):
            assert t.endswith(f" {bar(n, biggest)} {n}") and ("█" * 30 in t) == (n == biggest), t
        assert "kept in the shards" in body(screen)  # text, tokens: described by their derived values
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen), what="back")


@pytest.mark.asyncio
async def test_image_sizes_and_episode_returns_are_drawn(sample_copy):
    app = DsinspectApp(source=DataSource(catalog=sample_copy))
    async with app.run_test(size=SIZE) as pilot:
        screen = await stats_of(pilot, app, "demo-images@v1")
        text = body(screen)
        assert "image_width" in text and "image_orientation" in text and "nulls 42" in text
        assert "square" in text and "checkerboard" in text  # the labels
        await pilot.press("escape", "escape")
        screen = await stats_of(pilot, app, "demo-rl@v1")
        lines = body_lines(screen)
        i = next(k for k, t in enumerate(lines) if t.startswith("trajectory_return"))
        assert "derived from trajectory" in lines[i] and "mean 6.282" in lines[i + 2]
        bins = [t for t in lines[i + 3:i + 23] if t.lstrip().startswith("[")]
        assert lines[i + 3].lstrip().startswith("[-16.27,") and sum(int(t.split()[-1]) for t in bins) == 40


@pytest.mark.asyncio
async def test_t_on_a_diff_shows_both_versions_on_shared_bins(sample_copy):
    a, b = sample_copy.resolve("demo-text@v1"), sample_copy.resolve("demo-text@v2")
    first, second = compare_stats(VersionQuery(a), VersionQuery(b))
    app = DsinspectApp(source=DataSource(catalog=sample_copy))
    async with app.run_test(size=SIZE) as pilot:
        app.open_diff("demo-text@v1", "demo-text@v2")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.result is not None,
                    what="the diff")
        await until(pilot, lambda: "t Stats of both" in screen_text(app), what="the key in the footer")
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, StatsScreen) and app.screen.stats is not None,
                    timeout=60, what="the statistics")
        await pilot.pause(0.05)
        text = screen_text(app)
        assert "(240 rows)" in text and "(242 rows)" in text and "shared bins" in text
        lines = body_lines(app.screen)
        x, y = first.column("tokens_len"), second.column("tokens_len")
        assert [h[:2] for h in x.histogram] == [h[:2] for h in y.histogram]  # the core: shared bins
        i = next(k for k, t in enumerate(lines) if t.startswith("tokens_len"))
        shown = [(a, b) for a, b in zip(x.histogram, y.histogram) if a[2] or b[2]]  # bins either version fills
        rows = lines[i + 3:i + 3 + len(shown)]
        for t, ((_, _, n), (_, _, m)) in zip(rows, shown):
            left, right = t[:58], t[58:]  # both versions on one line: the same bin, each its count
            assert left.split()[-1] == str(n) and right.split()[-1] == str(m), t
            assert left.split()[0] == right.split()[0]


def test_bars_in_eighths():
    assert bar(0, 10) == "" and bar(10, 10, 4) == "████" and bar(1, 1000, 4) == "▏"
    assert bar(5, 10, 4) == "██" and bar(9, 16, 2) == "█▏"


def test_help_names_the_stats_key():
    assert "| `t` | dataset | statistics" in HELP


VALUE_ROW = re.compile(r"^[⟳ ] (\S+)\s+[█▉▊▋▌▍▎▏]*\s*(\d+) ([\d.]+%)\s+([⟳ ]) (\S+)\s+[█▉▊▋▌▍▎▏]*\s*(\d+) ([\d.]+%)")


async def compared(pilot, app, a: str, b: str) -> StatsScreen:
    app.push_screen(StatsScreen(a, b))
    await until(pilot, lambda: isinstance(app.screen, StatsScreen) and app.screen.stats is not None,
                timeout=60, what="both versions' statistics")
    await pilot.pause(0.05)
    return app.screen


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_two_versions_share_rows_mark_what_moved_and_round_their_numbers(sample_copy, size):
    """Issue #31: each side was sorted by its own counts (the same value on different rows), nothing
    marked what moved, video_seconds printed unrounded, 1 of 8 shown as 12%."""
    from dsinspect.inspect.stats import moved

    app = DsinspectApp(source=DataSource(catalog=sample_copy))
    async with app.run_test(size=size) as pilot:
        screen = await compared(pilot, app, "demo-video@v1", "demo-video@v2")
        lines = body_lines(screen)
        assert all(len(line) <= screen.query_one("#stats-columns").content_region.width for line in lines)
        rows = [m for m in map(VALUE_ROW.match, lines) if m]
        assert len(rows) >= 20
        assert all(m.group(1) == m.group(5) for m in rows)  # each value on one row, both sides
        first, second = screen.stats
        frames = dict(first.column("num_frames").values), dict(second.column("num_frames").values)
        for m in rows:  # a row whose counts differ is marked; the counts are the versions' own
            if m.group(1).isdigit() and int(m.group(1)) in frames[0].keys() | frames[1].keys():
                a, b = int(m.group(2)), int(m.group(6))
                assert (m.group(4) == "⟳") == (a != b)
        text = "\n".join(lines)
        changes = moved(first.column("num_frames"), second.column("num_frames"))
        assert changes and "⟳ moved: " + changes[0] in text and "= unchanged" in text  # fps did not move
        assert "12.5%" in text and " 12%" not in text  # 1 of 8
        seconds = [m.group(1) for m in rows if "." in m.group(1)]
        assert seconds and all(len(s) <= 6 for s in seconds) and "0.7917" in seconds  # 0.7916666666666666


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_empty_bins_of_sparse_ids_are_left_out_and_counted(sample_copy, size):
    """Issue #31: an id column (episode_id 0..39, then 1,000-odd) drew 18 empty bins of 20."""
    app = DsinspectApp(source=DataSource(catalog=sample_copy))
    async with app.run_test(size=size) as pilot:
        screen = await compared(pilot, app, "demo-rl@v1", "demo-rl@v2")
        lines = body_lines(screen)
        start = next(i for i, line in enumerate(lines) if line.startswith("episode_id"))
        end = next(i for i in range(start, len(lines)) if not lines[i].strip())  # the blank line after it
        block = "\n".join(lines[start:end])
        bins = [line for line in block.splitlines() if line.lstrip().startswith("[")]
        assert len(bins) == 2  # the two bins either version has values in, side by side
        assert "18 empty bin(s) of 20 not shown" in block

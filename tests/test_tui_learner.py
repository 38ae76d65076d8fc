"""The learner-step screen (#34): on the run screen of a stream learner's record, Enter or `R` on a cell
shows the rollouts that (step, rank) consumed, read back from the stream with their staleness, `a` all
ranks, `]`/`[` the steps; Enter on a rollout opens it in the sample screen's rollout view; `k` checks the
record against its stream. Driven by Textual's Pilot on copies of the sample catalog (demo-learner: 2
ranks over demo-rollouts, killed, resumed with 1; step 7 drops 4 stale rollouts) and on a stream whose
rollout ids and responses are markup."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from tui_helpers import SIZE, screen_text, until

from dsinspect.defaults import BUNDLED
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.stream import StreamLearner, consumed_step, open_stream, read_learner_run
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.learner_step import LearnerStepScreen
from dsinspect.tui.screens.rollout_group import RolloutGroupScreen
from dsinspect.tui.screens.run import RunScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.widgets.consumed_rollouts import ConsumedTable
from dsinspect.tui.widgets.rollout_tokens import RolloutTokens

COLUMNS = ("rank", "slot", "commit", "row", "key", "policy", "staleness", "reward", "response", "row hash")


@pytest.fixture
def learner(tmp_path):
    """A copy of the sample catalog: (catalog, the demo-learner record's path)."""
    shutil.copytree(BUNDLED, tmp_path / "catalog")
    return Catalog(str(tmp_path / "catalog")), str(tmp_path / "catalog" / "runs" / "demo-learner")


def app_on(catalog: Catalog, **kwargs) -> DsinspectApp:
    return DsinspectApp(source=DataSource(catalog=Catalog(catalog.url)), **kwargs)


async def open_run(pilot, app) -> RunScreen:
    await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.grid is not None, what="run screen")
    return app.screen


async def cell(pilot, app, rank: int, step: int) -> None:
    """Put the run grid's cursor on (rank, step) (one step per column: the demo has 10)."""
    screen = app.screen
    assert screen.grid.bucket == 1
    screen.query_one("#run-grid", DataTable).cursor_coordinate = Coordinate(screen.grid.ranks.index(rank), step)
    await until(pilot, lambda: f"rank {rank}, step {step}:" in screen_text(app), what=f"cell ({rank}, {step})")


async def learner_step(pilot, app, step: int, ranks: list[int]) -> LearnerStepScreen:
    await until(pilot, lambda: isinstance(app.screen, LearnerStepScreen) and app.screen.result is not None
                and (app.screen.result.step, app.screen.result.ranks) == (step, ranks), what=f"learner step {step}")
    return app.screen


def rows(screen: LearnerStepScreen) -> list[dict[str, str]]:
    """The table as shown: each row's cells as plain text, by column."""
    table = screen.query_one(ConsumedTable)
    return [dict(zip(COLUMNS, (getattr(c, "plain", c) for c in table.get_row_at(i)))) for i in range(table.row_count)]


def expected(catalog: Catalog, record: str, step: int, ranks: list[int]) -> list[dict[str, str]]:
    """What consumed_step says those ranks consumed: rank, slot, commit, row, key and staleness."""
    run = read_learner_run(record)
    out = []
    for rank in ranks:
        c = consumed_step(catalog, run, step, rank)
        keys = c.rows.column(c.key).to_pylist()
        out += [{"rank": str(rank), "slot": str(i), "commit": str(seq), "row": str(row), "key": str(keys[i]),
                 "staleness": str(c.staleness[i])} for i, (seq, row) in enumerate(c.positions)]
    return out


def shown(screen: LearnerStepScreen) -> list[dict[str, str]]:
    return [{k: r[k] for k in ("rank", "slot", "commit", "row", "key", "staleness")} for r in rows(screen)]


@pytest.mark.asyncio
async def test_a_learner_cell_shows_what_it_consumed_with_staleness_all_ranks_and_the_steps(learner):
    catalog, record = learner
    app = app_on(catalog, run="demo-learner")  # `dsinspect tui demo-learner`: the record by its name
    async with app.run_test(size=SIZE) as pilot:
        await open_run(pilot, app)
        await cell(pilot, app, 0, 7)
        await pilot.press("enter")
        screen = await learner_step(pilot, app, 7, [0])
        assert shown(screen) == expected(catalog, record, 7, [0])
        assert screen.query_one(ConsumedTable).ordered_columns[4].label.plain == "rollout_id"  # the stream's key
        c = consumed_step(catalog, read_learner_run(record), 7, 0)
        await until(pilot, lambda: "staleness bound 1" in screen_text(app), what="header")
        text = screen_text(app)
        assert "learner step 7 · rank 0 of 1 · 8 rollouts a rank · stream demo-rollouts in commit order" in text
        assert "policy version 7 · staleness bound 1 · 4 rollout(s) dropped as stale at this step (all ranks): " \
               "commit 7 rows 0..3" in text
        assert f"fingerprint rank 0: recorded {c.fingerprint}, recomputed {c.recomputed} ✓ matches" in text

        await pilot.press(*"[[[[")  # step 3: two ranks then, the policy one version ahead of the rollouts
        screen = await learner_step(pilot, app, 3, [0])
        assert shown(screen) == expected(catalog, record, 3, [0])
        assert {r["staleness"] for r in shown(screen)} == {"1"}
        await pilot.press("a")  # all ranks
        screen = await learner_step(pilot, app, 3, [0, 1])
        assert shown(screen) == expected(catalog, record, 3, [0, 1])
        await until(pilot, lambda: "fingerprint rank 1:" in screen_text(app), what="both ranks' fingerprints")
        assert "all ranks of 2" in screen_text(app)
        await pilot.press("right_square_bracket")  # the next step, still all ranks: one rank after the resume
        screen = await learner_step(pilot, app, 4, [0])
        assert shown(screen) == expected(catalog, record, 4, [0])
        await pilot.press("a", "left_square_bracket")  # back to rank 0, then step 3
        screen = await learner_step(pilot, app, 3, [0])
        assert shown(screen) == expected(catalog, record, 3, [0])

        await pilot.press("escape")
        await open_run(pilot, app)
        await cell(pilot, app, 1, 2)
        await pilot.press("R")  # R replays the highlighted cell too
        screen = await learner_step(pilot, app, 2, [1])
        assert shown(screen) == expected(catalog, record, 2, [1])


@pytest.mark.asyncio
async def test_enter_on_a_consumed_rollout_opens_it_in_the_rollout_view(learner):
    catalog, record = learner
    c = consumed_step(catalog, read_learner_run(record), 7, 0)
    version, indices = c.version(catalog)
    keys = c.rows.column("rollout_id").to_pylist()
    app = app_on(catalog, run=record)
    async with app.run_test(size=SIZE) as pilot:
        await open_run(pilot, app)
        await cell(pilot, app, 0, 7)
        await pilot.press("enter")
        step = await learner_step(pilot, app, 7, [0])
        await pilot.press("down", "down", "down", "down", "down")
        await until(pilot, lambda: f"rank 0 slot 5: commit {c.positions[5][0]} row {c.positions[5][1]} · rollout_id "
                                   f"{keys[5]}" in screen_text(app), what="the highlighted rollout described")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample is not None
                    and app.screen.query(RolloutTokens), what="the rollout view")
        sample = app.screen
        assert sample.sample.version.id == version.id and sample.sample.index == indices[5]
        assert sample.query_one(RolloutTokens).view.key == keys[5]
        await until(pilot, lambda: f"key {keys[5]}  group" in screen_text(app), what="the rollout's summary")
        await pilot.press("escape")  # the stream as the step read it: its rows, the cursor on the rollout
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.info, what="dataset")
        assert app.screen.info["id"] == version.id and app.screen.info["rows"] == version.num_rows
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is step, what="back on the learner step")


@pytest.mark.asyncio
async def test_k_checks_a_learner_record_against_its_stream_and_names_a_tampered_line(learner):
    catalog, record = learner
    app = app_on(catalog, run=record)
    async with app.run_test(size=SIZE) as pilot:
        run = await open_run(pilot, app)
        await pilot.press("k")
        await until(pilot, lambda: run.check_result is not None, what="the check")
        assert run.check_result.check.ok and run.check_result.divergence is None
        await until(pilot, lambda: "✓ the record matches the stream: 14 kept line(s) (steps 0..9): 80 rollouts "
                                   "consumed, 4 dropped as stale" in screen_text(app), what="the check's line")

        log = Path(record) / "fingerprints" / "rank-00000.jsonl"
        lines = log.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if '"step": 7,' in line)
        entry = json.loads(lines[at])
        entry["rows"] = [[7, 0, 4], [7, 4, 4]]  # the 4 rollouts the step dropped as stale, said to be consumed
        lines[at] = json.dumps(entry)
        log.write_text("\n".join(lines) + "\n")

        run.check_result = None
        await pilot.press("k")
        await until(pilot, lambda: run.check_result is not None, what="the check again")
        assert not run.check_result.check.ok
        assert (run.check_result.divergence.step, run.check_result.divergence.rank) == (7, 0)
        await until(pilot, lambda: "✗ step 7, rank 0: consumed 8 rows" in screen_text(app), what="the divergence")
        await until(pilot, lambda: run.grid.cells[0][7] == "diverged", what="the cell marked")
        await cell(pilot, app, 0, 7)
        assert "rank 0, step 7: the check's first divergence" in screen_text(app)

        await pilot.press("enter")  # what the tampered line names: staler than the bound, marked, and ✗
        screen = await learner_step(pilot, app, 7, [0])
        assert [r["staleness"] for r in rows(screen)] == ["3 ✗ beyond the bound"] * 4 + ["0"] * 4
        await until(pilot, lambda: "✗ DIFFERS" in screen_text(app), what="the fingerprint mark")
        assert "3 ✗ beyond the bound" in screen_text(app)


@pytest.mark.asyncio
async def test_a_loader_record_still_replays_rows_on_enter(learner, tmp_path):
    """The dispatch leaves a Loader's record as it was: Enter opens the row replay, not the learner step."""
    from run_fixtures import toy_catalog, write_run

    from dsinspect.tui.screens.replay import ReplayScreen

    cat = toy_catalog(str(tmp_path / "toy"))
    record = str(tmp_path / "toy" / "runs" / "resumed")
    write_run(cat, record)
    app = app_on(cat, run=record)
    async with app.run_test(size=SIZE) as pilot:
        await open_run(pilot, app)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.result is not None,
                    what="the row replay")


# -- stored markup is text -------------------------------------------------------------------------

MARKUP_IDS = ["[bold]x[/]", "[red]y[/red]", "[link=http://example.com]z[/link]"]
RESPONSE = "[bold]x[/] and [/] then [i]"


@pytest.fixture
def marked(tmp_path):
    return write_marked(tmp_path)


def write_marked(tmp_path) -> tuple[Catalog, str]:
    """A stream whose rollout ids and responses are markup: policy versions 3, 5, 6, consumed in one step at
    version 5 with bound 1 by one rank (the first dropped as stale, the last newer than the learner), the
    record in CATALOG/runs/marked-run."""
    catalog = Catalog(str(tmp_path / "catalog"))
    fields = [Field("rollout_id", pa.string(), "scalar"), Field("group", pa.int64(), "scalar"),
              Field("policy_version", pa.int64(), "scalar"), Field("prompt_text", pa.string(), "text"),
              Field("response_text", pa.string(), "text"), Field("reward", pa.float32(), "scalar")]
    stream = open_stream(catalog, "marked", fields, key="rollout_id")
    stream.append([{"rollout_id": rid, "group": 0, "policy_version": pv, "prompt_text": "[b]q[/b]",
                    "response_text": RESPONSE, "reward": 0.1} for rid, pv in zip(MARKUP_IDS, (3, 5, 6))])
    record = str(tmp_path / "catalog" / "runs" / "marked-run")
    learner = StreamLearner(catalog, "marked", 2, staleness_bound=1, record_dir=record)
    learner.next_batch(5)
    learner.close()
    return catalog, record


@pytest.mark.asyncio
async def test_markup_in_rollout_ids_and_responses_is_shown_literally(marked):
    catalog, record = marked
    app = app_on(catalog, run="marked-run")
    async with app.run_test(size=SIZE) as pilot:
        await open_run(pilot, app)
        await pilot.press("enter")
        screen = await learner_step(pilot, app, 0, [0])
        table = rows(screen)
        assert [r["key"] for r in table] == MARKUP_IDS[1:] and {r["response"] for r in table} == {RESPONSE}
        assert [r["staleness"] for r in table] == ["0", "-1 newer"]
        assert table[0]["reward"] == "0.1"  # float32 with its own digits
        await until(pilot, lambda: MARKUP_IDS[1] in screen_text(app), what="the ids drawn")
        text = screen_text(app)
        # in the table and, for the highlighted rollout, in full under it
        assert all(t in text for t in (MARKUP_IDS[1], MARKUP_IDS[2], f"response {RESPONSE}"))
        assert "1 rollout(s) dropped as stale at this step (all ranks): commit 0 row 0" in text
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.query(RolloutTokens),
                    what="the rollout view")
        view = app.screen.query_one(RolloutTokens).view
        assert view.key == MARKUP_IDS[2]
        await until(pilot, lambda: RESPONSE in screen_text(app), what="the response drawn")
        assert f"key {MARKUP_IDS[2][:20]}" in screen_text(app)
        assert "rollout-stale" not in view.skipped  # checked at the step's policy version and bound
        await pilot.press("G")  # its group: the rollout the step dropped is stale at version 5, bound 1
        await until(pilot, lambda: isinstance(app.screen, RolloutGroupScreen) and app.screen.group is not None,
                    what="the group")
        group = app.screen.group
        assert [r.key for r in group.rows] == MARKUP_IDS
        assert [[f.code for f in r.findings if f.code == "rollout-stale"] for r in group.rows] == [["rollout-stale"],
                                                                                                   [], []]


@pytest.mark.asyncio
async def test_the_replay_form_given_a_learner_record_says_where_its_steps_open(learner):
    catalog, _ = learner
    app = app_on(catalog)
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay("demo-learner", 7, "0")  # what R's form submits
        await until(pilot, lambda: any("demo-learner is a stream learner's record" in n.message
                                       for n in app._notifications), what="the one-line refusal")
        assert "dsinspect tui demo-learner" in next(n.message for n in app._notifications)

"""The replay screen with a run's transform (each sample as stored and as fed to the model, side by
side) and with a fingerprint log (each step marked as matching the log or diverging from it)."""

from __future__ import annotations

import textwrap

import pytest
from replay_diff_fixtures import make_catalog, rewrite_shard, run_job
from textual.widgets import DataTable, Input
from tui_helpers import SIZE, screen_text, until

import dsinspect
from dsinspect.loaders.records.transforms import transformed_fingerprint
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.app import DsinspectApp
from dsinspect.tui.screens.replay import ReplayScreen

TRANSFORM = textwrap.dedent('''
    import pyarrow as pa
    import pyarrow.compute as pc

    def scale(batch):
        """What the job fed its model: ids times 1000 and each sample's token count."""
        t = batch.table
        return pa.table({"model_id": pc.multiply(t.column("id"), 1000),
                         "n_tokens": pc.list_value_length(t.column("tokens"))})

    def not_a_table(batch):
        return object()

    def explode(batch):
        raise ValueError("boom")
''')


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A catalog, the job's transform module importable by name, and a recorded run."""
    (tmp_path / "tuijob_xform.py").write_text(TRANSFORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    cat = make_catalog(tmp_path / "cat")
    spec = dsinspect.RunSpec.create(cat, "toy", batch_size=4, world_size=2, shuffle="global", seed=3)
    return cat, spec, tmp_path


def replay_screen(app) -> ReplayScreen:
    assert isinstance(app.screen, ReplayScreen)
    return app.screen


@pytest.mark.asyncio
async def test_transform_shows_each_sample_as_stored_and_as_fed_and_a_transformed_log_matches(job):
    from tuijob_xform import scale

    cat, spec, tmp_path = job
    record = str(tmp_path / "run")
    seen = run_job(cat, spec, 4, record, transform=scale, log_transformed=True)
    app = DsinspectApp(source=DataSource(catalog=Catalog(cat.url)), transform="tuijob_xform:scale")
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(record, 2, "all", log=record)  # the app's transform is the default
        await until(pilot, lambda: replay_screen(app).result is not None, what="replay")
        screen = replay_screen(app)
        assert screen.query_one("#replay-transform", Input).value == "tuijob_xform:scale"
        assert screen.result.transformed_fingerprints == {r: transformed_fingerprint(seen[(2, r)].transformed)
                                                         for r in (0, 1)}
        # the log check and the replay are two workers: either may land first
        await until(pilot, lambda: "matches the log" in screen_text(app) and "as stored" in screen_text(app),
                    what="log check and the side-by-side view")
        text = screen_text(app)
        assert "✓ matches the log (2 line(s), 2 transformed)" in text
        first = screen.result.samples[0]
        assert "as fed to the model" in text
        assert f"{first.index * 1000}" in text and "model_id" in text and "n_tokens" in text
        await pilot.press("down")  # the side-by-side view follows the cursor
        second = screen.result.samples[1]
        await until(pilot, lambda: f"pos 1 · toy:{second.index}" in screen_text(app), what="second sample")
        assert f"{second.index * 1000}" in screen_text(app)


@pytest.mark.asyncio
async def test_non_table_transform_output_and_a_raising_transform(job):
    cat, spec, tmp_path = job
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    app = DsinspectApp(source=DataSource(catalog=cat))
    async with app.run_test(size=SIZE) as pilot:
        app.action_replay(str(path), 0, "0", transform="tuijob_xform:not_a_table")
        await until(pilot, lambda: replay_screen(app).result is not None, what="replay")
        await until(pilot, lambda: "<object object at" in screen_text(app), what="repr of the output")
        assert "cannot fingerprint" in screen_text(app)
        screen = replay_screen(app)
        screen.query_one("#replay-transform", Input).value = "tuijob_xform:explode"
        screen.query_one("#replay-step", Input).value = "1"
        screen.query_one("#replay-transform", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: any("raised ValueError: boom" in n.message for n in app._notifications),
                    what="the transform's error")
        assert app.is_running and screen.result.step == 0


@pytest.mark.asyncio
async def test_fingerprint_log_marks_matching_and_diverging_steps(job):
    cat, spec, tmp_path = job
    record = str(tmp_path / "run")
    seen = run_job(cat, spec, 5, record)
    # forge one row of the batch rank 1 read at step 3: its bytes change under an unchanged hash
    batch = seen[(3, 1)]
    index = int(batch.indices[2])
    assert all(index not in [int(i) for i in seen[(s, r)].indices] for s in (2,) for r in (0, 1))
    rewrite_shard(cat.resolve("toy"), index, "blob", b"tampered", rehash=False)
    app = DsinspectApp(source=DataSource(catalog=Catalog(cat.url)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ReplayScreen))
        screen = replay_screen(app)
        screen.query_one("#replay-spec", Input).value = record
        screen.query_one("#replay-step", Input).value = "2"
        screen.query_one("#replay-rank", Input).value = "all"
        screen.query_one("#replay-log", Input).value = record
        screen.query_one("#replay-log", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: "step 2: ✓ matches the log (2 line(s), 2 stored)" in screen_text(app),
                    what="step 2 matches")
        # `]` is a key once the batch has the focus (in the log field it would be text)
        await until(pilot, lambda: screen.result is not None and app.focused is screen.query_one("#replay-batch"),
                    what="the batch shown and focused")
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: "step 3: ✗ DIVERGES from the log at rank 1" in screen_text(app),
                    what="step 3 diverges")
        await until(pilot, lambda: screen.result.step == 3)
        table = screen.query_one("#replay-batch", DataTable)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        flagged = [(int(r[0]), int(r[1])) for r in rows if "DIVERGES" in str(r[-1])]
        assert flagged == [(1, 2)]
        assert "no longer hash to their stored row hash" in " ".join(screen_text(app).split())
        await pilot.press("left_square_bracket")  # back to step 2: the verdict is remembered
        await until(pilot, lambda: "step 2: ✓ matches the log" in screen_text(app), what="step 2 again")


@pytest.mark.asyncio
async def test_opening_a_row_of_a_tag_addressed_version_reuses_its_dataset_screen():
    """Rows open by version id; a dataset screen opened by tag is the same version (no second screen)."""
    from dsinspect.tui.screens.dataset import DatasetScreen
    from dsinspect.tui.screens.sample import SampleScreen
    from dsinspect.tui.widgets.sample_table import SampleTable

    app = DsinspectApp()
    async with app.run_test(size=SIZE) as pilot:
        app.open_address("demo-text@v1")
        await until(pilot, lambda: isinstance(app.screen, DatasetScreen) and app.screen.query(SampleTable))
        dataset = app.screen
        table = dataset.query_one(SampleTable)
        await until(pilot, lambda: table.row_cells(0) is not None, what="first page")
        for index in (3, 5):
            table.cursor = index
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, SampleScreen) and app.screen.sample
                        and app.screen.sample.index == index, what=f"sample {index}")  # noqa: B023 (awaited here)
            assert app.screen_stack[-2] is dataset
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is dataset)

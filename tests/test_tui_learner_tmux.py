"""The learner step (#34) in a real terminal: `dsinspect tui demo-learner` in a tmux pane, driven by
send-keys and read with capture-pane: the record checks, a cell replays the rollouts that step consumed
(their ids, commits, rows and staleness as consumed_step reads them), one opens in the rollout view; stored
markup in ids and responses shows as the characters it is. Needs tmux."""

from __future__ import annotations

import re
import shutil

import pytest
from test_tui_learner import MARKUP_IDS, RESPONSE, write_marked
from test_tui_tmux import Pane, _command

from dsinspect.defaults import BUNDLED
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.stream import consumed_step, read_learner_run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

# a table row: rank, slot, commit, row, key, policy version, staleness, …
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)")


def table_rows(screen: str) -> list[tuple[str, ...]]:
    """(rank, slot, commit, row, key, staleness) of each consumed rollout the pane shows."""
    return [(m[1], m[2], m[3], m[4], m[5], m[7]) for m in map(ROW.match, screen.splitlines()) if m]


def consumed(catalog: Catalog, record: str, step: int, rank: int) -> list[tuple[str, ...]]:
    c = consumed_step(catalog, read_learner_run(record), step, rank)
    keys = c.rows.column(c.key).to_pylist()
    return [(str(rank), str(i), str(seq), str(row), str(keys[i]), str(c.staleness[i]))
            for i, (seq, row) in enumerate(c.positions)]


def test_a_learner_step_in_a_real_terminal(tmp_path):
    shutil.copytree(BUNDLED, tmp_path / "catalog")
    catalog = Catalog(str(tmp_path / "catalog"))
    record = str(tmp_path / "catalog" / "runs" / "demo-learner")
    pane = Pane(_command(f"--catalog {catalog.url} tui demo-learner"), width=120, height=40)
    try:
        pane.wait_for("run demo-learner", "demo-rollouts (stream)", "Check the run")
        pane.keys("k")
        pane.wait_for("✓ the record matches the stream: 14 kept line(s)")
        pane.keys("Enter")  # the cursor's cell: rank 0, step 0
        screen = pane.wait_for("learner step 0 · rank 0 of 2", "✓ matches", "enter opens it")
        assert table_rows(screen) == consumed(catalog, record, 0, 0), screen
        pane.keys(*"]]]]]]]")
        screen = pane.wait_for("learner step 7 · rank 0 of 1", "dropped as stale at this step (all ranks): commit 7 "
                               "rows 0..3", "rank 0 slot 0: commit 7 row 4")
        assert table_rows(screen) == consumed(catalog, record, 7, 0), screen
        pane.keys("Down", "Enter")
        pane.wait_for("rollout demo-rollouts@", "key 61  group", "row hash")
        pane.keys("q")
    finally:
        pane.close()


def test_markup_in_rollout_ids_and_responses_in_a_real_terminal(tmp_path):
    catalog, _ = write_marked(tmp_path)
    pane = Pane(_command(f"--catalog {catalog.url} tui marked-run"), width=120, height=40)
    try:
        pane.wait_for("run marked-run", "Check the run")
        pane.keys("Enter")
        screen = pane.wait_for("learner step 0", f"response {RESPONSE}", "-1 newer")
        assert [r[4] for r in table_rows(screen)] == MARKUP_IDS[1:], screen
        pane.keys("Down", "Enter")
        pane.wait_for(f"key {MARKUP_IDS[2]}", RESPONSE)
        pane.keys("q")
    finally:
        pane.close()

"""`dsinspect runs [DIR]`: run records listed (sources, world sizes, segments, steps, superseded lines,
gaps, wait per step), one record in detail with its steps × ranks grid, and the grid's bucketing,
on records written by real Loaders; bad input is one line and exit 2, an unreadable record exit 1.
The commands run in this process (tests/cli_inprocess.py), but where the process is the subject: an
unreadable record's exit 1 as a shell sees it, a name looked up from another working directory, and
`tui` without a terminal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from cli_inprocess import run_cli
from run_fixtures import toy_catalog, write_run

from dsinspect.inspect.runs import GAP, KEPT, NONE, SUPERSEDED, list_runs, open_run
from dsinspect.loaders import RunSpec
from dsinspect.loaders.records.recorder import RunRecorder


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    """CATALOG/runs holding `resumed` (3 ranks then 2, superseded lines, a gap), `clean` (one
    segment) and `[red]odd` (a name that is rich markup)."""
    root = tmp_path_factory.mktemp("runs")
    cat = toy_catalog(str(root / "cat"))
    write_run(cat, str(root / "cat" / "runs" / "resumed"))
    spec = RunSpec.create(cat, "toy", batch_size=8, world_size=1)
    for name in ("clean", "[red]odd"):
        recorder = RunRecorder(str(root / "cat" / "runs" / name), 0)
        recorder.begin(spec)
        for step in range(5):
            recorder.record(step, 0, f"{step:032x}", 8, wait=0.25)
        recorder.close()
    return root / "cat"


def dsinspect(*args, catalog=None):
    """`dsinspect ARGS`, run in this process with no DSINSPECT_CATALOG: a CompletedProcess."""
    return run_cli(*(["--catalog", str(catalog)] if catalog else []), *args)


def dsinspect_process(*args, catalog=None):
    """`dsinspect ARGS` in a real process."""
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}
    cmd = [sys.executable, "-m", "dsinspect", *(["--catalog", str(catalog)] if catalog else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def assert_one_line_error(done, code, fragment):
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: ") and fragment in lines[0], done.stderr


def test_runs_lists_the_catalogs_run_records(runs_dir):
    done = dsinspect("runs", "--json", catalog=runs_dir)
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert listing["directory"].endswith("runs") and listing["broken"] == []
    by_name = {r["name"]: r for r in listing["runs"]}
    assert sorted(by_name) == ["[red]odd", "clean", "resumed"]
    resumed = by_name["resumed"]
    assert resumed["world_sizes"] == [3, 2, 2] and resumed["steps"] == [0, 39]
    assert resumed["lines"] == 3 * 10 + 2 * 15 + 2 * 5 and resumed["superseded"] == 3 * 20
    assert resumed["gaps"] == [{"steps": [25, 34], "ranks": [0, 1]}] and resumed["missing"] == 20
    assert [s["kept"] for s in resumed["segments"]] == [True, True, True]
    assert [(s["start"], s["world_size"], s["lines"]) for s in resumed["segments"]] == [(0, 3, 90), (10, 2, 30),
                                                                                       (35, 2, 10)]
    assert resumed["sources"] == [f"toy@{resumed['sources'][0].split('@')[1]}"]
    assert resumed["wait_per_step"] is not None  # the Loader records the time each batch was waited for
    clean = by_name["clean"]
    assert clean["gaps"] == [] and clean["superseded"] == 0 and clean["wait_per_step"] == pytest.approx(0.25)

    table = dsinspect("runs", catalog=runs_dir)
    assert table.returncode == 0, table.stderr
    assert "resumed" in table.stdout and "3 → 2" in table.stdout and "20: steps 25..34, ranks 0-1" in table.stdout
    assert "[red]odd" in table.stdout  # a name is shown as itself, never as markup
    assert "250.00 ms" in table.stdout  # clean's wait per step


def test_one_run_shows_its_segments_gaps_and_grid(runs_dir):
    done = dsinspect("runs", str(runs_dir / "runs" / "resumed"))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "gaps: 1 range(s), 20 (step, rank) pair(s)" in text and "steps 25..34, ranks 0-1" in text
    rows = {line.split("│")[0].strip(): line.split("│")[1] for line in text.splitlines() if "│" in line
            and line.lstrip().startswith("rank ")}
    assert rows["rank 0"] == "█" * 25 + "✗" * 10 + "█" * 5
    assert rows["rank 2"].rstrip() == "█" * 10 + "░" * 20  # 3 ranks until step 9; rank 2's later lines superseded

    data = json.loads(dsinspect("runs", str(runs_dir / "runs" / "resumed"), "--json", "--columns", "8").stdout)
    grid = data["grid"]
    assert grid["bucket"] == 5 and grid["columns"][5] == [25, 29] and grid["ranks"] == [0, 1, 2]
    assert grid["cells"][0] == [KEPT] * 5 + [GAP, GAP] + [KEPT]
    assert grid["cells"][2] == [KEPT, KEPT, SUPERSEDED, SUPERSEDED, SUPERSEDED, SUPERSEDED, NONE, NONE]
    assert grid["targets"][0][5] == 25 and grid["targets"][2][7] is None

    zoom = dsinspect("runs", str(runs_dir / "runs" / "resumed"), "--steps", "30:")
    assert zoom.returncode == 0 and "steps 30..39 × ranks" in zoom.stdout


def test_a_bucket_with_any_gap_step_is_a_gap(tmp_path):
    """1,000 steps in 60 columns: a single missing step still shows, in its own bucket only."""
    from dsinspect.loaders import Catalog

    cat = toy_catalog(str(tmp_path / "cat"))
    spec = RunSpec.create(Catalog(cat.url), "toy", batch_size=2, world_size=2)
    for rank in (0, 1):
        recorder = RunRecorder(str(tmp_path / "run"), rank, flush_every=1000)
        recorder.begin(spec)
        for step in range(1000):
            if not (rank == 1 and step == 617):
                recorder.record(step, 0, f"{step:032x}", 2)
        recorder.close()
    view = open_run(str(tmp_path / "run"))
    grid = view.grid()
    assert len(grid.columns) == 59 and grid.bucket == 17  # ceil(1000 / 60) steps each
    assert grid.columns[-1] == (986, 999)
    gap_cols = [j for j, c in enumerate(grid.cells[1]) if c == GAP]
    assert gap_cols == [617 // 17] and grid.targets[1][617 // 17] == 617
    assert set(grid.cells[0]) == {KEPT} and grid.rows_text()[0] == "█" * 59
    assert [(g.first, g.last, g.ranks) for g in view.summary().gaps] == [(617, 617, (1,))]


def test_a_record_that_cannot_be_read_is_listed_and_the_exit_is_1(runs_dir, tmp_path):
    folder = tmp_path / "runs"
    (folder / "lost" / "fingerprints").mkdir(parents=True)  # lines, but no specs/ folder
    (folder / "lost" / "fingerprints" / "rank-00000.jsonl").write_text('{"step": 0, "rank": 0, "fingerprint": "a"}\n')
    shutil.copytree(runs_dir / "runs" / "clean", folder / "clean")
    found, broken = list_runs(str(folder))
    assert [s.name for s in found] == ["clean"] and broken == [("lost", f"{folder}/lost: not a run record "
                                                                        "(no specs/ folder)")]
    done = dsinspect_process("runs", str(folder))  # exit 1 as a shell sees it
    assert done.returncode == 1 and "clean" in done.stdout
    assert "dsinspect: runs: broken: lost:" in done.stderr and "1 run record cannot be read" in done.stderr


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_a_bad_dir_is_one_line_and_exit_2(tmp_path, where):
    (tmp_path / "a-file").write_text("x")
    assert_one_line_error(dsinspect("runs", str(tmp_path / where)), 2, "no such directory")


def test_bad_steps_and_an_empty_folder(runs_dir, tmp_path):
    assert_one_line_error(dsinspect("runs", str(runs_dir / "runs" / "resumed"), "--steps", "x"), 2,
                          "steps must look like")
    empty = dsinspect("runs", str(tmp_path))
    assert empty.returncode == 0 and "no run records in" in empty.stdout


def test_tui_takes_a_run_record_directory(runs_dir):
    """`dsinspect tui RUNDIR` opens the run screen (tests/test_tui_runs.py drives it): without a
    terminal it gets as far as asking for one, where a path was a malformed address before."""
    done = subprocess.run([sys.executable, "-m", "dsinspect", "tui", str(runs_dir / "runs" / "resumed")],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert_one_line_error(done, 2, "dsinspect tui needs a terminal")
    assert_one_line_error(dsinspect("tui", str(runs_dir / "runs" / "nope")), 2, "bad dataset name")


def test_a_run_is_named_by_its_folder_in_catalog_runs(runs_dir, tmp_path):
    """`dsinspect runs NAME` finds what `dsinspect runs` lists, as replay does; a path typed wins."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}
    done = subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(runs_dir), "runs", "resumed"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=elsewhere)
    assert done.returncode == 0 and done.stdout.startswith("run resumed") and "segments" in done.stdout, done.stderr
    assert_one_line_error(dsinspect("runs", "no-such-run", catalog=runs_dir), 2, "no such directory")


def test_runs_before_the_first_run_lists_none(tmp_path):
    """A catalog no job has recorded into yet has no runs/: none listed, not an error."""
    catalog = toy_catalog(str(tmp_path / "cat"))
    done = dsinspect("runs", catalog=catalog.url)
    assert done.returncode == 0 and done.stdout.startswith("no run records in ") and done.stderr == "", done.stderr
    assert_one_line_error(dsinspect("runs", catalog=tmp_path / "nowhere"), 2, "does not exist")


def test_check_log_of_an_unknown_name_says_so(runs_dir):
    done = dsinspect("replay", "--check-log", "no-such-run", catalog=runs_dir)
    assert_one_line_error(done, 2, "--check-log no-such-run: no such fingerprint log or run record")
    assert str(runs_dir / "runs") in done.stderr  # where a name is looked up

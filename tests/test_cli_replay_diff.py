"""`dsinspect replay` and `dsinspect diff` as people and scripts use them: output, JSON, exit codes."""

import json
import os
import pty
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from replay_diff_fixtures import STEP_FIELDS, make_catalog, rewrite_shard, run_job, seeded_jitter, step_updates, steps

from dsinspect.defaults import BUNDLED
from dsinspect.demo.build import DATASETS
from dsinspect.loaders import Loader
from dsinspect.loaders.audit.replay import replay
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.derive import derive_version
from dsinspect.loaders.store.writer import WriteOptions

RECORD = json.loads((BUNDLED / "sample-data.json").read_text())


def one_line_error(err, *fragments):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def job(tmp_path):
    cat = make_catalog(tmp_path / "cat")
    spec = RunSpec.create(cat, {"toy": 2.0, "other": 1.0}, batch_size=5, world_size=2, seed=6, mixture_block=12)
    record = tmp_path / "run"
    seen = run_job(cat, spec, 12, str(record))
    return cat, spec, record, seen


def test_replay_json_from_a_run_record_equals_the_api_and_the_loader(cli, job):
    cat, spec, record, seen = job
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 7, "--rank", 1, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["fingerprints"] == {"1": seen[(7, 1)].fingerprint}
    assert [s["index"] for s in data["samples"]] == [int(i) for i in seen[(7, 1)].indices]
    assert data["samples"] == [s.to_json() for s in replay(spec, 7, 1, cat).samples]
    assert data["spec_hash"] == spec.hash and len(data["fields"]) == 5
    assert set(data["fields"][0]) == {"id", "tokens", "blob"}


def test_replay_by_flags_equals_the_spec_file(cli, tmp_path):
    spec = RunSpec.create(Catalog(str(BUNDLED)), "demo-text@v1", seed=3, batch_size=4, world_size=2, shuffle="window",
                          window_shards=2, last_batch="pad")
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    by_file = cli("replay", "--spec", path, "--step", 30, "--rank", "all", "--json")
    by_flags = cli("replay", "--address", "demo-text@v1", "--seed", 3, "--batch-size", 4, "--world-size", 2,
                   "--shuffle", "window", "--window-shards", 2, "--last-batch", "pad", "--step", 30, "--rank", "all",
                   "--json")
    assert by_file[0] == by_flags[0] == 0 and json.loads(by_file[1]) == json.loads(by_flags[1])
    assert json.loads(by_file[1])["ranks"] == [0, 1]


def test_replay_human_output_shows_provenance_previews_and_fingerprint(cli):
    code, out, _ = cli("replay", "--address", "demo-text@v1=1", "--address", "demo-images@v1=1", "--batch-size", 6,
                       "--step", 10**7)
    assert code == 0 and "step 10000000" in out and "fingerprint (stored)" in out
    code, out, _ = cli("replay", "--address", "demo-text@v1", "--batch-size", 3, "--step", 4)
    assert "tokens [" in out and "shard:row" in out
    bundled = Catalog(str(BUNDLED))
    expected = replay(RunSpec.create(bundled, "demo-text@v1", batch_size=3), 4, 0, bundled).fingerprints[0]
    assert expected in out
    code, out, _ = cli("replay", "--address", "demo-images@v1", "--batch-size", 3, "--step", 1)
    assert "PNG" in out or "JPEG" in out
    code, out, _ = cli("replay", "--address", "demo-rl@v1", "--batch-size", 2, "--step", 1)
    assert "steps, return" in out
    code, out, _ = cli("replay", "--address", "demo-video@v1", "--batch-size", 2, "--step", 1)
    assert "MP4" in out


def test_check_log_passes_then_names_the_first_divergence(cli, job):
    cat, _, record, seen = job
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record)
    assert code == 0 and "24 log lines" in out and "match" in out
    target = next(int(i) for k, i in zip(seen[(5, 1)].sources, seen[(5, 1)].indices) if k == 0)  # a toy row read
    rewrite_shard(cat.resolve("toy"), target, "tokens", [1, 2, 3], rehash=False)
    first = next((s, r) for (s, r), b in sorted(seen.items())
                 if any(k == 0 and i == target for k, i in zip(b.sources, b.indices)))
    code, out, err = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record, "--steps", "0:12")
    assert code == 1 and f"first divergence at step {first[0]}, rank {first[1]}" in out
    position = [int(i) for i in seen[first].indices].index(target)  # the record's per-sample digests name it
    one_line_error(err, f"step {first[0]}, rank {first[1]}, position {position} (index {target})")
    assert "those rows as the catalog holds them now" in out and "3 tokens [1, 2, 3]" in out  # the edited row
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log",
                       record / "fingerprints" / f"rank-{first[1]:05d}.jsonl", "--json")
    report = json.loads(out)
    assert code == 1 and report["divergence"]["step"] == first[0]
    assert report["divergence"]["samples"][0]["index"] == target
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record,
                       "--steps", f"0:{first[0]}", "--json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_replay_of_a_damaged_row_shows_the_batch_then_exits_1(cli, job):
    cat, _, record, seen = job
    target = next(int(i) for k, i in zip(seen[(4, 0)].sources, seen[(4, 0)].indices) if k == 0)
    position = [int(i) for i in seen[(4, 0)].indices].index(target)
    rewrite_shard(cat.resolve("toy"), target, "tokens", [9, 9, 9], rehash=False)  # the stored row hash stays
    code, out, err = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 4, "--rank", 0)
    assert code == 1 and "fingerprint (stored)" in out and f"position {position} (index {target}" in out
    one_line_error(err, f"step 4: rank 0 position {position} (index {target}", "no longer hash")
    code, out, err = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 4, "--rank", 0, "--json")
    samples = json.loads(out)["samples"]  # the JSON is printed whole before the exit
    assert code == 1 and [s["verified"] for s in samples].count(False) == 1 and samples[position]["verified"] is False
    one_line_error(err, "no longer hash")


def test_replay_past_the_record_says_where_the_record_ends(cli, job):
    cat, spec, record, _ = job
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 10**6, "--rank", 1)
    assert code == 0 and "the run's record ends at step 11; step 1000000 is past it" in out
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 10**6, "--rank", 1, "--json")
    data = json.loads(out)
    assert code == 0 and data["record_end"] == 11 and data["beyond_record"] is True
    assert data["fingerprints"] == {"1": replay(spec, 10**6, 1, cat).fingerprints[1]}
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 11, "--rank", 1)
    assert code == 0 and "record ends" not in out


def drop_lines(record, rank, steps):
    """Lose a rank's lines for `steps` from the record, as a kill that lost them would."""
    path = record / "fingerprints" / f"rank-{rank:05d}.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(x for x in lines if json.loads(x).get("step") not in steps))


def test_check_log_names_gaps_and_fails_unless_allowed(cli, job):
    cat, _, record, _ = job
    drop_lines(record, 1, range(4, 7))
    code, out, err = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record)
    assert code == 1 and "21 log lines" in out and "gaps: 1 gap (3 (step, rank) pairs)" in out
    assert "steps 4..6, rank 1" in out and "record: ends at step 11 in 1 segment; 0 superseded lines" in out
    one_line_error(err, "1 gap", "steps 4..6, rank 1", "--allow-gaps")
    code, out, err = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record, "--allow-gaps")
    assert code == 0 and err == "" and "allowed by --allow-gaps" in out
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record, "--steps", "0:20",
                       "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["record_end"] == 11
    assert report["gaps"] == [{"steps": [4, 6], "ranks": [1]}, {"steps": [12, 19], "ranks": [0, 1]}]
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record, "--steps", "7:12")
    assert code == 0 and "gaps" not in out
    code, _, err = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 3, "--allow-gaps")
    assert code == 2
    one_line_error(err, "--allow-gaps goes with --check-log")


def test_check_log_of_a_resumed_run_counts_superseded_lines_and_passes(cli, tmp_path):
    cat = make_catalog(tmp_path / "cat")
    spec = RunSpec.create(cat, "toy", batch_size=3, world_size=1, seed=4)
    record = tmp_path / "run"
    with Loader(spec, rank=0, catalog=cat, record_dir=str(record)) as first:
        batches = iter(first)
        for _ in range(4):
            next(batches)
        state = first.state_dict()  # a checkpoint after step 3; the job goes on to step 6, then dies
        for _ in range(3):
            next(batches)
    with Loader(spec, rank=0, catalog=cat, record_dir=str(record)) as resumed:
        resumed.load_state_dict(state)
        batches = iter(resumed)
        assert [next(batches).step for _ in range(5)] == [4, 5, 6, 7, 8]
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record)
    assert code == 0 and "ok: 9 log lines (steps 0..8" in out
    assert "record: ends at step 8 in 2 segments; 3 superseded lines" in out
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record, "--json")
    assert code == 0 and json.loads(out)["superseded"] == 3 and json.loads(out)["segments"] == 2


def stderr_on_a_terminal(*argv):
    """Run `python -m dsinspect ARGV` with stderr on a pseudo-terminal: (exit code, stdout, what the terminal got)."""
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("DSINSPECT_CATALOG", "NO_COLOR")}
    proc = subprocess.Popen([sys.executable, "-m", "dsinspect", *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=terminal, env={**env, "COLUMNS": "160"})
    os.close(terminal)
    seen = b""
    while True:  # read until the child's side closes (EIO on Linux): no timing involved
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    out = proc.stdout.read().decode()
    code = proc.wait(timeout=120)
    os.close(controller)
    return code, out, seen.decode(errors="replace")


def test_check_log_progress_goes_to_a_terminal_only(job):
    cat, _, record, _ = job
    code, out, terminal = stderr_on_a_terminal("--catalog", cat.url, "replay", "--spec", record, "--check-log", record,
                                               "--json")
    assert code == 0 and json.loads(out)["checked"] == 24  # stdout holds the JSON and nothing else
    assert "checking log" in terminal and "24/24 lines" in terminal and "lines/s" in terminal
    done = subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", cat.url, "replay", "--spec", record,
                           "--check-log", record], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""  # no terminal: no progress


def test_transform_shows_the_batch_as_stored_and_as_transformed(cli, tmp_path):
    cat = make_catalog(tmp_path / "cat")
    spec = RunSpec.create(cat, "toy", batch_size=4, world_size=1, seed=2)
    record = tmp_path / "run"
    seen = run_job(cat, spec, 3, str(record), transform=seeded_jitter, log_transformed=True)
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 2,
                       "--transform", "replay_diff_fixtures:seeded_jitter", "--json")
    data = json.loads(out)
    assert code == 0 and data["transformed"]["ranks"]["0"]["rows"][0].keys() == {"id", "tokens", "noise"}
    assert data["fingerprints"]["0"] == seen[(2, 0)].fingerprint
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 2,
                       "--transform", "replay_diff_fixtures:seeded_jitter")
    assert "as transformed (rank 0)" in out and "fingerprint (transformed)" in out
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record,
                       "--transform", "replay_diff_fixtures:seeded_jitter")
    assert code == 0 and "3 transformed" in out
    code, _, err = cli("--catalog", cat.url, "replay", "--spec", record, "--check-log", record)
    assert code == 2
    one_line_error(err, "pass the job's transform")


def test_export_writes_parquet_and_receipt(cli, job, tmp_path):
    cat, spec, record, seen = job
    code, out, _ = cli("--catalog", cat.url, "replay", "--spec", record, "--step", 3, "--rank", "all",
                       "--export", tmp_path / "bug", "--json")
    data = json.loads(out)
    parquet = tmp_path / "bug" / data["export"]["parquet"]["file"]
    receipt = json.loads((tmp_path / "bug" / data["export"]["receipt"]).read_text())
    table = pq.read_table(parquet)
    assert code == 0 and table.num_rows == 10 and receipt["fingerprints"] == data["fingerprints"]
    rows = table.to_pylist()
    batch = seen[(3, 1)]
    assert [r["blob"] for r in rows[5:]] == batch.table.column("blob").to_pylist()
    assert [r["__dsinspect_row_hash"] for r in rows[5:]] == batch.row_hashes


@pytest.mark.parametrize("args, fragment", [
    (["replay", "--step", "1"], "name the run"),
    (["replay", "--address", "demo-text@v1", "--batch-size", "2"], "--step"),
    (["replay", "--spec", "nowhere.json", "--step", "1"], "no such run spec"),
    (["replay", "--spec", "x.json", "--seed", "3", "--step", "1"], "not both"),
    (["replay", "--address", "demo-text@v1", "--step", "1", "--rank", "5"], "outside the world size"),
    (["replay", "--address", "demo-text@v1", "--step", "1", "--transform", "nope"], "package.module:function"),
    (["replay", "--address", "demo-text@v1", "--step", "1", "--transform", "replay_diff_fixtures:explode"],
     "has no attribute"),
    (["replay", "--address", "demo-nope", "--step", "1"], "demo-nope"),
    (["diff", "demo-text@v1", "demo-text@v9"], "v9"),
    (["diff", "demo-text@v1", "demo-text@v2", "--limit", "-1"], "--limit"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, fragment):
    code, _, err = cli(*args)
    assert code == 2
    one_line_error(err, fragment)


def test_a_failing_transform_is_one_line(cli):
    code, _, err = cli("replay", "--address", "demo-text@v1", "--step", "1", "--transform", "json:loads")
    assert code == 2
    one_line_error(err, "transform json:loads raised TypeError")


@pytest.mark.parametrize("name", DATASETS)  # the stream's snapshots too: rollouts added
def test_diff_json_reports_what_the_generator_changed(cli, name):
    want = RECORD["datasets"][name]
    code, out, _ = cli("diff", f"{name}@v1", f"{name}@v2", "--json", "--limit", 100)
    rows = json.loads(out)["rows"]
    assert code == 0 and rows["matched_by"] == "key"
    assert sorted(x["key"] for x in rows["added"]) == sorted(want["added"])
    assert sorted(x["key"] for x in rows["removed"]) == sorted(want["removed"])
    assert {str(x["key"]): sorted(x["fields"]) for x in rows["changed"]} == want["updated"]
    assert rows["counts"]["moved"] == 0 and json.loads(out)["schema"] == []


def test_diff_human_summary_and_self_diff(cli):
    code, out, _ = cli("diff", "demo-text@v1", "demo-text@v2")
    assert code == 0
    assert "rows (matched by key 'doc_id'): 3 added, 1 removed, 2 changed, 0 moved" in out
    assert "shards: 2 shared, 3 added, 2 removed" in out and "first difference at" in out
    code, out, _ = cli("diff", "demo-images@v1", "demo-images@v2", "--limit", 1)
    assert "the first 1 shown" in out and "of pixels differ" in out
    code, out, _ = cli("diff", "demo-rl@v2", "demo-rl@v2")
    assert code == 0 and "no changes" in out


def test_diff_field_counts_are_exact_under_the_default_limit(cli, tmp_path):
    cat = Catalog(str(tmp_path / "cat"))
    a = cat.write_version("steps", steps(600), STEP_FIELDS, key="id", options=WriteOptions(shard_rows=100))
    update, truth = step_updates(600)
    derive_version(a, update=update, tags=["v2"], options=WriteOptions(shard_rows=100))
    code, out, _ = cli("--catalog", cat.url, "diff", f"steps@{a.id}", "steps@v2")
    assert code == 0 and f"{len(update):,} changed" in out and "the first 20 shown" in out
    assert "fields changed: " + ", ".join(f"{n} ({truth[n]})" for n in sorted(truth)) in out
    code, out, _ = cli("--catalog", cat.url, "diff", f"steps@{a.id}", "steps@v2", "--json")
    rows = json.loads(out)["rows"]
    assert rows["fields"] == truth and len(rows["changed"]) == 20 and rows["counts"]["changed"] == len(update)


def test_real_process_entry_point():
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}
    done = subprocess.run([sys.executable, "-m", "dsinspect", "diff", "demo-video@v1", "demo-video@v2", "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"]["counts"]["changed"] == 1
    done = subprocess.run([sys.executable, "-m", "dsinspect", "replay", "--address", "demo-video@v1", "--step", "x"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr

"""A stream learner's record from the shell (cli/replay_learner.py): `replay --spec RUN --step N` shows the
rollouts each rank consumed, read back from the commits after the stream moved on; `--check-log RUN`
checks the whole record (exit 1 naming the first difference); `runs` lists it beside Loader records."""

from __future__ import annotations

import json
import shutil

import pytest

from dsinspect.defaults import BUNDLED
from dsinspect.loaders import Catalog
from dsinspect.loaders.stream import StreamLearner, open_stream

VERSIONS = (6, 6, 6, 7, 7, 7, 7, 7)  # the learner's policy version at each step


@pytest.fixture
def learned(tmp_path):
    """demo-rollouts consumed by a 2-rank learner (4 a rank, staleness bound 1) into CATALOG/runs/learner."""
    shutil.copytree(BUNDLED, tmp_path / "catalog")
    catalog = Catalog(str(tmp_path / "catalog"))
    ranks = [StreamLearner(catalog, "demo-rollouts", 4, rank=r, world_size=2, staleness_bound=1,
                           record_dir=str(tmp_path / "catalog" / "runs" / "learner")) for r in range(2)]
    consumed = {}
    for step, version in enumerate(VERSIONS):
        for learner in ranks:
            consumed[(step, learner.rank)] = learner.next_batch(version).rows.column("rollout_id").to_pylist()
    for learner in ranks:
        learner.close()
    return catalog, consumed


def test_replay_shows_what_each_rank_consumed_even_after_the_stream_moved_on(learned, cli):
    catalog, consumed = learned
    stream = open_stream(catalog, "demo-rollouts")
    rows = catalog.resolve("demo-rollouts@v1").take(range(4), [f.name for f in stream.spec.fields]).to_pylist()
    stream.append([{**row, "rollout_id": 1000 + i} for i, row in enumerate(rows)], writer="late")
    code, out, err = cli("replay", "--spec", "learner", "--step", 7, "--rank", "all", "--json",
                         "--catalog", catalog.url)
    assert code == 0, err
    shown = json.loads(out)
    assert [[r["key"] for r in rank["rollouts"]] for rank in shown["ranks"]] == [consumed[(7, 0)], consumed[(7, 1)]]
    assert all(rank["ok"] and rank["learner_version"] == 7 for rank in shown["ranks"])
    dropped = shown["ranks"][0]["dropped"]
    assert dropped == [[7, 0, 4]]  # group 14, sampled by policy 4, dropped at version 7 with bound 1
    code, out, _ = cli("replay", "--spec", "learner", "--step", 2, "--catalog", catalog.url)
    assert code == 0 and "learner step 2" in out and "policy version 6, staleness bound 1" in out
    assert all(str(k) in out for k in consumed[(2, 0)]) and "✓ matches" in out


def test_check_log_passes_on_the_record_and_names_a_line_that_lies(learned, cli, tmp_path):
    catalog, _ = learned
    code, out, err = cli("replay", "--check-log", "learner", "--catalog", catalog.url)
    assert code == 0 and "✓ the record matches the stream" in out, err
    code, out, err = cli("replay", "--check-log", "learner", "--json", "--catalog", catalog.url)
    result = json.loads(out)
    assert code == 0 and result["replayed"] and (result["lines"], result["consumed"], result["dropped"]) == (16, 64, 4)
    log = tmp_path / "catalog" / "runs" / "learner" / "fingerprints" / "rank-00001.jsonl"
    lines = log.read_text().splitlines()
    entry = json.loads(lines[3])
    entry["rows"] = [[entry["rows"][0][0], entry["rows"][0][1] + 1, entry["rows"][0][2]]]
    lines[3] = json.dumps(entry)
    log.write_text("\n".join(lines) + "\n")
    code, out, err = cli("replay", "--check-log", "learner", "--json", "--catalog", catalog.url)
    assert code == 1 and json.loads(out)["ok"] is False
    assert err.count("\n") == 1 and f"step {entry['step']}, rank 1: consumed 4 rows" in err


def test_learner_records_in_runs_and_one_line_refusals(learned, cli):
    catalog, _ = learned
    code, out, err = cli("runs", "--json", "--catalog", catalog.url)
    assert code == 0, err
    run = next(r for r in json.loads(out)["runs"] if r["name"] == "learner")  # beside the demo's own
    assert run["kind"] == "learner" and run["sources"] == ["demo-rollouts (stream)"] and run["lines"] == 16
    for args, message in [(("--step", 99), "the record ends at step 7"),
                          (("--step", 1, "--rank", 5), "rank 5 is outside step 1's world size 2"),
                          (("--step", 1, "--export", "x"), "a stream learner's record: --address, --transform"),
                          ((), "give --step N")]:
        code, _, err = cli("replay", "--spec", "learner", *args, "--catalog", catalog.url)
        assert code == 2 and message in err and err.count("\n") == 1, err


def test_the_sample_catalog_ships_a_demo_learner_whose_record_checks(cli, monkeypatch, tmp_path):
    from dsinspect.demo.learner import write_demo_learner

    monkeypatch.delenv("DSINSPECT_CATALOG", raising=False)
    code, out, err = cli("replay", "--check-log", "demo-learner", "--json")
    result = json.loads(out)
    assert code == 0 and result["ok"] and result["replayed"] and result["superseded"] == 4, err
    shutil.copytree(BUNDLED / "datasets", tmp_path / "catalog" / "datasets")
    write_demo_learner(Catalog(str(tmp_path / "catalog")))  # made again: the same lines, but for the clock

    def lines(root):
        found = {}
        for path in sorted((root / "runs" / "demo-learner" / "fingerprints").iterdir()):
            found[path.name] = [{k: v for k, v in json.loads(line).items() if k != "time"}
                                for line in path.read_text().splitlines()]
        return found

    assert lines(tmp_path / "catalog") == lines(BUNDLED)

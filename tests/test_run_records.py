"""Run records across crashes and resumes: segments and their lineage, superseded lines, gaps, lines a
kill loses and `state_dict()` keeps, per-sample digests, old records, and states of different checkpoints."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from run_fixtures import segment as run  # every rank of one segment reads, resuming, saving states

from dsinspect.errors import UserError
from dsinspect.loaders import Catalog, Field, Loader, LoaderState, RunSpec, WriteOptions, derive_version
from dsinspect.loaders.audit.logcheck import check_log
from dsinspect.loaders.order.state import check_states
from dsinspect.loaders.records.run import read_run
from dsinspect.loaders.records.runlog import read_log

ROWS = 600


@pytest.fixture
def cat(tmp_path):
    catalog = Catalog(str(tmp_path / "cat"))
    rows = [{"id": i, "tokens": [(i * 7 + j) % 1000 for j in range(160)]} for i in range(ROWS)]
    catalog.write_version("toy", rows, [Field("id", pa.int64(), "scalar", nullable=False),
                                        Field("tokens", pa.list_(pa.int32()), "tokens")],
                          options=WriteOptions(row_group_rows=50, shard_rows=150))
    return catalog


def spec_of(cat, world=2, batch=4, **kw):
    return RunSpec.create(cat, "toy", seed=5, batch_size=batch, world_size=world, shuffle="global", **kw)


def test_a_resume_from_an_older_checkpoint_supersedes_the_rolled_back_lines(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = spec_of(cat, world=3)
    saved = run(cat, spec, record, 30, save_at=(9, 19))                      # A: steps 0..29
    run(cat, spec.replace(world_size=2), record, 5, resume=saved[19])       # B: 20..24, then "killed"
    run(cat, spec.replace(world_size=2), record, 25, resume=saved[9])       # C: 10..34, from the older state
    rec = read_run(record)
    assert [(s.start, s.world_size) for s in rec.chain] == [(10, 2), (0, 3)]
    assert rec.superseded == 3 * 20 + 2 * 5  # A's 10..29 and all of B
    result = check_log(record, record, catalog=cat)
    assert result.ok and result.checked == 3 * 10 + 2 * 25 and result.gaps == [] and result.steps == (0, 34)


def test_the_kept_history_follows_parents_past_an_abandoned_branch(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = spec_of(cat)
    a = run(cat, spec, record, 30, save_at=(19,))                             # A: 0..29
    b = run(cat, spec, record, 20, resume=a[19], save_at=(34,))               # B: 20..39, saves at 34
    run(cat, spec.replace(world_size=1), record, 8, resume=a[19])             # C: 20..27 from A's state again
    run(cat, spec.replace(world_size=1), record, 10, resume=b[34])            # D: 35..44 from B's state
    rec = read_run(record)
    assert [s.start for s in rec.chain] == [35, 20, 0]  # D <- B <- A: C is abandoned
    assert rec.segment_at(25).world_size == 2
    result = check_log(record, record, catalog=cat)
    assert result.ok and result.checked == 2 * 20 + 2 * 15 + 10 and result.superseded == 2 * 10 + 8 + 2 * 5


def test_a_skipped_step_range_is_a_gap(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = spec_of(cat)
    first = run(cat, spec, record, 10, save_at=(9,))
    segment = first[9]["segment"]
    run(cat, spec, record, 10, resume=LoaderState.at(spec, 20, 0, segment).to_json())  # steps 10..19 never read
    result = check_log(record, record, catalog=cat)
    assert not result.ok and result.divergence is None and result.checked == 40
    assert [(g.first, g.last, g.ranks) for g in result.gaps] == [(10, 19, (0, 1))]
    assert str(result.gaps[0]) == "steps 10..19, ranks 0-1"
    assert check_log(record, record, catalog=cat, allow_gaps=True).ok
    # asked for steps past the record's end: one gap naming them; an open range stops at the end
    late = check_log(record, record, "25:40", catalog=cat, allow_gaps=False)
    assert [(g.first, g.last) for g in late.gaps] == [(30, 39)] and late.record_end == 29
    assert check_log(record, record, "20:", catalog=cat).ok


def test_one_rank_missing_is_named(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = spec_of(cat, world=3)
    run(cat, spec, record, 6)
    path = os.path.join(record, "fingerprints", "rank-00001.jsonl")
    lines = open(path).read().splitlines(keepends=True)
    with open(path, "w") as f:  # rank 1's steps 2 and 3 were never written
        f.writelines(line for line in lines if json.loads(line).get("step") not in (2, 3))
    gaps = check_log(record, record, catalog=cat).gaps
    assert [(g.first, g.last, g.ranks) for g in gaps] == [(2, 3, (1,))]


KILLED_JOB = textwrap.dedent("""
    import os, signal, sys
    from dsinspect.loaders import Catalog, Loader, RunSpec
    cat = Catalog(sys.argv[1])
    spec = RunSpec.create(cat, "toy", seed=5, batch_size=4, world_size=1, shuffle="global")
    loader = Loader(spec, 0, cat, record_dir=sys.argv[2])
    it = iter(loader)
    for _ in range(20):
        next(it)
    with open(sys.argv[3], "w") as f:
        import json; json.dump(loader.state_dict(), f)
    for _ in range(int(sys.argv[4])):
        next(it)
    os.kill(os.getpid(), signal.SIGKILL)   # the buffered lines of steps after the state die with it
""")


def test_a_kill_loses_only_lines_after_the_last_state_and_the_resume_covers_them(cat, tmp_path):
    record, state_file = str(tmp_path / "run"), str(tmp_path / "state.json")
    job = subprocess.run([sys.executable, "-c", KILLED_JOB, cat.url, record, state_file, "15"], timeout=120)
    assert job.returncode == -signal.SIGKILL
    steps = [e["step"] for e in read_log(record) if "step" in e]
    assert steps == list(range(20)), "state_dict() made steps 0..19 durable; 20..34 were still buffered"
    spec = spec_of(cat, world=1)
    run(cat, spec, record, 30, resume=json.load(open(state_file)))
    result = check_log(record, record, catalog=cat)
    assert result.ok and result.gaps == [] and result.checked == 50 and result.steps == (0, 49)


UNCLOSED_JOB = textwrap.dedent("""
    import sys
    from dsinspect.loaders import Catalog, Loader, RunSpec
    cat = Catalog(sys.argv[1])
    spec = RunSpec.create(cat, "toy", seed=5, batch_size=4, world_size=2, shuffle="global")
    loader = Loader(spec, 1, cat, record_dir=sys.argv[2])   # never closed, no state saved
    for batch in loader:
        if batch.step == 6:
            break
""")


def test_a_loader_never_closed_still_leaves_its_record(cat, tmp_path):
    record = str(tmp_path / "run")
    subprocess.run([sys.executable, "-c", UNCLOSED_JOB, cat.url, record], check=True, timeout=120)
    assert [e["step"] for e in read_log(record) if "step" in e] == list(range(7))
    assert check_log(record, record, catalog=cat, ranks=[1]).ok
    assert [str(g) for g in check_log(record, record, catalog=cat).gaps] == ["steps 0..6, rank 0"]  # never recorded


def test_digests_name_the_changed_positions_of_a_derived_version(cat, tmp_path):
    v1 = cat.resolve("toy")
    v2 = derive_version(v1, update={3: {"id": -3}, 400: {"id": -400}})
    record = str(tmp_path / "run")
    job = RunSpec.create(cat, f"toy@{v2.id}", seed=5, batch_size=4, world_size=2, shuffle="global")
    run(cat, job, record, 40)
    # 4-byte digests (5.3 base64 characters per sample) are < 1% of 652-byte rows: on by default
    assert all("samples" in e for e in read_log(record) if "step" in e)
    first = check_log(RunSpec.create(cat, f"toy@{v1.id}", seed=5, batch_size=4, world_size=2, shuffle="global"),
                      record, catalog=cat).divergence
    assert first is not None and len(first.positions) == 1
    sample = first.samples[0]
    assert sample.index in (3, 400) and sample.version == v1.id
    assert first.rows.column("id").to_pylist() == [sample.index]  # the row as v1 holds it (v2's id is negated)
    assert "not the rows the job read" in first.reason
    assert check_log(record, record, catalog=cat).ok  # against its own spec (v2): intact


def test_records_samples_off_and_auto(cat, tmp_path):
    spec = spec_of(cat, world=1)
    for setting, expected in ((False, False), (True, True)):
        record = str(tmp_path / f"run-{setting}")
        with Loader(spec, 0, cat, record_dir=record, record_samples=setting) as loader:
            next(iter(loader))
        assert all(("samples" in e) == expected for e in read_log(record) if "step" in e)
    with pytest.raises(UserError, match="record_samples"):
        Loader(spec, 0, cat, record_dir=str(tmp_path / "x"), record_samples="yes")
    # "auto" keeps the segment's first choice: the batch holding a row edited to nothing keeps its digests
    short = derive_version(cat.resolve("toy"), update={3: {"tokens": []}})
    record = str(tmp_path / "short")
    with Loader(RunSpec.create(cat, f"toy@{short.id}", batch_size=4), 0, cat, record_dir=record) as loader:
        steps = [b.step for b in loader if 3 in b.indices.tolist()]
    assert steps and all("samples" in e for e in read_log(record) if "step" in e)
    small = Catalog(str(tmp_path / "small"))
    small.write_version("ids", [{"id": i} for i in range(64)], [Field("id", pa.int64(), "scalar", nullable=False)])
    with Loader(RunSpec.create(small, "ids", batch_size=8), 0, small, record_dir=str(tmp_path / "ids")) as loader:
        next(iter(loader))
    assert all("samples" not in e for e in read_log(str(tmp_path / "ids")) if "step" in e)  # 8-byte rows: auto off


def test_an_old_record_without_segments_still_checks(cat, tmp_path):
    record = tmp_path / "old"
    spec = spec_of(cat)
    run(cat, spec, str(tmp_path / "new"), 8)
    (record / "specs").mkdir(parents=True)
    (record / "fingerprints").mkdir()
    (record / "specs" / "step-000000000000.json").write_text(spec.dumps())
    for rank in (0, 1):
        lines = [e for e in read_log(str(tmp_path / "new")) if "step" in e and e["rank"] == rank]
        old = [{k: e[k] for k in ("step", "rank", "epoch", "fingerprint", "n", "of")} for e in lines]
        text = "".join(json.dumps(e) + "\n" for e in old)
        (record / "fingerprints" / f"rank-{rank:05d}.jsonl").write_text(text + '{"step": 8, "ra')  # cut short
    result = check_log(str(record), str(record), catalog=cat)
    assert result.ok and result.checked == 16 and result.segments == 1


def test_states_of_different_steps_are_refused_naming_them(cat):
    spec = spec_of(cat, world=3)
    same = [LoaderState.at(spec, 12, r).to_json() for r in range(3)]
    check_states(same)
    mixed = [*same[:2], LoaderState.at(spec, 8, 2).to_json()]
    with pytest.raises(UserError, match=r"different steps \(step 8 on rank 2; step 12 on ranks 0, 1\)"):
        check_states(mixed)
    with pytest.raises(UserError, match="different data orders"):
        check_states({0: same[0], 1: LoaderState.at(spec.replace(seed=9), 12, 1).to_json()})


def test_states_of_one_step_at_another_position_or_of_another_segment_are_refused(cat):
    spec = spec_of(cat, world=2, batch=4)
    same = [LoaderState.at(spec, 12, r, "a1").to_json() for r in range(2)]
    check_states(same)
    # a checkpoint of a stretch read with half the global batch: the same step stands elsewhere in the order
    halved = LoaderState.at(spec_of(cat, world=2, batch=2), 12, 1, "a1").to_json()
    with pytest.raises(UserError, match=r"different positions in the order \(step 12 at epoch 0, position 96 on "
                                        r"rank 0; step 12 at epoch 0, position 48 on rank 1\)"):
        check_states([same[0], halved])
    with pytest.raises(UserError, match=r"different record segments \(segment a1 on rank 0; segment b2 on rank 1\)"):
        check_states([same[0], LoaderState.at(spec, 12, 1, "b2").to_json()])


def test_a_line_cut_by_a_kill_is_skipped_but_other_garbage_is_an_error(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = spec_of(cat, world=1)
    saved = run(cat, spec, record, 6, save_at=(2,))
    path = os.path.join(record, "fingerprints", "rank-00000.jsonl")
    with open(path, "rb+") as f:  # the last line cut mid-write, as a kill leaves it
        f.truncate(os.path.getsize(path) - 25)
    run(cat, spec, record, 4, resume=saved[2])  # the resumed writer ends the cut line, then its header
    result = check_log(record, record, catalog=cat)
    assert result.ok and result.checked == 7 and result.superseded == 2  # steps 3, 4 (5 was cut) re-run
    lines = open(path).read().splitlines(keepends=True)
    lines.insert(3, "not json\n")  # garbage between two step lines: not a kill's mark
    open(path, "w").writelines(lines)
    with pytest.raises(UserError, match=r"rank-00000.jsonl:4: not a fingerprint log line"):
        check_log(record, record, catalog=cat)

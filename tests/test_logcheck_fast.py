"""The windowed log check (audit/hashes.py) gives the per-line check's answer: the same first
divergence (step, rank, positions, reason), the same count of lines compared, on intact records,
resumed ones, changed rows, another spec, a mixture and transformed lines; progress reaches its total;
each row group is read once; any cache bound gives the same answer."""

from collections import Counter

import pyarrow as pa
import pytest
from conftest import TOY_FIELDS, toy_rows
from replay_diff_fixtures import rewrite_shard, run_job, seeded_jitter

from dsinspect.loaders import Catalog, LoaderState, RunSpec, WriteOptions, derive_version
from dsinspect.loaders.audit.divergence import check_line
from dsinspect.loaders.audit.logcheck import _segment_spec, check_log, parse_steps
from dsinspect.loaders.audit.replay import load_specs
from dsinspect.loaders.audit.rows import RowReader
from dsinspect.loaders.records.run import read_run
from dsinspect.loaders.records.runlog import spec_for_step
from dsinspect.loaders.store.version import DatasetVersion


@pytest.fixture
def cat(tmp_path):
    """Row groups of 4 rows: 75 + 13 groups, more than the per-line reader's 64 kept groups."""
    catalog = Catalog(str(tmp_path / "cat"))
    catalog.write_version("toy", toy_rows(300), TOY_FIELDS, key="id",
                          options=WriteOptions(shard_rows=40, row_group_rows=4))
    catalog.write_version("other", toy_rows(50, start=1000), TOY_FIELDS, key="id",
                          options=WriteOptions(shard_rows=20, row_group_rows=4))
    return catalog


def per_line(specs, log, cat, *, rehash=True, transform=None, steps=None):
    """The per-line check (check_log before hashes.py): every kept line read and compared on its own.
    Returns (lines compared, divergence as JSON or None)."""
    own = isinstance(specs, str)
    given = None if own else load_specs(specs)
    record = read_run(log, specs if own else None, given or ())
    lines = record.kept(parse_steps(steps), None)
    readers = {}
    for i, line in enumerate(lines):
        spec = spec_for_step(given, int(line["step"])) if given is not None else _segment_spec(record, line)
        if spec.order_hash not in readers:
            readers[spec.order_hash] = RowReader(Catalog(cat.url), spec)
        divergence = check_line(spec, readers[spec.order_hash], line, transform, rehash)
        if divergence is not None:
            return i + 1, divergence.to_json()
    return len(lines), None


def assert_agree(specs, log, cat, **kw):
    """check_log (with its default cache and a one-byte one) answers as the per-line check does."""
    expected = per_line(specs, log, cat, **kw)
    for bound in ({}, {"cache_bytes": 1}):
        result = check_log(specs, log, kw.get("steps"), catalog=Catalog(cat.url), transform=kw.get("transform"),
                           rehash=kw.get("rehash", True), **bound)
        got = (result.checked, result.divergence.to_json() if result.divergence else None)
        assert got == expected, bound
    return result


def resumed_run(cat, record):
    """Two segments: world size 2 for steps 0..9, then world size 3 (batch 4) resumed at 10, into epoch 1."""
    first = RunSpec.create(cat, {"toy": 1.0}, batch_size=7, world_size=2, shuffle="global", seed=5)
    seen = run_job(cat, first, 10, record)
    state = LoaderState.at(first, 10, 0)
    second = state.resume_spec(first.replace(world_size=3, batch_size=4))
    seen.update(run_job(cat, second, 25, record))
    return seen


def first_batch_holding(seen, source, index):
    for (step, rank), batch in sorted(seen.items()):
        hit = [i for i, (k, j) in enumerate(zip(batch.sources, batch.indices)) if k == source and j == index]
        if hit:
            return step, rank, hit
    raise AssertionError("never read")


@pytest.fixture
def group_reads(monkeypatch):
    """How many times each (version name, shard, row group) is read from its Parquet file."""
    reads = Counter()
    many, one = DatasetVersion.read_row_groups, DatasetVersion.read_row_group

    def read_row_groups(self, shard, groups, columns=None):
        reads.update((self.name, shard, g) for g in groups)
        return many(self, shard, groups, columns)

    def read_row_group(self, shard, group, columns=None):
        reads[(self.name, shard, group)] += 1
        return one(self, shard, group, columns)

    monkeypatch.setattr(DatasetVersion, "read_row_groups", read_row_groups)
    monkeypatch.setattr(DatasetVersion, "read_row_group", read_row_group)
    return reads


def test_an_intact_resumed_record_agrees_and_reads_each_row_group_once(cat, tmp_path, group_reads):
    record = str(tmp_path / "run")
    seen = resumed_run(cat, record)
    for rehash in (True, False):
        group_reads.clear()
        result = check_log(record, record, catalog=Catalog(cat.url), rehash=rehash)
        assert result.ok and result.checked == len(seen) and result.segments == 2
        assert group_reads and max(group_reads.values()) == 1  # the per-line reader kept 64 groups: read again
    assert_agree(record, record, cat)


def test_a_row_changed_in_place(cat, tmp_path):
    record = str(tmp_path / "run")
    seen = resumed_run(cat, record)
    rewrite_shard(cat.resolve("toy"), 123, "blob", b"tampered", rehash=False)
    step, rank, positions = first_batch_holding(seen, 0, 123)
    result = assert_agree(record, record, cat)
    d = result.divergence
    assert (d.step, d.rank, d.positions) == (step, rank, positions)
    assert "no longer hash to their stored row hash" in d.reason
    assert result.checked == sum(1 for key in seen if key < (step, rank)) + 1
    assert_agree(record, record, cat, steps=f"{step + 1}:")  # later lines alone: the next batch holding it
    # the stored hash column is unchanged: trusting it, nothing differs
    assert check_log(record, record, catalog=Catalog(cat.url), rehash=False).ok
    assert_agree(record, record, cat, rehash=False)


def test_a_record_checked_against_another_spec(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = RunSpec.create(cat, "toy", batch_size=6, world_size=2, seed=1, shuffle="global")
    seen = run_job(cat, spec, 30, record)
    d = assert_agree(spec.replace(seed=2), record, cat).divergence
    assert (d.step, d.rank, d.positions) == (0, 0, []) and "is this the job's run spec" in d.reason
    # a version with one row changed (derived: new shards, consistent hashes): the first line holding it
    v2 = derive_version(cat.resolve("toy"), update={200: {"blob": b"changed"}},
                        options=WriteOptions(shard_rows=40, row_group_rows=4))
    other = RunSpec.create(cat, f"toy@{v2.id}", batch_size=6, world_size=2, seed=1, shuffle="global")
    result = assert_agree(other, record, cat)
    step, rank, _ = first_batch_holding(seen, 0, 200)
    assert (result.divergence.step, result.divergence.rank) == (step, rank)
    assert_agree(other, record, cat, rehash=False)


def test_a_mixture_record(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = RunSpec.create(cat, {"toy": 2.0, "other": 1.0}, batch_size=6, world_size=3, shuffle="global", seed=11,
                          mixture_block=12)
    seen = run_job(cat, spec, 25, record)
    assert check_log(record, record, catalog=Catalog(cat.url)).checked == len(seen)
    assert_agree(record, record, cat)
    rewrite_shard(cat.resolve("other"), 31, "tokens", [9, 9, 9], rehash=True)  # a forger's consistent hashes
    d = assert_agree(record, record, cat).divergence
    step, rank, _ = first_batch_holding(seen, 1, 31)
    assert (d.step, d.rank) == (step, rank) and "sha256 mismatch" in d.reason
    assert_agree(record, record, cat, rehash=False)


def test_transformed_lines_take_the_per_line_path_alike(cat, tmp_path, group_reads):
    record = str(tmp_path / "run")
    spec = RunSpec.create(cat, "toy", batch_size=5, world_size=2, seed=8, shuffle="global")
    seen = run_job(cat, spec, 12, record, transform=seeded_jitter, log_transformed=True)
    group_reads.clear()
    assert check_log(record, record, catalog=Catalog(cat.url), transform=seeded_jitter).ok
    assert max(group_reads.values()) == 1  # row groups kept by bytes, not the last 64
    result = assert_agree(record, record, cat, transform=seeded_jitter)
    assert result.ok and result.sides == {"transformed": len(seen)}
    rewrite_shard(cat.resolve("toy"), 40, "tokens", [7, 7, 7, 7], rehash=True)
    step, rank, _ = first_batch_holding(seen, 0, 40)
    d = assert_agree(record, record, cat, transform=seeded_jitter).divergence
    assert (d.step, d.rank, d.of) == (step, rank, "transformed")


def test_progress_reaches_the_total(cat, tmp_path):
    record = str(tmp_path / "run")
    seen = resumed_run(cat, record)
    calls = []
    result = check_log(record, record, catalog=Catalog(cat.url), on_progress=lambda done, total: calls.append(
        (done, total)))
    assert result.ok and calls[-1] == (len(seen), len(seen))
    assert all(total == len(seen) for _, total in calls)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    calls.clear()
    narrow = check_log(record, record, "3:5", catalog=Catalog(cat.url), on_progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (narrow.checked, narrow.checked) == (4, 4)  # steps 3 and 4, two ranks each
    calls.clear()
    rewrite_shard(cat.resolve("toy"), 123, "blob", b"tampered", rehash=False)
    broken = check_log(record, record, catalog=Catalog(cat.url), on_progress=lambda d, t: calls.append((d, t)))
    assert all(done < broken.checked and total == len(seen) for done, total in calls)  # never past the divergence


def test_a_wrong_row_count_or_epoch_is_still_named(cat, tmp_path):
    spec = RunSpec.create(cat, "toy", batch_size=6, world_size=2, seed=1)
    record = str(tmp_path / "run")
    run_job(cat, spec, 4, record)
    lines = sorted(read_run(record).kept(), key=lambda e: (e["step"], e["rank"]))
    lines[3] = {**lines[3], "n": 5}
    d = assert_agree(spec, lines, cat).divergence
    assert (d.step, d.rank) == (lines[3]["step"], lines[3]["rank"]) and "logged 5 rows" in d.reason
    lines[3] = {**lines[3], "n": 6, "epoch": 2}
    assert "logged epoch 2" in assert_agree(spec, lines, cat).divergence.reason
    lines[3] = {**lines[3], "epoch": 0, "rank": 5}  # outside the world size: not evidence, counted as such
    result = assert_agree(spec, lines, cat)
    assert result.divergence is None and result.superseded == 1 and result.checked == len(lines) - 1


def test_rows_of_a_table_with_nulls_and_odd_types_hash_alike(tmp_path):
    """Re-hashed from row groups in bulk, rows hash as the per-line reader hashes them."""
    from dsinspect.loaders import Field
    cat = Catalog(str(tmp_path / "cat"))
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("name", pa.string(), "text"),
              Field("score", pa.float64(), "scalar"), Field("vec", pa.list_(pa.float32(), 2), "array")]
    rows = [{"id": i, "name": None if i % 3 else f"n{i}", "score": float("nan") if i % 5 == 0 else i / 3,
             "vec": None if i % 7 == 0 else [i, -i]} for i in range(90)]
    cat.write_version("odd", rows, fields, key="id", options=WriteOptions(shard_rows=30, row_group_rows=7))
    spec = RunSpec.create(cat, "odd", batch_size=8, world_size=2, seed=3, shuffle="global")
    record = str(tmp_path / "run")
    run_job(cat, spec, 20, record)
    assert assert_agree(record, record, cat).ok

"""Replay equals what the Loader yielded, at any step; the log check finds the first divergence."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from replay_diff_fixtures import make_catalog, rewrite_shard, run_job, seeded_jitter

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders.audit.export import RECEIPT_FORMAT, export_replay
from dsinspect.loaders.audit.logcheck import check_log, parse_steps
from dsinspect.loaders.audit.replay import load_specs, replay
from dsinspect.loaders.order.plan import batch_indices, plan_batch, steps_in_epoch
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.records.recorder import RunRecorder
from dsinspect.loaders.records.runlog import read_fingerprints, read_specs
from dsinspect.loaders.records.transforms import load_transform, transformed_fingerprint
from dsinspect.loaders.store.catalog import Catalog


@pytest.fixture
def cat(tmp_path):
    return make_catalog(tmp_path / "cat")


def fresh(cat):
    """Another handle on the same catalog, as a person checking later would open it."""
    return Catalog(cat.url)


def assert_same(replayed, batch):
    assert replayed.plan.step == batch.step and replayed.epoch == batch.epoch and replayed.rank == batch.rank
    for name in ("positions", "sources", "indices", "padding", "seeds"):
        assert np.array_equal(getattr(replayed.plan, name), getattr(batch.plan, name)), name
    assert replayed.row_hashes == batch.row_hashes
    assert replayed.fingerprint == batch.fingerprint
    assert replayed.table.equals(batch.table) and replayed.table.schema == batch.table.schema


SPECS = {
    "none-w1": dict(addresses="toy", shuffle="none", batch_size=8, world_size=1),
    "global-w3": dict(addresses="toy", shuffle="global", batch_size=7, world_size=3, seed=4),
    "window-w2-pad": dict(addresses="toy", shuffle="window", window_shards=2, batch_size=11, world_size=2,
                          last_batch="pad", seed=9),
    "global-w4-pad": dict(addresses="toy", shuffle="global", batch_size=16, world_size=4, last_batch="pad", seed=1),
    "mixture-w2": dict(addresses={"toy": 3.0, "other": 1.0}, shuffle="global", batch_size=6, world_size=2,
                       mixture_block=16, seed=2),
    "mixture-none-w3": dict(addresses={"toy": 1.0, "other": 1.0}, shuffle="none", batch_size=5, world_size=3,
                            mixture_block=8, epoch_size=90),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_replay_equals_what_the_loader_yielded(cat, tmp_path, name):
    options = dict(SPECS[name])
    spec = RunSpec.create(cat, options.pop("addresses"), **options)
    record = str(tmp_path / "run")
    steps = steps_in_epoch(spec, 0) + 3  # past an epoch boundary
    seen = run_job(cat, spec, steps, record)
    assert max(b.epoch for b in seen.values()) >= 1
    reader_cat = fresh(cat)
    rng = np.random.default_rng(0)
    for step, rank in [list(seen)[i] for i in rng.choice(len(seen), size=12, replace=False)]:
        result = replay(record, step, rank, reader_cat)
        assert_same(result.batches[0], seen[(step, rank)])
        for s in result.samples:  # provenance agrees with the catalog
            version = reader_cat.version(s.source, s.version)
            assert (s.shard, s.shard_row) == version.shard_of(s.index)
            assert s.row_hash == version.row_hash(s.index) and s.verified is True
    check = check_log(record, record, catalog=reader_cat)
    assert check.ok and check.checked == len(seen) == len(list(read_fingerprints(record)))
    assert check.sides == {"stored": len(seen)}


def test_rank_all_is_every_rank_in_order(cat):
    spec = RunSpec.create(cat, "toy", batch_size=5, world_size=3, seed=3)
    everything = replay(spec, 17, "all", cat)
    assert everything.ranks == [0, 1, 2] and len(everything.samples) == 15
    for rank in range(3):
        one = replay(spec, 17, rank, cat)
        assert one.fingerprints == {rank: everything.fingerprints[rank]}
        assert [s.index for s in one.samples] == [s.index for s in everything.samples if s.rank == rank]
    assert everything.table.num_rows == 15


def test_replay_is_arithmetic_at_any_step(cat):
    spec = RunSpec.create(cat, {"toy": 1.0, "other": 2.0}, batch_size=4, world_size=2, seed=7, mixture_block=16)
    far = 10**12
    result = replay(spec, far, 1, cat)
    plan = plan_batch(spec, far, 1)
    assert [s.index for s in result.samples] == batch_indices(spec, far, 1).tolist()
    assert result.epoch == plan.epoch > 10**9
    with Loader(spec, rank=1, catalog=cat) as loader:
        assert_same(result.batches[0], loader.batch_at(far))


def test_resumed_segment_with_another_world_size(cat, tmp_path):
    record = str(tmp_path / "run")
    first = RunSpec.create(cat, "toy", batch_size=7, world_size=2, shuffle="global", seed=5)
    seen = run_job(cat, first, 10, record)
    with Loader(first, rank=0, catalog=cat) as loader:
        loader.load_state_dict(LoaderState.at(first, 10, 0).to_json())
        state = loader.state_dict()
    second = LoaderState.from_json(state).resume_spec(first.replace(world_size=3, batch_size=4))
    seen.update(run_job(cat, second, 25, record))  # crosses into epoch 1
    assert [(s.start.step, s.world_size) for _, s in read_specs(record)] == [(0, 2), (10, 3)]
    for (step, rank), batch in seen.items():
        assert_same(replay(record, step, rank, cat).batches[0], batch)
    assert check_log(record, record, catalog=fresh(cat)).checked == len(seen)


def test_resuming_loader_keeps_the_first_segment_spec(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = RunSpec.create(cat, "toy", batch_size=5, world_size=1)
    with Loader(spec, catalog=cat, record_dir=record) as a:
        it = iter(a)
        for _ in range(3):
            next(it)
        state = a.state_dict()
    with Loader(spec.replace(world_size=2), rank=0, catalog=cat, record_dir=record) as b:
        b.load_state_dict(state)
    assert [(s.start.step, s.world_size) for _, s in read_specs(record)] == [(0, 1), (3, 2)]


# -- the log check finds the first divergence -------------------------------------------------------

def first_batch_holding(seen, source, index):
    """(step, rank, positions) of the first logged batch that read `index` of source number `source`."""
    for (step, rank), batch in sorted(seen.items()):
        hit = [i for i, (k, j) in enumerate(zip(batch.sources, batch.indices)) if k == source and j == index]
        if hit:
            return step, rank, hit
    raise AssertionError("never read")


@pytest.fixture
def recorded(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = RunSpec.create(cat, {"toy": 2.0, "other": 1.0}, batch_size=6, world_size=3, shuffle="global", seed=11,
                          mixture_block=12)
    return record, run_job(cat, spec, 25, record)


def test_row_changed_in_place_is_the_first_divergence(cat, recorded):
    record, seen = recorded
    assert check_log(record, record, catalog=fresh(cat)).ok
    rewrite_shard(cat.resolve("toy"), 123, "blob", b"tampered", rehash=False)
    step, rank, positions = first_batch_holding(seen, 0, 123)
    result = check_log(record, record, catalog=fresh(cat))
    d = result.divergence
    assert (d.step, d.rank, d.positions, d.of) == (step, rank, positions, "stored")
    assert "no longer hash to their stored row hash" in d.reason
    assert [s.index for s in d.samples] == [123] * len(positions) and d.logged == seen[(step, rank)].fingerprint
    assert result.checked == sum(1 for s, r in seen if (s, r) < (step, rank)) + 1
    # trusting the stored hash column cannot see bytes changed under an unchanged hash
    assert check_log(record, record, catalog=fresh(cat), rehash=False).ok


def test_forged_shard_with_consistent_hashes_is_found_by_its_sha256(cat, recorded):
    record, seen = recorded
    version = cat.resolve("other")
    rewrite_shard(version, 31, "tokens", [9, 9, 9], rehash=True)
    step, rank, _ = first_batch_holding(seen, 1, 31)
    batch = seen[(step, rank)]
    shard = version.shard_of(31)[0]
    expected = [i for i, (k, j) in enumerate(zip(batch.sources, batch.indices))
                if k == 1 and version.shard_of(int(j))[0] == shard]
    for rehash in (True, False):
        d = check_log(record, record, catalog=fresh(cat), rehash=rehash).divergence
        assert (d.step, d.rank, d.positions) == (step, rank, expected)
        assert "sha256 mismatch" in d.reason


def test_steps_and_ranks_narrow_the_check(cat, recorded):
    record, seen = recorded
    rewrite_shard(cat.resolve("toy"), 7, "blob", b"x", rehash=False)
    step, rank, _ = first_batch_holding(seen, 0, 7)
    later = check_log(record, record, steps=range(step + 1, 25), catalog=fresh(cat))
    assert later.divergence is None or later.divergence.step > step
    narrow = check_log(record, record, steps=f"{step}:{step + 1}", catalog=fresh(cat))
    assert narrow.divergence.step == step and narrow.steps == (step, step)
    others = [r for r in range(3) if r != rank]
    only_others = check_log(record, record, steps=f"{step}:{step + 1}", ranks=others, catalog=fresh(cat))
    assert only_others.checked == 2


def test_a_log_from_another_spec_diverges_at_once(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = RunSpec.create(cat, "toy", batch_size=6, world_size=2, seed=1)
    run_job(cat, spec, 4, record)
    d = check_log(spec.replace(seed=2), record, catalog=cat).divergence
    assert (d.step, d.rank, d.positions) == (0, 0, [])
    assert "is this the job's run spec" in d.reason
    lines = list(read_fingerprints(record))
    lines[0] = {**lines[0], "n": 5}
    assert "logged 5 rows" in check_log(spec, lines, catalog=cat).divergence.reason
    lines[0] = {**lines[0], "n": 6, "epoch": 3}
    assert "logged epoch 3" in check_log(spec, lines, catalog=cat).divergence.reason


def test_logged_row_hashes_pin_the_positions(cat, tmp_path):
    spec = RunSpec.create(cat, "toy", batch_size=6, world_size=1, seed=1)
    result = replay(spec, 3, 0, cat)
    hashes = [h.hex() for h in result.batches[0].row_hashes]
    hashes[4] = "00" * 16
    line = {"step": 3, "rank": 0, "epoch": 0, "fingerprint": "f" * 32, "n": 6, "of": "stored", "row_hashes": hashes}
    assert check_log(spec, [line], catalog=cat).divergence.positions == [4]


# -- transforms -------------------------------------------------------------------------------------

def test_transform_replays_a_seeded_augmentation_identically(cat, tmp_path):
    record = str(tmp_path / "run")
    spec = RunSpec.create(cat, "toy", batch_size=5, world_size=2, seed=8)
    seen = run_job(cat, spec, 6, record, transform=seeded_jitter, log_transformed=True)
    for (step, rank), batch in seen.items():
        result = replay(record, step, rank, cat, transform="replay_diff_fixtures:seeded_jitter")
        assert result.batches[0].transformed.equals(batch.transformed)
        assert result.transformed_fingerprints[rank] == transformed_fingerprint(batch.transformed)
        assert result.fingerprints[rank] == batch.fingerprint  # the stored side is shown too
    check = check_log(record, record, catalog=cat, transform=seeded_jitter)
    assert check.ok and check.sides == {"transformed": len(seen)}
    d = check_log(record, record, catalog=cat, transform="replay_diff_fixtures:unseeded_jitter").divergence
    assert (d.step, d.rank, d.of, d.positions) == (0, 0, "transformed", [])
    assert "transform's output differs" in d.reason
    with pytest.raises(UserError, match="pass the job's transform"):
        check_log(record, record, catalog=cat)


def test_transform_results_that_are_not_tables(cat):
    spec = RunSpec.create(cat, "toy", batch_size=3)
    result = replay(spec, 0, 0, cat, transform="replay_diff_fixtures:not_a_table")
    assert result.transformed_fingerprints == {} and "cannot fingerprint" in result.transform_error
    as_dict = replay(spec, 0, 0, cat, transform="replay_diff_fixtures:unseeded_jitter")
    assert len(as_dict.transformed_fingerprints[0]) == 32
    for bad in ("nomodule", "no_such_module_xyz:f", "replay_diff_fixtures:missing", "json:__name__"):
        with pytest.raises(UserError, match="transform"):
            load_transform(bad)


# -- export -----------------------------------------------------------------------------------------

def test_export_writes_rows_with_raw_bytes_and_a_receipt(cat, tmp_path):
    spec = RunSpec.create(cat, {"toy": 1.0, "other": 1.0}, batch_size=4, world_size=2, seed=3, mixture_block=8)
    result = replay(spec, 5, "all", cat)
    receipt = export_replay(result, str(tmp_path / "out"))
    table = pq.read_table(tmp_path / "out" / receipt["parquet"]["file"])
    stored = json.loads((tmp_path / "out" / receipt["receipt_file"]).read_text())
    assert stored["format"] == RECEIPT_FORMAT and stored["spec_hash"] == spec.hash and stored["step"] == 5
    assert stored["fingerprints"] == {str(r): fp for r, fp in result.fingerprints.items()}
    assert stored["indices"]["1"] == [int(i) for i in result.batches[1].indices]
    assert table.num_rows == 8
    for row, sample in zip(table.to_pylist(), result.samples):
        version = cat.version(sample.source, sample.version)
        original = version.row(sample.index)
        assert {k: row[k] for k in original} == original  # every field, bytes intact
        assert row["__dsinspect_index"] == sample.index and row["__dsinspect_source"] == sample.source
        assert row["__dsinspect_row_hash"] == sample.row_hash == version.row_hash(sample.index)
    assert RunSpec.from_json(stored["spec"]).hash == spec.hash


# -- inputs -----------------------------------------------------------------------------------------

def test_spec_sources_and_refusals(cat, tmp_path):
    spec = RunSpec.create(cat, "toy", batch_size=4)
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    assert load_specs(str(path)) == [spec] and load_specs(spec) == [spec]
    assert replay(str(path), 2, 0, cat).fingerprints == replay(spec, 2, 0, cat).fingerprints
    with pytest.raises(UserError, match="no such run spec"):
        load_specs(str(tmp_path / "missing.json"))
    with pytest.raises(UserError, match="outside the world size"):
        replay(spec, 0, 1, cat)
    with pytest.raises(UserError, match="rank must be"):
        replay(spec, 0, "two", cat)
    with pytest.raises(UserError, match="negative"):
        replay(spec, -1, 0, cat)
    with pytest.raises(UserError, match="steps must look like"):
        parse_steps("a:b")
    assert parse_steps("3:7") == range(3, 7) and parse_steps("4") == range(4, 5) and parse_steps(":2") == range(0, 2)
    other = RunSpec.create(cat, "other", batch_size=4)
    forged = RunSpec(tuple(s.__class__(s.name, s.version, (10, 10, 30)) for s in other.sources), batch_size=4)
    with pytest.raises(IntegrityError, match="shard sizes"):
        replay(forged, 0, 0, cat)


def test_the_engine_takes_its_catalog_explicitly(cat, monkeypatch):
    """No default catalog below the faces: $DSINSPECT_CATALOG is the CLI's, never the engine's."""
    monkeypatch.setenv("DSINSPECT_CATALOG", cat.url)
    spec = RunSpec.create(cat, "toy", batch_size=4)
    with pytest.raises(UserError, match=r"^Loader needs a catalog: Loader\(spec, rank, catalog=Catalog\(url\)\)$"):
        Loader(spec)
    with pytest.raises(UserError, match="^replay needs a catalog"):
        replay(spec, 0)
    with pytest.raises(UserError, match="^check_log needs a catalog"):
        check_log(spec, [])


def test_mixture_of_different_schemas_shows_common_fields(tmp_path):
    cat = make_catalog(tmp_path / "cat")
    import pyarrow as pa

    from dsinspect.loaders.format.manifest import Field
    cat.write_version("names", [{"id": i, "name": f"n{i}"} for i in range(30)],
                      [Field("id", pa.int64(), "scalar", nullable=False), Field("name", pa.string(), "text")])
    spec = RunSpec.create(cat, {"toy": 1.0, "names": 1.0}, batch_size=6, mixture_block=8)
    result = replay(spec, 2, 0, cat)
    assert result.batches[0].table.column_names == ["id"] and [f.name for f in result.fields] == ["id"]
    with Loader(spec, catalog=cat, columns=["id"]) as loader:
        assert loader.batch_at(2).fingerprint == result.fingerprints[0]
    with pytest.raises(UserError, match="no field"):
        replay(spec, 2, 0, cat, columns=["tokens"])


def test_recorder_log_side_is_read_back(cat, tmp_path):
    spec = RunSpec.create(cat, "toy", batch_size=4)
    rec = RunRecorder(str(tmp_path / "run"), 0)
    rec.begin(spec)
    rec.record(0, 0, replay(spec, 0, 0, cat).fingerprints[0], 4)
    rec.close()
    assert check_log(str(tmp_path / "run"), str(tmp_path / "run"), catalog=cat).ok

"""The Grain adapter (`dsinspect.loaders.grain`): Grain iterates one rank's batches in dsinspect's
order (element i is the batch of step start + i), through its transformations and its worker
processes (`mp_prefetch`, real processes), and its iterator state maps to a LoaderState exactly:
a Loader restored from the mapped state continues with the batch Grain would give next, and back.
A record names the steps the loop took, not the ones Grain made ahead."""

import numpy as np
import pytest

grain = pytest.importorskip("grain")

from absl import flags  # noqa: E402  (Grain's worker processes read its flags)
from token_catalog import token_catalog  # noqa: E402

from dsinspect.errors import UserError  # noqa: E402
from dsinspect.loaders import Catalog, Loader, LoaderState, RunSpec, batch_indices  # noqa: E402
from dsinspect.loaders.audit.logcheck import check_log  # noqa: E402
from dsinspect.loaders.grain import StepSource, grain_state, loader_state  # noqa: E402
from dsinspect.loaders.records.runlog import read_fingerprints  # noqa: E402

ROWS, WIDTH = 120, 4


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return token_catalog(tmp_path_factory.mktemp("grain") / "catalog", "g", ROWS, WIDTH, 5, shard_rows=40,
                         row_group_rows=10)


def spec_of(catalog, **options):
    return RunSpec.create(catalog, "g", seed=9, shuffle="global", **{"world_size": 2, "batch_size": 4, **options})


def check(element, spec, rank, catalog):
    want = batch_indices(spec, int(element["step"]), rank)
    assert element["indices"].tolist() == want.tolist()
    assert element["id"].tolist() == want.tolist()
    assert np.array_equal(element["tokens"], catalog.tokens[want])


def double(element):  # a Grain transformation (module level: picklable for worker processes)
    return {**element, "tokens": element["tokens"] * 2}


def test_grain_iterates_the_ranks_batches_in_order_through_its_transformations(catalog):
    spec = spec_of(catalog)
    source = StepSource(spec, catalog, rank=1, epochs=2)
    assert len(source) == 2 * (ROWS // 8)
    got = list(grain.MapDataset.source(source).map(double))
    assert [int(e["step"]) for e in got] == list(range(len(source)))
    for element in got:
        want = batch_indices(spec, int(element["step"]), 1)
        assert element["indices"].tolist() == want.tolist()
        assert np.array_equal(element["tokens"], 2 * catalog.tokens[want])


def test_grain_state_and_loader_state_map_to_each_other_exactly(catalog):
    spec = spec_of(catalog)
    source = StepSource(spec, catalog, rank=0)
    it = iter(grain.MapDataset.source(source).to_iter_dataset())
    for _ in range(5):
        next(it)
    state = loader_state(it.get_state(), source)
    assert state == LoaderState.at(spec, 5, 0).to_json()
    with Loader(spec, 0, catalog=catalog) as loader:  # a dsinspect Loader continues where Grain was
        loader.load_state_dict(state)
        mine = next(iter(loader))
    theirs = next(it)
    assert mine.step == int(theirs["step"]) == 5 and mine.indices.tolist() == theirs["indices"].tolist()
    again = iter(grain.MapDataset.source(source).to_iter_dataset())  # and back
    again.set_state(grain_state(state, source))
    assert int(next(again)["step"]) == 5


def test_a_state_of_another_world_size_resumes_through_a_source_of_the_resumed_spec(catalog):
    two = spec_of(catalog)
    state = LoaderState.at(two, 3, 0).to_json()
    one = spec_of(catalog, world_size=1, batch_size=8)
    with pytest.raises(UserError, match="another world or batch size"):
        grain_state(state, StepSource(one, catalog))
    resumed = LoaderState.from_json(state).resume_spec(one)
    first = next(iter(grain.MapDataset.source(StepSource(resumed, catalog))))
    both = np.concatenate([batch_indices(two, 3, r) for r in (0, 1)])
    assert sorted(first["indices"].tolist()) == sorted(both.tolist())


@pytest.mark.slow
def test_grain_worker_processes_keep_the_order_and_their_state_maps_too(catalog):
    flags.FLAGS.mark_as_parsed()
    spec = spec_of(catalog)
    source = StepSource(spec, catalog, rank=1)
    dataset = grain.MapDataset.source(source).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2))
    it = iter(dataset)
    first = [next(it) for _ in range(7)]
    for element in first:
        check(element, spec, 1, catalog)
    assert [int(e["step"]) for e in first] == list(range(7))
    state = loader_state(it.get_state(), source)
    assert state == LoaderState.at(spec, 7, 1).to_json()
    assert int(next(it)["step"]) == 7
    del it


def test_a_record_holds_the_elements_the_loop_took_and_refuses_to_record_otherwise(catalog, tmp_path):
    spec = spec_of(catalog)
    source = StepSource(spec, catalog, rank=1, record_dir=str(tmp_path / "run"))
    dataset = grain.MapDataset.source(source).map(double).to_iter_dataset()
    with pytest.raises(UserError, match=r"iterate source.recorded\(dataset\)"):  # a record of what was made ahead
        next(iter(dataset))
    with pytest.raises(UserError, match="takes the grain.IterDataset the loop iterates"):
        source.recorded(grain.MapDataset.source(source))
    dropped = source.recorded(dataset.map(lambda e: {"tokens": e["tokens"]}))
    with pytest.raises(UserError, match="has no 'step', 'epoch' or 'row_hashes'"):
        next(iter(dropped))
    assert StepSource(spec, catalog).recorded(dataset) is dataset  # nothing to record: the dataset as it is


@pytest.mark.slow
def test_a_record_over_worker_processes_names_exactly_the_steps_the_loop_took(catalog, tmp_path):
    """Grain's threads and workers make elements far ahead of the loop (hundreds of steps were
    recorded after 40 taken): the record holds the steps taken, and checks whole, after a stop and
    after a resume from the state saved there."""
    flags.FLAGS.mark_as_parsed()
    spec = spec_of(catalog, world_size=1, batch_size=1)  # 120 steps an epoch, 2 epochs: room to run ahead
    record = str(tmp_path / "run")
    source = StepSource(spec, catalog, rank=0, epochs=2, record_dir=record)
    workers = grain.MultiprocessingOptions(num_workers=2)
    it = iter(source.recorded(grain.MapDataset.source(source).map(double).to_iter_dataset().mp_prefetch(workers)))
    taken = [int(next(it)["step"]) for _ in range(40)]
    state = loader_state(it.get_state(), source)
    del it
    assert taken == list(range(40)) and LoaderState.from_json(state).step == 40
    assert recorded_steps(record) == taken, "the record claims steps the loop never took"
    result = check_log(record, record, catalog=Catalog(catalog.url))  # the whole record: no steps, no gaps allowed
    assert result.ok and result.gaps == [] and result.checked == 40, result.to_json()

    resumed = StepSource(spec, catalog, rank=0, epochs=2, state=state, record_dir=record)
    it = iter(resumed.recorded(grain.MapDataset.source(resumed).to_iter_dataset().mp_prefetch(workers)))
    taken += [int(next(it)["step"]) for _ in range(25)]
    del it
    assert recorded_steps(record) == taken == list(range(65))
    result = check_log(record, record, catalog=Catalog(catalog.url))
    assert result.ok and (result.checked, result.segments, result.superseded) == (65, 2, 0), result.to_json()

    misplaced = StepSource(spec, catalog, rank=0, record_dir=str(tmp_path / "misplaced"))
    inside = misplaced.recorded(grain.MapDataset.source(misplaced).to_iter_dataset()).mp_prefetch(workers)
    with pytest.raises(UserError, match="ran in a Grain worker process"):
        next(iter(inside))


def recorded_steps(record):
    return [e["step"] for e in read_fingerprints(f"{record}/fingerprints/rank-00000.jsonl") if "step" in e]

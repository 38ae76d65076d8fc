"""The Grain adapter (`dsinspect.loaders.grain`): Grain iterates one rank's batches in dsinspect's
order (element i is the batch of step start + i), through its transformations and its worker
processes (`mp_prefetch`, real processes), and its iterator state maps to a LoaderState exactly:
a Loader restored from the mapped state continues with the batch Grain would give next, and back."""

import numpy as np
import pytest

grain = pytest.importorskip("grain")

from absl import flags  # noqa: E402  (Grain's worker processes read its flags)
from token_catalog import token_catalog  # noqa: E402

from dsinspect.errors import UserError  # noqa: E402
from dsinspect.loaders import Loader, LoaderState, RunSpec, batch_indices  # noqa: E402
from dsinspect.loaders.grain import StepSource, grain_state, loader_state  # noqa: E402

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

"""One conformance suite for every framework adapter: the same run spec gives, at every (step, rank),
the rows `batch_indices` names; a state saved after k batches resumes exactly, and into another world
size and batch size at the same position of the order; the run record each adapter writes, through
a read, a save and an elastic resume, passes the log check; and a state one adapter saved resumes
in the next one (another framework, another worker count). Adapters: the plain Loader, PyTorch's
TorchLoader (0 and 2 worker processes), JAX's JaxBatches, Grain's StepSource (in process and over
two Grain worker processes), Hugging Face's IterableDataset (rows, batched back by step). Each
adapter's own tests go further (records, multi-process JAX, torchrun)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from token_catalog import token_catalog

from dsinspect.loaders import (
    Catalog,
    Field,
    Loader,
    LoaderState,
    PackedLoader,
    RunSpec,
    SequenceSpec,
    WriteOptions,
    batch_indices,
    packed_run,
)
from dsinspect.loaders.audit.logcheck import check_log
from dsinspect.loaders.sequences.segments import assemble

ROWS, WIDTH, BATCH, WORLD = 96, 4, 4, 2


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return token_catalog(tmp_path_factory.mktemp("conformance") / "catalog", "c", ROWS, WIDTH, 11, shard_rows=24,
                         row_group_rows=8)


def spec_of(catalog, world=WORLD, batch=BATCH):
    return RunSpec.create(catalog, "c", seed=21, batch_size=batch, world_size=world, shuffle="global")


# Each adapter: read(catalog, spec, rank, n, state, record) -> ([(step, indices), ...] of n batches, the state
# after), starting from `state` (a LoaderState saved by any adapter, of any world and batch size) when given,
# writing the rank's run record into the directory `record` when given.

def read_loader(catalog, spec, rank, n, state, record=None):
    with Loader(spec, rank, catalog=catalog, record_dir=record) as loader:
        if state is not None:
            loader.load_state_dict(state)
        it = iter(loader)
        got = [(b.step, b.indices.tolist()) for b in (next(it) for _ in range(n))]
        return got, loader.state_dict()


def read_torch(workers):
    def read(catalog, spec, rank, n, state, record=None):
        pytest.importorskip("torch")
        from dsinspect.loaders.pytorch import TorchBatches, TorchLoader
        loader = TorchLoader(TorchBatches(spec, catalog, rank=rank, record_dir=record), num_workers=workers)
        if state is not None:
            loader.load_state_dict(state)
        it = iter(loader)
        got = [(int(b["step"]), b["indices"].tolist()) for b in (next(it) for _ in range(n))]
        saved = loader.state_dict()
        loader.close()
        return got, saved
    return read


def read_jax(catalog, spec, rank, n, state, record=None):
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from dsinspect.loaders.jax import JaxBatches
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
    # one process holds every rank (a global array needs all of them here); `rank`'s rows are its slice
    with JaxBatches(spec, catalog, sharding, columns=["tokens"], ranks=range(spec.world_size),
                    record_dir=record) as batches:
        if state is not None:
            batches.load_state_dict(state)
        it = iter(batches)
        per = batches.spec.batch_size
        got = [(b["step"], b["indices"][rank * per:(rank + 1) * per].tolist()) for b in (next(it) for _ in range(n))]
        saved = LoaderState.from_json(batches.state_dict())
        return got, LoaderState.at(batches.spec, saved.step, rank, saved.segment).to_json()


def read_grain(workers):
    def read(catalog, spec, rank, n, state, record=None):
        grain = pytest.importorskip("grain")
        from absl import flags

        from dsinspect.loaders.grain import StepSource, grain_state, loader_state
        flags.FLAGS.mark_as_parsed()  # Grain's worker processes read its flags
        saved = None if state is None else LoaderState.from_json(state)
        same = saved is not None and (saved.world_size, saved.batch_size) == (spec.world_size, spec.batch_size)
        if same and not workers:  # Grain's own state, mapped from the LoaderState (`grain_state`)
            source = StepSource(spec, catalog, rank=rank, record_dir=record)
        else:  # over workers, or another world or batch size: a source that starts where the state does
            source = StepSource(spec, catalog, rank=rank, state=state, record_dir=record)
        dataset = grain.MapDataset.source(source).to_iter_dataset()
        if workers:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        it = iter(source.recorded(dataset))  # with a record: a line per element the loop takes
        if same and not workers:
            it.set_state(grain_state(state, source))
        got = [(int(e["step"]), e["indices"].tolist()) for e in (next(it) for _ in range(n))]
        after = loader_state(it.get_state(), source)
        del it
        return got, after
    return read


def read_hf(catalog, spec, rank, n, state, record=None):
    pytest.importorskip("datasets")
    from dsinspect.loaders.hf import as_iterable, resume_state
    resumed = spec if state is None else LoaderState.from_json(state).resume_spec(spec)
    rows = iter(as_iterable(spec, catalog, rank=rank, start_state=state, record_dir=record))  # rows: batch them back
    got = []
    for _ in range(n):
        batch = [next(rows) for _ in range(resumed.batch_size)]
        assert len({r["_step"] for r in batch}) == 1
        got.append((batch[0]["_step"], [r["_index"] for r in batch]))
    return got, resume_state(spec, got[-1][0] + 1, rank, start_state=state, recorded=record is not None)


ADAPTERS = {
    "loader": read_loader,
    "torch-0-workers": read_torch(0),
    "torch-2-workers": read_torch(2),
    "jax": read_jax,
    "grain": read_grain(0),
    "grain-2-workers": read_grain(2),
    "hf-iterable": read_hf,
}


def _marks(name: str) -> list:
    marks = [pytest.mark.slow] if name.endswith("-2-workers") else []
    return marks + [pytest.mark.jax] if name == "jax" else marks  # its own pytest process (.ci/run)


@pytest.fixture(params=[pytest.param(name, marks=_marks(name)) for name in sorted(ADAPTERS)])
def read(request):
    return ADAPTERS[request.param]


def test_every_step_and_rank_reads_the_rows_batch_indices_names(catalog, read):
    spec = spec_of(catalog)
    for rank in range(WORLD):
        got, _ = read(catalog, spec, rank, 6, None)
        assert got == [(s, batch_indices(spec, s, rank).tolist()) for s in range(6)]


def test_a_state_resumes_exactly(catalog, read):
    spec = spec_of(catalog)
    first, state = read(catalog, spec, 1, 3, None)
    assert LoaderState.from_json(state).step == 3
    then, _ = read(catalog, spec, 1, 3, state)
    assert first + then == [(s, batch_indices(spec, s, 1).tolist()) for s in range(6)]


def test_a_state_resumes_into_another_world_and_batch_size_at_the_same_position(catalog, read):
    two = spec_of(catalog)
    _, state = read(catalog, two, 0, 3, None)
    one = spec_of(catalog, world=1, batch=2 * BATCH)
    [(step, rows)], _ = read(catalog, one, 0, 1, state)
    both = np.concatenate([batch_indices(two, 3, r) for r in range(WORLD)])
    assert sorted(rows) == sorted(both.tolist()), "the next global batch: the same samples"


def test_the_record_of_a_read_a_save_and_an_elastic_resume_passes_the_log_check(catalog, read, tmp_path):
    record = str(tmp_path / "run")
    two = spec_of(catalog)
    states = [read(catalog, two, rank, 3, None, record)[1] for rank in range(WORLD)]
    assert all(LoaderState.from_json(s).segment for s in states), "a state names the segment it continues"
    one = spec_of(catalog, world=1, batch=2 * BATCH)
    read(catalog, one, 0, 2, states[0], record)
    # the whole record: adapters that make batches ahead (Grain's threads and workers, DataLoader
    # workers) record only what the loop took, so it has no lines past the last step taken
    result = check_log(record, record, catalog=Catalog(catalog.url))
    assert result.ok, result.to_json()
    # every (step, rank) taken: steps 0-2 on two ranks, then 3-4 on one, in two segments
    assert (result.segments, result.steps, result.checked) == (2, (0, 4), 3 * WORLD + 2)
    other = RunSpec.create(catalog, "c", seed=22, batch_size=BATCH, world_size=WORLD, shuffle="global")
    assert check_log(other, record, range(0, 3), catalog=Catalog(catalog.url)).divergence, \
        "the lines name the rows read: another order does not pass"


RING = sorted(ADAPTERS)  # each adapter resumes the state the next one saved: worker counts and frameworks change


@pytest.mark.parametrize("saver,resumer", [
    pytest.param(a, b, marks=_marks(a) + _marks(b), id=f"{a}-to-{b}")
    for a, b in zip(RING, RING[1:] + RING[:1])])
def test_a_state_saved_by_one_adapter_resumes_in_another(catalog, saver, resumer):
    spec = spec_of(catalog)
    _, state = ADAPTERS[saver](catalog, spec, 1, 2, None)
    then, _ = ADAPTERS[resumer](catalog, spec, 1, 2, state)
    assert then == [(s, batch_indices(spec, s, 1).tolist()) for s in (2, 3)]


# -- packed sequences: the same suite over the packed adapters (docs/PRETRAINING.md) ---------------
# Each packed adapter: read(corpus, spec, rank, n, state, record) -> ([(step, tokens, segments), ...], state
# after), tokens the [B, W] sequences (inputs with the last label token) and segments the rows of
# `document_segments` (slot, source, document, start, stop, offset), compared with the run's arithmetic.

EOS = 60_001


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """90 documents of 0-120 uint16 tokens in 5 shards of 18."""
    rng = np.random.default_rng(4)
    docs = [rng.integers(1, 60_000, int(n)).tolist() for n in rng.integers(0, 120, 90)]
    catalog = Catalog(str(tmp_path_factory.mktemp("packed-conformance") / "catalog"))
    fields = [Field("tokens", pa.list_(pa.uint16()), "tokens")]
    catalog.write_version("docs", [{"tokens": d} for d in docs], fields,
                          options=WriteOptions(shard_rows=18, row_group_rows=6))
    catalog.docs = docs
    return catalog


PAD = 60_002  # best_fit, pad: the room after a sequence's documents


def packed_spec_of(corpus, world=WORLD, batch=BATCH, packing="concat"):
    pad = None if packing == "concat" else PAD
    return RunSpec.create(corpus, "docs", seed=9, batch_size=batch, world_size=world, shuffle="global",
                         sequences=SequenceSpec(length=32, labels=True, eos=EOS, shuffle_documents=True,
                                                packing=packing, pad=pad))


def arithmetic(corpus, spec, step, rank):
    """(step, tokens, segments) of `rank`'s batch at `step`, from the arithmetic and the documents written."""
    sequences = packed_run(corpus, spec).batch(step, rank)
    tokens = [assemble(s.segments, lambda d: np.asarray(corpus.docs[d], np.int64), EOS, 33, PAD).tolist()
              for s in sequences]
    segments = [(s.slot, s.source, int(d), int(a), int(b), int(o)) for s in sequences
                for d, a, b, o in zip(s.segments.docs, s.segments.starts, s.segments.stops,
                                      np.cumsum(s.segments.sizes) - s.segments.sizes)]
    return step, tokens, segments


def from_model_arrays(step, inputs, labels, segments):
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    assert (labels[:, :-1] == inputs[:, 1:]).all(), "labels are the inputs shifted by one"
    tokens = np.concatenate([inputs, labels[:, -1:]], axis=1)  # labels=True: W = L + 1
    return int(step), tokens.tolist(), [tuple(r) for r in np.asarray(segments).tolist()]


def packed_read_loader(corpus, spec, rank, n, state, record=None):
    with PackedLoader(spec, rank, corpus, record_dir=record) as loader:
        if state is not None:
            loader.load_state_dict(state)
        it = iter(loader)
        got = [(b.step, b.tokens.astype(np.int64).tolist(), [tuple(r) for r in b.document_segments.tolist()])
               for b in (next(it) for _ in range(n))]
        return got, loader.state_dict()


def packed_read_torch(workers):
    def read(corpus, spec, rank, n, state, record=None):
        pytest.importorskip("torch")
        from dsinspect.loaders.pytorch import PackedTorchLoader
        with PackedTorchLoader(spec, corpus, rank=rank, num_workers=workers, record_dir=record) as loader:
            if state is not None:
                loader.load_state_dict(state)
            it = iter(loader)
            got = [from_model_arrays(b["step"], b["input_ids"], b["labels"], b["document_segments"])
                   for b in (next(it) for _ in range(n))]
            return got, loader.state_dict()
    return read


def packed_read_jax(corpus, spec, rank, n, state, record=None):
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from dsinspect.loaders.jax import PackedJaxBatches
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
    with PackedJaxBatches(spec, corpus, sharding, ranks=range(spec.world_size), record_dir=record) as batches:
        if state is not None:
            batches.load_state_dict(state)
        it = iter(batches)
        per = batches.spec.batch_size
        got = []
        for b in (next(it) for _ in range(n)):
            mine = slice(rank * per, (rank + 1) * per)  # one process holds every rank: `rank`'s rows are its slice
            table = b["document_segments"][(b["document_segments"][:, 0] >= mine.start)
                                           & (b["document_segments"][:, 0] < mine.stop)].copy()
            table[:, 0] -= mine.start
            got.append(from_model_arrays(b["step"], np.asarray(b["input_ids"])[mine], np.asarray(b["labels"])[mine],
                                         table))
        saved = LoaderState.from_json(batches.state_dict())
        return got, LoaderState.at(batches.spec, saved.step, rank, saved.segment).to_json()


def packed_read_grain(workers):
    def read(corpus, spec, rank, n, state, record=None):
        grain = pytest.importorskip("grain")
        from absl import flags

        from dsinspect.loaders.grain import PackedStepSource, loader_state
        flags.FLAGS.mark_as_parsed()
        source = PackedStepSource(spec, corpus, rank=rank, state=state, record_dir=record)
        dataset = grain.MapDataset.source(source).to_iter_dataset()
        if workers:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        it = iter(source.recorded(dataset))
        got = [from_model_arrays(e["step"], e["input_ids"], e["labels"], e["document_segments"])
               for e in (next(it) for _ in range(n))]
        after = loader_state(it.get_state(), source)
        del it
        return got, after
    return read


PACKED = {
    "packed-loader": packed_read_loader,
    "packed-torch-0-workers": packed_read_torch(0),
    "packed-torch-2-workers": packed_read_torch(2),
    "packed-jax": packed_read_jax,
    "packed-grain": packed_read_grain(0),
    "packed-grain-2-workers": packed_read_grain(2),
}


def _packed_marks(name: str) -> list:
    return _marks(name.removeprefix("packed-"))


@pytest.fixture(params=[pytest.param(name, marks=_packed_marks(name)) for name in sorted(PACKED)])
def read_packed(request):
    return PACKED[request.param]


PACKINGS = pytest.mark.parametrize("packing", ["concat", "best_fit", "pad"])
# Resume and records over every packing; best_fit's and pad's over the in-process adapters only: how
# worker processes hand batches over does not depend on the packing (every step of each is read
# through every adapter above), and each 2-worker case costs ~15 s.
RESUMED = pytest.mark.parametrize("adapter,packing", [
    pytest.param(name, packing, marks=_packed_marks(name), id=f"{name}-{packing}")
    for name in sorted(PACKED) for packing in ("concat", "best_fit", "pad")
    if packing == "concat" or not name.endswith("-2-workers")])


@PACKINGS
def test_every_step_and_rank_reads_the_sequences_the_arithmetic_names(corpus, read_packed, packing):
    spec = packed_spec_of(corpus, packing=packing)
    assert spec.epoch_length >= 6 * BATCH * WORLD  # six steps lie in the first epoch
    for rank in range(WORLD):
        got, _ = read_packed(corpus, spec, rank, 6, None)
        assert got == [arithmetic(corpus, spec, s, rank) for s in range(6)]


@RESUMED
def test_a_packed_state_resumes_exactly_and_into_another_world_and_batch_size(corpus, adapter, packing):
    read_packed = PACKED[adapter]
    two = packed_spec_of(corpus, packing=packing)
    first, state = read_packed(corpus, two, 1, 3, None)
    assert LoaderState.from_json(state).step == 3
    then, _ = read_packed(corpus, two, 1, 2, state)
    assert first + then == [arithmetic(corpus, two, s, 1) for s in range(5)]
    one = packed_spec_of(corpus, world=1, batch=2 * BATCH, packing=packing)
    [(_, tokens, _)], _ = read_packed(corpus, one, 0, 1, state)
    both = [t for r in range(WORLD) for t in arithmetic(corpus, two, 3, r)[1]]
    assert sorted(tokens) == sorted(both), "the next global batch: the same sequences"


@RESUMED
def test_the_record_of_a_packed_read_and_an_elastic_resume_passes_the_log_check(corpus, adapter, tmp_path, packing):
    read_packed = PACKED[adapter]
    record = str(tmp_path / "run")
    two = packed_spec_of(corpus, packing=packing)
    states = [read_packed(corpus, two, rank, 3, None, record)[1] for rank in range(WORLD)]
    assert all(LoaderState.from_json(s).segment for s in states), "a state names the segment it continues"
    read_packed(corpus, packed_spec_of(corpus, world=1, batch=2 * BATCH, packing=packing), 0, 2, states[0], record)
    result = check_log(record, record, catalog=Catalog(corpus.url))
    assert result.ok, result.to_json()
    assert (result.segments, result.steps, result.checked) == (2, (0, 4), 3 * WORLD + 2)
    other = RunSpec.create(corpus, "docs", seed=10, batch_size=BATCH, world_size=WORLD, shuffle="global",
                           sequences=two.sequences)
    assert check_log(other, record, range(0, 3), catalog=Catalog(corpus.url)).divergence, \
        "the lines name the sequences read: another order does not pass"


PACKED_RING = sorted(PACKED)


@pytest.mark.parametrize("saver,resumer", [
    pytest.param(a, b, marks=_packed_marks(a) + _packed_marks(b), id=f"{a}-to-{b}")
    for a, b in zip(PACKED_RING, PACKED_RING[1:] + PACKED_RING[:1])])
def test_a_packed_state_saved_by_one_adapter_resumes_in_another(corpus, saver, resumer):
    spec = packed_spec_of(corpus)
    _, state = PACKED[saver](corpus, spec, 1, 2, None)
    then, _ = PACKED[resumer](corpus, spec, 1, 2, state)
    assert then == [arithmetic(corpus, spec, s, 1) for s in (2, 3)]

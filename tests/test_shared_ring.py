"""The shared-memory ring that carries batches from DataLoader workers to the main process: arrays
come out bit-identical and owning their memory, a batch too big for a slot grows the ring, a slot
is written again only once copied out (the lowest free one first), too few slots is an error
(never a wrong batch), and no segment outlives its pass, however the pass ends (finished,
abandoned, closed, a worker killed)."""

import multiprocessing
import os
import pickle
import signal
import time

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.loaders.pytorch.ring import (
    RingOverrun,
    RingReader,
    RingWriter,
    new_prefix,
    ring_slots,
    segment_name,
    sweep_orphans,
)

SHM = "/dev/shm"
needs_dev_shm = pytest.mark.skipif(not os.path.isdir(SHM), reason="segments are listed under /dev/shm (Linux)")


def segments(prefix):
    return sorted(name for name in os.listdir(SHM) if name.startswith(prefix))


def exact(value):
    """Nested contents as plain Python that `==` compares exactly (dtype, shape and bytes)."""
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [exact(v) for v in value])
    if isinstance(value, np.ndarray):
        return ("objects", value.tolist())
    return value


def sample_tree(seed):
    rng = np.random.default_rng(seed)
    return {
        "tokens": rng.integers(0, 50_000, (32, 1024), dtype=np.int32),
        "step": np.array(seed, dtype=np.int64),
        "flags": rng.random(7) < 0.5,
        "empty": np.empty((0, 3), np.uint8),
        "big_endian": np.arange(5, dtype=">i4"),
        "half": rng.random((2, 3)).astype(np.float16),
        "strided": np.arange(40, dtype=np.int16).reshape(8, 5)[:, ::2],
        "bytes": np.array([b"ab", b"xyz"]),
        "objects": np.array([{"a": 1}, None], dtype=object),  # not ringable: pickled inline
        "nested": {"values": np.arange(9, dtype=np.uint8), "offsets": np.array([0, 4, 9])},
        "pair": (np.ones(3, np.float64), [np.zeros(2, np.int8), "text"]),
        "python": [{"action": [1], "reward": [0.5]}],
    }


@needs_dev_shm
def test_arrays_come_back_bit_identical_and_owning_their_memory():
    prefix = new_prefix()
    writer, reader = RingWriter(prefix, 0, slots=3), RingReader(prefix, workers=1)
    try:
        trees = [sample_tree(seed) for seed in range(5)]
        for tree in trees:
            sent = pickle.loads(pickle.dumps(writer.put(tree)))  # what crosses the pipe
            assert len(pickle.dumps(sent)) < 3000  # the descriptor, not the 128 KB of tokens
            got = reader.take(sent)
            assert exact(got) == exact(tree)
            assert got["tokens"].flags.owndata and got["tokens"].flags.writeable
            kept = got["tokens"].copy()
            reader.take(writer.put(sample_tree(99)))  # reusing the slot leaves what was taken untouched
            assert np.array_equal(got["tokens"], kept)
        assert segments(prefix) == [f"{prefix}-owner", segment_name(prefix, 0, 0)]
    finally:
        writer.close()
        assert reader.close() == 1
    assert segments(prefix) == []


@needs_dev_shm
def test_a_batch_bigger_than_a_slot_grows_the_ring_and_older_batches_stay_readable():
    prefix = new_prefix()
    writer, reader = RingWriter(prefix, 3, slots=4), RingReader(prefix, workers=4)
    small = {"x": np.arange(100, dtype=np.int64)}
    big = {"x": np.arange(200_000, dtype=np.int64)}
    try:
        in_flight = [writer.put(small), writer.put(big), writer.put(small)]
        assert [b.segment for b in in_flight] == [segment_name(prefix, 3, 0)] + [segment_name(prefix, 3, 1)] * 2
        for sent, tree in zip(in_flight, (small, big, small)):
            assert exact(reader.take(sent)) == exact(tree)
    finally:
        writer.close()
        assert reader.close() == 2
    assert segments(prefix) == []


@needs_dev_shm
def test_a_slot_is_written_again_only_after_its_batch_was_copied_out():
    prefix = new_prefix()
    writer, reader = RingWriter(prefix, 0, slots=2), RingReader(prefix, workers=1)
    try:
        first = writer.put({"x": np.zeros(10)})
        second = writer.put({"x": np.ones(10)})
        with pytest.raises(RingOverrun, match=r"worker 0: all 2 shared-memory slots hold batches the main process "
                                              r"has not copied out yet"):
            writer.put({"x": np.full(10, 2.0)})  # before, it rewrote the first batch's slot
        assert reader.take(first)["x"].sum() == 0  # still there, untouched
        third = writer.put({"x": np.full(10, 2.0)})  # now in the first batch's slot
        assert third.base == first.base
        assert reader.take(second)["x"].sum() == 10 and reader.take(third)["x"].sum() == 20
        with pytest.raises(RingOverrun, match=r"batch 2 was copied out of it already"):  # a slot is read once
            reader.take(third)
        fourth = writer.put({"x": np.full(10, 3.0)})
        with pytest.raises(RingOverrun, match=r"holds batch 3, not batch 0"):
            reader.take(first)
        assert reader.take(fourth)["x"].sum() == 30
    finally:
        writer.close()
        reader.close()


@needs_dev_shm
def test_the_writer_takes_the_lowest_free_slot_so_idle_slots_stay_untouched():
    """Pages of shared memory count once touched: with each batch copied out before the next is
    written, every batch goes through the first slot (before, slot k held batch k % slots)."""
    prefix = new_prefix()
    writer, reader = RingWriter(prefix, 0, slots=6), RingReader(prefix, workers=1)
    try:
        bases = []
        for seed in range(8):
            sent = writer.put(sample_tree(seed))
            bases.append(sent.base)
            assert exact(reader.take(sent)) == exact(sample_tree(seed))
        assert bases == [0] * 8
        held = [writer.put(sample_tree(seed)) for seed in range(3)]  # three in flight: the three lowest
        assert [b.base for b in held] == [0, held[1].base, 2 * held[1].base] and held[1].base > 0
    finally:
        writer.close()
        reader.close()


def test_slot_count_covers_every_task_the_dataloader_can_have_in_flight():
    assert ring_slots(2, 2) == 6
    for prefetch in (1, 2, 4):
        for workers in (1, 2, 8):
            assert ring_slots(prefetch, workers) >= prefetch * workers + 1


@needs_dev_shm
def test_close_removes_segments_a_killed_worker_made_before_anyone_attached():
    prefix = new_prefix()

    def make_and_die():
        writer = RingWriter(prefix, 1, slots=2)
        writer.put({"x": np.zeros(4)})
        writer.put({"x": np.zeros(100_000)})  # a second generation
        os.kill(os.getpid(), signal.SIGKILL)

    child = multiprocessing.get_context("fork").Process(target=make_and_die)
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    assert segments(prefix) == [segment_name(prefix, 1, 0), segment_name(prefix, 1, 1)]
    assert RingReader(prefix, workers=2).close() == 2
    assert segments(prefix) == []


@needs_dev_shm
def test_segments_of_a_main_process_killed_with_its_workers_are_swept_by_the_next_pass():
    """SIGKILL of a whole process group (a dying node) leaves nobody to unlink: the next pass on the
    machine removes segments whose owner lock is free, and leaves a live pass's alone."""
    live = RingReader(new_prefix(), workers=1)
    live_writer = RingWriter(live.prefix, 0, slots=2)
    live_writer.put({"x": np.zeros(3)})
    reported = multiprocessing.get_context("fork").SimpleQueue()

    def pass_then_die():
        prefix = new_prefix()
        RingReader(prefix, workers=1)
        RingWriter(prefix, 0, slots=2).put({"x": np.zeros(3)})
        reported.put(prefix)
        os.kill(os.getpid(), signal.SIGKILL)

    child = multiprocessing.get_context("fork").Process(target=pass_then_die)
    child.start()
    child.join(30)
    dead = reported.get()
    try:
        assert segments(dead) == [f"{dead}-owner", segment_name(dead, 0, 0)]
        swept = sweep_orphans()
        assert {f"{dead}-owner", segment_name(dead, 0, 0)} <= set(swept)
        assert segments(dead) == []
        assert segments(live.prefix) == [f"{live.prefix}-owner", segment_name(live.prefix, 0, 0)]
    finally:
        live_writer.close()
        live.close()
    assert segments(live.prefix) == []


# -- through TorchLoader's real DataLoader workers -----------------------------------------------

@pytest.fixture(scope="module")
def torch_catalog(tmp_path_factory):
    pytest.importorskip("torch")
    from dsinspect.loaders import Catalog, Field, WriteOptions
    cat = Catalog(str(tmp_path_factory.mktemp("ring") / "catalog"))
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("blob", pa.binary(), "bytes"),
              Field("tokens", pa.list_(pa.int32()), "tokens")]
    # blobs that grow along the order: later batches outgrow the slots sized for the first ones
    rows = [{"id": i, "blob": bytes([i % 251]) * (i * 300), "tokens": list(range(i % 7))} for i in range(160)]
    cat.write_version("grow", rows, fields, options=WriteOptions(row_group_rows=16, shard_rows=40))
    return cat


def torch_batches(cat, **options):
    from dsinspect.loaders import RunSpec
    from dsinspect.loaders.pytorch import TorchBatches
    spec = RunSpec.create(cat, "grow", shuffle="none", batch_size=8, **options)
    return TorchBatches(spec, cat)


def tensors_exact(batch):
    import torch
    if isinstance(batch, torch.Tensor):
        return (str(batch.dtype), tuple(batch.shape), batch.numpy().tobytes())
    if isinstance(batch, dict):
        return {k: tensors_exact(v) for k, v in batch.items()}
    return batch


def own_segments():
    """This process's segments and owner files: rings exist only while their pass runs."""
    return segments(f"dsi{os.getpid()}-")


@needs_dev_shm
@pytest.mark.slow
def test_torch_loader_batches_equal_zero_workers_while_the_ring_grows(torch_catalog):
    from dsinspect.loaders.pytorch import TorchLoader
    want = [tensors_exact(b) for b in TorchLoader(torch_batches(torch_catalog), num_workers=0)]
    got, generations = [], set()
    for batch in TorchLoader(torch_batches(torch_catalog), num_workers=2):
        got.append(tensors_exact(batch))
        generations |= {name.rsplit("-", 1)[1] for name in own_segments()}
    assert len(got) == 20 and got == want  # 5 items of 4 batches
    assert {"g0", "g1"} <= generations  # the big late batches took a new generation
    assert own_segments() == []


@needs_dev_shm
@pytest.mark.slow
def test_no_segment_outlives_an_abandoned_or_closed_pass(torch_catalog):
    from dsinspect.loaders.pytorch import TorchLoader
    loader = TorchLoader(torch_batches(torch_catalog), num_workers=2)
    for i, _ in enumerate(loader):  # the first batch is made here, the workers start at the second
        if i == 1:
            assert any("-w0-g" in name for name in own_segments())  # the workers' rings exist while the pass runs
            break
    assert own_segments() == []  # the abandoned pass was collected: workers stopped, segments gone
    running = iter(loader)
    next(running), next(running)
    assert own_segments()
    loader.close()  # ends the pass still held by `running`
    assert own_segments() == []
    with pytest.raises(StopIteration):
        next(running)


@needs_dev_shm
@pytest.mark.slow
def test_a_killed_worker_leaves_no_segment_behind(torch_catalog):
    from dsinspect.loaders.pytorch import TorchLoader
    # one batch per item (20 items): the DataLoader hands out at most prefetch_factor x workers items
    # ahead, so the killed worker always still owes items, whatever the timing (with 8 batches per
    # item the 3 items could all be made before the kill, and the pass then ended without an error)
    loader = TorchLoader(torch_batches(torch_catalog), num_workers=2, batches_per_transfer=1)
    running = iter(loader)
    next(running), next(running)  # the first made here, the second by a worker
    workers = multiprocessing.active_children()
    assert len(workers) == 2 and own_segments()
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        os.kill(workers[0].pid, signal.SIGKILL)  # torch's SIGCHLD handler may raise right away
        for _ in running:
            pass
    loader.close()  # torch may raise from its SIGCHLD handler outside the pass: close is still enough
    assert own_segments() == []


@needs_dev_shm
@pytest.mark.slow
def test_too_few_slots_is_a_clear_error_in_the_worker(torch_catalog, monkeypatch):
    """A consumer slow between receiving a descriptor and copying its slot (the DataLoader has
    already sent that worker its next task) lets the workers fill every slot they may. With the
    bound's slots that is fine; with fewer, the worker finds no free slot: a clear error."""
    from dsinspect.loaders.pytorch import loader as torch_loader  # the module that sizes the rings
    take = RingReader.take

    def slow_take(delay):
        def late(self, batch, *args):
            time.sleep(delay)
            return take(self, batch, *args)
        return late

    def one_per_item():  # one batch per DataLoader item: 20 items, 10 per worker
        return torch_loader.TorchLoader(torch_batches(torch_catalog), num_workers=2, batches_per_transfer=1)

    monkeypatch.setattr(RingReader, "take", slow_take(0.05))
    assert [int(b["step"]) for b in one_per_item()] == list(range(20))
    monkeypatch.setattr(RingReader, "take", slow_take(0.3))
    monkeypatch.setattr(torch_loader, "ring_slots", lambda prefetch, workers: 2)
    with pytest.raises(RingOverrun, match="slots hold batches the main process has not copied out yet"):
        for _ in one_per_item():
            pass
    assert own_segments() == []


@needs_dev_shm
@pytest.mark.slow
def test_without_shared_memory_batches_still_arrive_through_the_pipe(torch_catalog, monkeypatch):
    from dsinspect.loaders.pytorch import TorchLoader, transfer  # transfer: the module that writes the rings

    def refuse(self, tree):
        raise OSError(28, "No space left on device")

    want = [tensors_exact(b) for b in TorchLoader(torch_batches(torch_catalog), num_workers=0)]
    monkeypatch.setattr(transfer.RingWriter, "put", refuse)
    got = [tensors_exact(b) for b in TorchLoader(torch_batches(torch_catalog), num_workers=2)]
    assert got == want


def test_arrays_leave_the_ring_as_default_convert_makes_them():
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_convert

    from dsinspect.loaders.pytorch.transfer import _tensor_copy
    arrays = [np.arange(6, dtype=t).reshape(2, 3) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                                          np.int64, np.float16, np.float32, np.float64, np.complex64)]
    arrays += [np.array([True, False]), np.array(3, dtype=np.int64), np.array([b"ab", b"c"]), np.array(["x", "yz"])]
    for a in arrays:
        got, want = _tensor_copy(a), default_convert(a.copy())
        assert type(got) is type(want), a.dtype
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        else:
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert not np.shares_memory(np.asarray(got), a)


@needs_dev_shm
def test_a_ring_bigger_than_dev_shm_is_refused_before_anything_is_written():
    """tmpfs accepts a segment bigger than its free space and kills the first write past it
    (SIGBUS): the writer checks first and raises OSError, which TorchBatches answers with the pipe."""
    stat = os.statvfs(SHM)
    too_big = stat.f_bavail * stat.f_frsize + 1
    prefix = new_prefix()
    writer = RingWriter(prefix, 0, slots=2)
    with pytest.raises(OSError, match="bytes free, a ring needs"):
        writer.put({"x": np.broadcast_to(np.zeros(1, np.uint8), (too_big // 2 + 1,))})  # no memory behind it
    assert segments(prefix) == []

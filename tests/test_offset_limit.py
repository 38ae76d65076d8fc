"""A batch whose column would pass what one Arrow array holds (2 GiB: 32-bit offsets) is one clear
error naming the column, the step and what to do, before anything that size is allocated (issue #31:
the Loader raised pyarrow's "Negative offsets in binary array" after growing to 5 GB); a run of
steps read together that passes it is read a batch at a time instead."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.loaders.format import arrow_errors
from dsinspect.loaders.format.arrow_errors import OffsetLimitError, offset_limit_check, past_offset_limit
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.writer import WriteOptions

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("text", pa.string(), "text"),
          Field("note", pa.string(), "scalar"), Field("tokens", pa.list_(pa.int32()), "tokens")]


def rows(n: int, size: int, tokens: int) -> list[dict]:
    """`text` of `size` characters, `note` the same with a null in row 1 (Arrow's take path),
    `tokens` of `tokens` ids (a list column)."""
    return [{"id": i, "text": str(i % 10) * size, "note": None if i == 1 else str(i % 10) * size,
             "tokens": list(range(tokens))} for i in range(n)]


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    """Each as written with a shard index (first batches read cold, row group by row group) and
    without (whole shards through the cache): `small`, 40 rows of 3,000 bytes a column; `big`, one
    row of 10 MB a column, which 256 copies take past 2 GiB."""
    c = Catalog(str(tmp_path_factory.mktemp("offsets") / "cat"))
    for index in (True, False):
        options = WriteOptions(row_group_rows=8, shard_index=index)
        c.write_version(f"small-{index}", rows(40, 3000, 3000), FIELDS, options=options, tags=["v1"])
        c.write_version(f"big-{index}", rows(1, 10_000_000, 0), FIELDS, options=options, tags=["v1"])
    return c


def peak() -> int:
    """This process's peak resident bytes since the last `reset_peak` (VmHWM)."""
    return int([line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]) << 10


def reset_peak() -> int:
    """Start VmHWM again from the resident size now (an earlier test's peak would hide any growth); that size."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return peak()


def loader(cat: Catalog, name: str, batch_size: int, column: str, tmp_path) -> Loader:
    spec = RunSpec.create(cat, name, batch_size=batch_size, shuffle="none", last_batch="pad")
    return Loader(spec, 0, cat, columns=["id", column], cache=ShardCache(tmp_path / "cache"))


@pytest.mark.parametrize("index", [True, False], ids=["cold", "cached"])
@pytest.mark.parametrize("column", ["text", "note"])
def test_256_copies_of_a_10mb_row_are_one_line_naming_the_column(cat, tmp_path, index, column):
    before = reset_peak()
    with pytest.raises(OffsetLimitError) as refused:
        loader(cat, f"big-{index}", 256, column, tmp_path).batch_at(0)
    items = "2,147,483,647 bytes or list items (32-bit offsets)"
    assert str(refused.value) == (f"step 0, rank 0: column {column!r} (string) would pass what one Arrow array "
                                  f"holds, {items}: use a smaller batch_size (now 256)")
    assert refused.value.column == column and refused.value.exit_code == 2
    grew = peak() - before
    assert grew < 1 << 30, f"grew by {grew >> 20} MB before refusing"  # not the 2.5 GB batch


@pytest.mark.parametrize("index", [True, False], ids=["cold", "cached"])
@pytest.mark.parametrize("column, type_", [("text", "string"), ("note", "string"), ("tokens", "list of int32")])
def test_a_run_of_steps_past_the_limit_is_read_a_batch_at_a_time(cat, tmp_path, monkeypatch, index, column, type_):
    """With the limit lowered to 10,000 (a batch of 3 rows holds 9,000 bytes or ids, a run of two 18,000)."""
    name = f"small-{index}"
    expected = [loader(cat, name, 3, column, tmp_path / "a").batch_at(s).table for s in range(8)]
    monkeypatch.setattr(arrow_errors, "OFFSET_LIMIT", 10_000)
    got = loader(cat, name, 3, column, tmp_path / "b")
    assert [got.batch_in_run(s).table for s in range(8)] == expected
    with pytest.raises(OffsetLimitError) as refused:
        loader(cat, name, 5, column, tmp_path / "c").batch_at(0).rows()  # 12,000 or 15,000 (tokens: as Arrow)
    assert str(refused.value) == (f"step 0, rank 0: column {column!r} ({type_}) would pass what one Arrow array "
                                  "holds, 10,000 bytes or list items (32-bit offsets): use a smaller batch_size "
                                  "(now 5)")


def test_arrows_own_refusals_are_recognised_and_the_limit_is_arrows():
    n = 2**30 + 2**20  # a value just over 1 GiB: two pass the limit. Zeroed pages, never touched: no memory
    data = np.zeros(n, np.uint8)
    value = pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, n], np.int32)), pa.py_buffer(data)])
    with pytest.raises(pa.ArrowInvalid) as refused:
        pa.concat_arrays([value, value])
    assert past_offset_limit(refused.value)
    assert pa.concat_arrays([value.cast(pa.large_binary())] * 2).type == pa.large_binary()  # 64-bit offsets fit
    assert arrow_errors.OFFSET_LIMIT == np.iinfo(np.int32).max
    offset_limit_check(arrow_errors.OFFSET_LIMIT, pa.string())
    offset_limit_check(arrow_errors.OFFSET_LIMIT + 1, pa.large_string())
    with pytest.raises(pa.ArrowCapacityError) as ours:
        offset_limit_check(arrow_errors.OFFSET_LIMIT + 1, pa.list_(pa.int32()))
    assert past_offset_limit(ours.value) and not past_offset_limit(pa.ArrowInvalid("a value out of range"))

"""A cache entry's Arrow file is not fsynced when it is published (read/cache.py `_publish`): its
sidecar names the boot that wrote it, and after a reboot the entry is checked whole before it is
trusted. A file a machine crash tore (any size, any bytes) is filled again, and the epoch reads
exact, with no error; an intact one is kept, made durable, and not checked whole again."""

import json
import logging
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.loaders import Catalog, Field, Loader, RunSpec, WriteOptions
from dsinspect.loaders.read.cache import BLOCK, ShardCache

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/random/boot_id"),
                                reason="the boot can be told on Linux only (elsewhere the Arrow file is fsynced)")

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens")]
BOOT = Path("/proc/sys/kernel/random/boot_id").read_text().strip() if not pytestmark.args[0] else None


def _version(tmp_path, shard_index):
    rng = np.random.default_rng(3)
    rows = [{"id": i, "tokens": rng.integers(0, 1 << 30, 40 + i % 23, dtype=np.int32).tolist()} for i in range(1200)]
    catalog = Catalog(str(tmp_path / "catalog"))
    version = catalog.write_version("torn", rows, FIELDS, key="id",
                                    options=WriteOptions(shard_rows=600, row_group_rows=64, shard_index=shard_index))
    spec = RunSpec.create(catalog, "torn", seed=5, batch_size=50, shuffle="global")
    return catalog, version, spec


def _epoch(catalog, spec, root):
    with Loader(spec, catalog=catalog, cache=ShardCache(root)) as loader:
        got = [(list(b.indices), b.table.column("tokens").to_pylist(), list(b.row_hashes)) for b in loader]
        return got, loader.stats()


def _after_a_reboot(root: Path, sha: str) -> dict:
    """The entry as an earlier boot left it: its sidecar names another boot."""
    path = root / f"{sha}.json"
    sidecar = json.loads(path.read_bytes())
    assert sidecar["boot"] == BOOT, "a fresh entry names the boot that wrote it"
    path.write_text(json.dumps({**sidecar, "boot": "00000000-0000-0000-0000-000000000000"}))
    return sidecar


def _tear(arrow: Path, damage: str) -> None:
    data = bytearray(arrow.read_bytes())
    if damage == "zeroed block":  # the size on disk, a range of pages never written back
        middle = len(data) // 2 // BLOCK * BLOCK
        data[middle:middle + BLOCK] = bytes(BLOCK)
    elif damage == "zeroed header":
        data[:BLOCK] = bytes(min(BLOCK, len(data)))
    elif damage == "zeroed whole":
        data = bytearray(len(data))
    else:  # truncated: written back in part
        data = data[:len(data) // 3]
    arrow.write_bytes(bytes(data))


@pytest.mark.parametrize("shard_index", [True, False], ids=["in place", "whole file"])
@pytest.mark.parametrize("damage", ["zeroed block", "zeroed header", "zeroed whole", "truncated"])
def test_an_entry_torn_by_a_reboot_is_filled_again_and_the_epoch_reads_exact(tmp_path, shard_index, damage, caplog):
    catalog, version, spec = _version(tmp_path, shard_index)
    root = tmp_path / "cache"
    want, _ = _epoch(catalog, spec, root)
    sha = version.manifest.shards[1].sha256
    _after_a_reboot(root, sha)
    _tear(root / f"{sha}.arrow", damage)

    caplog.set_level(logging.WARNING, logger="dsinspect")
    got, stats = _epoch(catalog, spec, root)  # no IntegrityError: the torn entry is never opened
    assert got == want and len(got) == 24
    assert stats["cache_misses"] == 1 and stats["verify_failures"] == 0
    assert json.loads((root / f"{sha}.json").read_bytes())["boot"] == BOOT, "filled again in this boot"
    torn = [r.getMessage() for r in caplog.records if "torn by a restart" in r.getMessage()]
    assert torn == [f"cached shard {root / sha}.arrow was torn by a restart of the machine: filled again"], \
        "said once (checked once, under the entry's lock), naming the file"


def test_an_intact_entry_of_an_earlier_boot_is_kept_and_made_durable(tmp_path):
    catalog, version, spec = _version(tmp_path, True)
    root = tmp_path / "cache"
    want, _ = _epoch(catalog, spec, root)
    sha = version.manifest.shards[0].sha256
    before = _after_a_reboot(root, sha)
    inode = (root / f"{sha}.arrow").stat().st_ino

    got, stats = _epoch(catalog, spec, root)
    assert got == want and len(got) == 24
    assert stats["cache_misses"] == 0 and stats["verify_failures"] == 0
    assert (root / f"{sha}.arrow").stat().st_ino == inode, "the entry kept, not filled again"
    after = json.loads((root / f"{sha}.json").read_bytes())
    assert "boot" not in after and after == {k: v for k, v in before.items() if k != "boot"}

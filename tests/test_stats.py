"""Observability: counters that explain a slow or stuck job, and a warning that names the cause."""

import logging

import pytest
from conftest import TOY_FIELDS, toy_rows

from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.read.stats import PeriodicLogger, ReadStats
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.writer import WriteOptions


@pytest.fixture
def cat(tmp_path):
    c = Catalog(str(tmp_path / "cat"))
    c.write_version("toy", toy_rows(400), TOY_FIELDS, options=WriteOptions(shard_rows=50))
    return c


def test_loader_counts_fetches_hits_and_waits(cat, tmp_path):
    spec = RunSpec.create(cat, "toy", seed=1, batch_size=10, shuffle="window", window_shards=2)
    with Loader(spec, catalog=cat, cache=ShardCache(tmp_path / "c1")) as cold:
        list(cold)
    s = cold.stats()  # after close: fills under way have ended
    # rows come from checked parts until a shard's background fill ends (a fill the loader's close
    # cancelled before it began leaves its parts on disk): each byte fetched once either way
    assert s["batches"] == 40 and 1 <= s["shards_fetched"] == s["cache_misses"] <= 8
    assert s["bytes_fetched"] == cat.resolve("toy").manifest.num_bytes
    assert s["parts_fetched"] == sum(cat.resolve("toy").shard_index(k).parts for k in range(8))
    assert s["retries"] == s["verify_failures"] == 0 and s["wait_seconds"] >= 0
    with Loader(spec, catalog=cat, cache=ShardCache(tmp_path / "c1")) as warm:
        list(warm)
    w = warm.stats()  # what the first run cached or left in .partial files: nothing fetched again
    assert w["bytes_fetched"] == 0 and w["cache_hits"] >= 1


def _starved(stats: ReadStats, fetch_seconds: float) -> None:
    for _ in range(20):
        stats.consumed(waited=0.09, interval=0.1)
    if fetch_seconds:
        stats.fetched(1000, fetch_seconds)
        stats.add("cache_misses")


def test_starvation_names_storage_or_compute():
    slow_storage, slow_compute, fine = ReadStats(), ReadStats(), ReadStats()
    _starved(slow_storage, fetch_seconds=1.5)
    _starved(slow_compute, fetch_seconds=0.0)
    for _ in range(20):
        fine.consumed(waited=0.001, interval=0.1)
    assert "storage" in slow_storage.starvation() and "90%" in slow_storage.starvation()
    assert "add DataLoader workers" in slow_compute.starvation()
    assert fine.starvation() is None


def test_periodic_log_line_and_warning(caplog):
    stats = ReadStats()
    _starved(stats, fetch_seconds=2.0)
    logger = PeriodicLogger(stats, interval=1e-9)
    with caplog.at_level(logging.INFO, logger="dsinspect.loader"):
        logger.tick()
    lines = [r.getMessage() for r in caplog.records]
    assert any("batches=20" in line and "shards_fetched=1" in line for line in lines)
    assert any(r.levelno == logging.WARNING and "data-starved" in r.getMessage() for r in caplog.records)
    caplog.clear()
    PeriodicLogger(stats, interval=None).tick()
    assert not caplog.records

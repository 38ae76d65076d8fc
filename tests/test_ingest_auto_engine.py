"""The default engine is `auto`: inline for small inputs, the process pool only where enough bytes can
convert beside the largest part (`benchmarks/bench_ingest_engine.py` finds where it pays). `--engine`
still forces either, and the engine never changes the version id."""

import pytest
from ingest_helpers import write_jsonl_source

from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.engine_choice import POOL_MIN_BYTES, choose_engine
from dsinspect.loaders.store.catalog import Catalog

MiB = 1 << 20


def test_auto_picks_inline_for_small_inputs_and_the_pool_for_large_multi_part_ones():
    assert choose_engine("jsonl", [40_000] * 3, cpus=2) == "inline"  # a few small files: workers cost more
    assert choose_engine("parquet", [5 * MiB] * 8, cpus=8) == "inline"
    assert choose_engine("jsonl", [200 * MiB] * 4, cpus=2) == "pool"
    assert choose_engine("parquet", [256 * MiB] * 4, cpus=2) == "pool"
    assert choose_engine("webdataset", [512 * MiB] * 4, cpus=2) == "pool"
    # token files pay from ~0.25 GB (a 1 GiB Megatron .bin: 0.62x inline's time): 512 MiB in its 64 MiB
    # parts takes the pool, 256 MiB not yet
    assert choose_engine("megatron", [64 * MiB] * 8, cpus=2) == "pool"
    assert choose_engine("megatron", [64 * MiB] * 4, cpus=2) == "inline"


@pytest.mark.parametrize("why", ["one part", "one cpu", "one worker", "one large part and crumbs"])
def test_auto_stays_inline_where_a_pool_cannot_overlap_work(why):
    big = [200 * MiB] * 4
    cases = {"one part": dict(part_bytes=[4096 * MiB], cpus=8), "one cpu": dict(part_bytes=big, cpus=1),
             "one worker": dict(part_bytes=big, cpus=8, workers=1),
             "one large part and crumbs": dict(part_bytes=[4096 * MiB, MiB, MiB], cpus=8)}
    assert choose_engine("jsonl", **cases[why]) == "inline"


def test_the_threshold_is_the_bytes_beside_the_largest_part():
    t = POOL_MIN_BYTES["jsonl"]
    assert choose_engine("jsonl", [t, t - 1], cpus=2) == "inline"
    assert choose_engine("jsonl", [t, t], cpus=2) == "pool"
    assert choose_engine("jsonl", [t, t // 2, t - t // 2], cpus=2) == "pool"


@pytest.mark.slow
def test_the_default_runs_a_small_ingest_inline_and_engine_still_forces_the_pool(tmp_path):
    source = write_jsonl_source(tmp_path / "src", files=3, rows=200)
    auto = run_ingest(Catalog(str(tmp_path / "a")), str(source), "text", key="id")
    assert auto.engine == "inline" and auto.parts_converted == 3
    pooled = run_ingest(Catalog(str(tmp_path / "p")), str(source), "text", key="id", engine="pool", workers=2)
    assert pooled.engine == "pool" and pooled.version.id == auto.version.id
    inline = run_ingest(Catalog(str(tmp_path / "i")), str(source), "text", key="id", engine="inline")
    assert inline.engine == "inline" and inline.version.id == auto.version.id


def test_auto_with_an_in_process_catalog_is_inline(tmp_path):
    source = write_jsonl_source(tmp_path / "src", files=2, rows=50)
    result = run_ingest(Catalog("memory://auto-engine-test"), str(source), "text")
    assert result.engine == "inline" and result.rows == 100

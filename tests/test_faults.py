"""Reads through the fault-injecting filesystem (dsinspect/loaders/store/faults.py): the output is exactly
the clean output, or a clear project error naming the URL; never wrong data, never a hang."""

import os
import subprocess
import sys
import time

import fsspec
import pyarrow as pa
import pytest

from dsinspect.errors import DsinspectError, IntegrityError, RetriesExhausted, UserError
from dsinspect.inspect.sample import open_sample
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.faults import ENV, KINDS, FaultSpec, FaultStats, FaultyFileSystem
from dsinspect.loaders.store.verify import verify_version
from dsinspect.loaders.store.writer import WriteOptions

# slow: thousands of injected faults over real Loader epochs, and worker processes
pytestmark = pytest.mark.slow

FIELDS = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens"),
          Field("blob", pa.binary(), "bytes")]
ROWS = [{"id": i, "tokens": list(range(i % 5)), "blob": bytes([i % 251]) * (i % 7)} for i in range(256)]
MAX_ROUNDS = 250  # rounds of test_loader_epochs_survive...: ~200 survived faults each at these rates
SURVIVED_GOAL = 10_000  # the figure: injected storage faults survived with exact output in CI


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory):
    """64 shards of 4 rows (2 row groups each): many small fetches, so faults add up fast."""
    root = tmp_path_factory.mktemp("faults") / "catalog"
    Catalog(str(root)).write_version("fz", ROWS, FIELDS, options=WriteOptions(shard_rows=4, row_group_rows=2))
    return root


def faulty_catalog(catalog_dir, spec: FaultSpec, stats: FaultStats | None = None) -> Catalog:
    catalog = Catalog(str(catalog_dir))
    catalog.fs = FaultyFileSystem(catalog.fs, spec, stats)
    return catalog


def epoch(catalog: Catalog, cache_root, retries: int = 4) -> list:
    spec = RunSpec.create(catalog, "fz", seed=0, batch_size=16, world_size=1, shuffle="global")
    with Loader(spec, catalog=catalog, cache=ShardCache(cache_root, retries=retries, backoff=0.0)) as loader:
        return [(b.indices.tolist(), b.row_hashes, b.table.to_pylist()) for b in loader]


# -- the wrapper itself ----------------------------------------------------------------------------

def test_spec_grammar_round_trips_and_refuses_bad_specs():
    spec = FaultSpec.parse("seed=7, error=0.05,truncate=0.02,flip=0.02,slow=0.01,delay=0,match=*.parquet")
    assert ((spec.seed, spec.error, spec.truncate, spec.flip, spec.slow, spec.match)
            == (7, 0.05, 0.02, 0.02, 0.01, "*.parquet"))
    assert FaultSpec.parse(spec.to_text()) == spec
    for bad, word in [("error=2", "error"), ("seed=x", "seed"), ("bogus=1", "bogus"), ("error", "error"),
                      ("error=0.6,flip=0.6", "sum"), ("flip=nan", "flip"), ("error=0.1,error=0.2", "twice"),
                      ("delay=-1", "delay")]:
        with pytest.raises(UserError, match=word):
            FaultSpec.parse(bad)


def test_decisions_are_reproducible_from_the_seed(catalog_dir):
    def run(seed):
        stats = FaultStats()
        fs = FaultyFileSystem(fsspec.filesystem("file"), FaultSpec(seed=seed, error=0.2, truncate=0.2, flip=0.2), stats)
        outcomes = []
        for path in sorted(p for p in (catalog_dir / "datasets" / "fz" / "shards").iterdir())[:20]:
            for _ in range(3):
                try:
                    outcomes.append(fs.cat_file(str(path)))
                except OSError as e:
                    outcomes.append(repr(e))
        return outcomes, stats.as_dict()

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert run(1)[1]["total"] > 0


def test_each_kind_does_what_it_says(tmp_path):
    path = tmp_path / "f.bin"
    data = bytes(range(256)) * 4
    path.write_bytes(data)
    local = fsspec.filesystem("file")
    for kind in ("error", "timeout"):
        with pytest.raises((ConnectionError, OSError, TimeoutError)):
            FaultyFileSystem(local, FaultSpec(**{kind: 1.0})).cat_file(str(path))
    cut = FaultyFileSystem(local, FaultSpec(truncate=1.0)).cat_file(str(path))
    assert len(cut) < len(data) and data.startswith(cut)
    flipped = FaultyFileSystem(local, FaultSpec(flip=1.0)).cat_file(str(path))
    assert len(flipped) == len(data) and sum(bin(a ^ b).count("1") for a, b in zip(flipped, data)) == 1
    slow = FaultyFileSystem(local, FaultSpec(slow=1.0, delay=0.05))
    started = time.monotonic()
    assert slow.cat_file(str(path)) == data
    assert time.monotonic() - started >= 0.05
    # a truncated streaming read ends the file early (as a dropped connection does), until a seek
    fs = FaultyFileSystem(local, FaultSpec(seed=0, truncate=1.0))
    with fs.open(str(path), "rb") as f:
        first = f.read(100)
        assert len(first) < 100 and f.read(100) == b""
        f.seek(0)
        assert len(f.read(100)) < 100


def test_chained_url_and_environment_hook(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 64)
    with fsspec.open(f"faulty::file://{path}", "rb", faulty={"spec": "flip=1"}) as f:
        assert f.read() != b"x" * 64
    Catalog(str(tmp_path / "c")).write_version("fz", ROWS[:8], FIELDS)
    monkeypatch.setenv(ENV, "seed=1,slow=1,delay=0")
    catalog = Catalog(str(tmp_path / "c"))
    assert isinstance(catalog.fs, FaultyFileSystem)
    assert catalog.resolve("fz").row(3) == ROWS[3]
    monkeypatch.setenv(ENV, "seed=1,error=3")
    with pytest.raises(UserError, match="error=3"):
        Catalog(str(tmp_path / "c"))


def test_writes_under_injected_read_faults_stay_atomic_and_locked(tmp_path, monkeypatch):
    """Faults are for reads: a wrapped local catalog still publishes by rename under the tag lock
    (before, the wrapper hid that it was local and every write was a plain, unlocked write)."""
    monkeypatch.setenv(ENV, "seed=1,slow=1,delay=0")
    catalog = Catalog(str(tmp_path / "c"))
    assert isinstance(catalog.fs, FaultyFileSystem)
    version = catalog.write_version("fz", ROWS[:8], FIELDS)
    catalog.set_tag("fz", "mine", version.id)
    assert (tmp_path / "c" / "datasets" / "fz" / "tags.json.lock").exists()  # flock taken: only for local writes
    assert Catalog(str(tmp_path / "c")).tags("fz") == {"latest": version.id, "mine": version.id}


# -- the loader epoch: exact output through many faults ----------------------------------------------

def test_loader_epochs_survive_ten_thousand_faults_with_exact_output(catalog_dir, tmp_path):
    """Rounds of a full Loader epoch, each through a fresh shard cache (so every shard is fetched
    again) over a filesystem that fails most reads. Transient errors are retried; a truncated or
    flipped download fails its sha256 check and is fetched again. fetch.py's contract is to re-fetch
    once on a hash mismatch and then refuse: when one shard's download is damaged twice, the round ends
    in an IntegrityError naming the shard URL and both hashes (asserted) and is run again, as a
    restarted job would; so does the rare round where one fetch exhausts its retries. Only faults of
    rounds that ended in exactly the clean output are counted."""
    clean = epoch(Catalog(str(catalog_dir)), tmp_path / "clean")
    stats = FaultStats()
    spec = FaultSpec(seed=11, error=0.3, timeout=0.15, slow=0.15, truncate=0.015, flip=0.015, delay=0.0002,
                     match="*.parquet")
    catalog = faulty_catalog(catalog_dir, spec, stats)
    survived = dict.fromkeys(KINDS, 0)
    refusals, rounds, started = 0, 0, time.monotonic()
    while sum(survived.values()) < SURVIVED_GOAL:
        # a bound on work, not on time (a loaded machine is slower, never wrong): ~50 rounds reach the goal
        assert rounds < MAX_ROUNDS, f"the faults of {rounds} rounds did not reach the goal: {survived}"
        before = dict(stats.faults)
        rounds += 1
        try:
            got = epoch(catalog, tmp_path / f"round-{rounds}", retries=60)
        except (IntegrityError, RetriesExhausted) as e:
            refusals += 1
            # the contract's two clean refusals: damaged twice, or every one of the 61 tries failed
            # (at these rates a try fails with p ~ 0.83, so exhausting them is rare, not impossible)
            assert "/datasets/fz/shards/" in str(e) and ("does not match the manifest" in str(e)
                                                        or "fetch failed after 61 tries" in str(e)), str(e)
            continue
        assert got == clean  # indices, row hashes and every value
        for kind in KINDS:
            survived[kind] += stats.faults[kind] - before.get(kind, 0)
    elapsed = time.monotonic() - started
    print(f"\nfaults survived with exact output: {sum(survived.values())} {survived} in {rounds} rounds "
          f"({refusals} clean refusals after two damaged downloads of one shard), {elapsed:.1f} s")
    assert sum(survived.values()) >= SURVIVED_GOAL
    assert all(survived[k] >= 50 for k in KINDS), survived  # every kind really hit, many times
    # a clean refusal needs one fetch damaged twice in a row: with shard indexes a round fetches each
    # part of the 64 shards on its own (~3x the fetches of whole shards), so nearly half the rounds end
    # in one (44 of 87 seen); what must hold is that most rounds still read the epoch exactly
    assert refusals <= rounds * 3 // 4


@pytest.mark.parametrize("kind", ["error", "timeout", "truncate", "flip"])
def test_unrecoverable_faults_end_in_a_clear_error_naming_the_url(catalog_dir, tmp_path, kind):
    catalog = faulty_catalog(catalog_dir, FaultSpec(seed=1, match="*.parquet", **{kind: 1.0}))
    started = time.monotonic()
    with pytest.raises(RetriesExhausted if kind in ("error", "timeout") else IntegrityError) as info:
        epoch(catalog, tmp_path / "cache", retries=3)
    message = str(info.value)
    assert "\n" not in message and "/datasets/fz/shards/" in message and ".parquet" in message
    assert ("fetch failed after 4 tries" in message) if kind in ("error", "timeout") else ("re-fetch" in message)
    assert time.monotonic() - started < 30
    assert not [p for p in (tmp_path / "cache").iterdir() if p.suffix in (".arrow", ".part")]  # nothing half-kept


# -- single-row reads, viewers and verify (straight from storage, no retries) -------------------------

def _row_outcomes(catalog_dir, kind: str, seeds: range) -> dict[str, int]:
    outcomes = {"exact": 0, "clear error": 0, "wrong": 0}
    for seed in seeds:
        version = faulty_catalog(catalog_dir, FaultSpec(seed=seed, match="*.parquet", **{kind: 0.3})).resolve("fz")
        for i in range(0, 64):
            try:
                row = version.row(i)
            except DsinspectError as e:
                assert "/datasets/fz/shards/" in str(e)
                outcomes["clear error"] += 1
                continue
            outcomes["exact" if row == ROWS[i] else "wrong"] += 1
    return outcomes


@pytest.mark.parametrize("kind", ["error", "timeout", "truncate", "slow"])
def test_single_row_reads_are_exact_or_a_clear_error(catalog_dir, kind):
    outcomes = _row_outcomes(catalog_dir, kind, range(4))
    assert outcomes["wrong"] == 0 and outcomes["exact"] > 0, outcomes
    assert outcomes["clear error"] > 0 or kind == "slow", outcomes


def test_single_row_reads_survive_flipped_bytes(catalog_dir):
    outcomes = _row_outcomes(catalog_dir, "flip", range(4))
    assert outcomes["wrong"] == 0, outcomes


def test_the_sample_viewer_never_shows_a_flipped_row_as_good(catalog_dir):
    """A row damaged in transit is read again (row hash re-checked); if the damage persists the
    inspection core shows it flagged, never as good."""
    shown_good_but_wrong = exact = 0
    stats = FaultStats()
    for seed in range(4):
        version = faulty_catalog(catalog_dir, FaultSpec(seed=seed, flip=0.3, match="*.parquet"), stats).resolve("fz")
        for i in range(64):
            try:
                sample = open_sample(version, i)
            except DsinspectError:
                continue
            values = {f.name: sample.value(f.name) for f in FIELDS}
            if sample.row_hash.ok and values != ROWS[i]:
                shown_good_but_wrong += 1
            exact += sample.row_hash.ok and values == ROWS[i]
            sample.to_json()  # every view builds
    assert shown_good_but_wrong == 0 and exact > 0 and stats.faults["flip"] > 0, stats.faults


def test_verify_never_passes_damaged_reads_and_never_raises(catalog_dir):
    clean = verify_version(Catalog(str(catalog_dir)).resolve("fz"))
    assert clean.ok
    damaged = verify_version(faulty_catalog(catalog_dir, FaultSpec(seed=2, flip=1.0, match="*.parquet")).resolve("fz"))
    assert all(not s.ok for s in damaged.shards)
    slow = verify_version(
        faulty_catalog(catalog_dir, FaultSpec(seed=2, slow=1.0, delay=0, match="*.parquet")).resolve("fz"))
    assert slow.ok
    stats = FaultStats()
    mixed = verify_version(faulty_catalog(catalog_dir, FaultSpec(seed=3, error=0.1, truncate=0.1, flip=0.1,
                                                                 match="*.parquet"), stats).resolve("fz"))
    bad = [s for s in mixed.shards if not s.ok]
    assert bad and len(bad) < len(mixed.shards) and stats.total >= len(bad)
    assert all(p and "\n" not in p for s in bad for p in s.problems)


# -- the debug flag ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_flag_injects_faults_and_reports_them(catalog_dir):
    def run(*args):
        env = {**os.environ, "DSINSPECT_CATALOG": str(catalog_dir)}
        env.pop(ENV, None)
        return subprocess.run([sys.executable, "-m", "dsinspect", *args], capture_output=True, text=True, env=env,
                              timeout=120)

    damaged = run("--inject-faults", "seed=3,flip=1,match=*.parquet", "verify", "fz")
    assert damaged.returncode == 1 and "Traceback" not in damaged.stderr
    assert "injected" in damaged.stderr and "flip=" in damaged.stderr and "sha256 mismatch" in damaged.stderr
    slow = run("--inject-faults", "seed=3,slow=1,delay=0", "verify", "fz")
    assert slow.returncode == 0, slow.stderr
    bad = run("--inject-faults", "seed=3,error=7", "ls")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "error=7" in bad.stderr

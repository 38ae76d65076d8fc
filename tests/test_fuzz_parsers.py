"""Fuzzing the parsers that read stored or user-given text: manifests, addresses, run specs, loader
states. Property: a result, or the project's own clear error (DsinspectError), never anything else.
Hypothesis draws seeds (derandomized, no example database: CI is reproducible); each seed drives a
cheap mutator over real inputs, and every input fed to a parser is counted."""

import json
import random
import resource

import pytest
from fuzz_helpers import mutate_bytes, mutate_json, run_inputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsinspect.defaults import open_catalog
from dsinspect.errors import DsinspectError, UserError
from dsinspect.loaders.format.manifest import Manifest
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.order.state import LoaderState
from dsinspect.loaders.store.address import NAME_PATTERN, parse_address

GOAL = 10_000  # inputs per parser (the figure)
PER_SEED = 50
FUZZ = settings(max_examples=GOAL // PER_SEED, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def catalog():
    return open_catalog()


@pytest.fixture(scope="module")
def manifests(catalog):
    return [catalog.fs.cat_file(catalog.layout.manifest(name, vid)) for name in catalog.datasets()
            for vid in catalog.version_ids(name)]


@pytest.fixture(scope="module")
def spec(catalog):
    return RunSpec.create(catalog, {"demo-text@v1": 2.0, "demo-images@v1": 1.0}, seed=3, batch_size=4, world_size=2,
                          shuffle="window")


def fuzz(build_inputs, call) -> int:
    """Run `call` on every input `build_inputs(rng)` yields, for GOAL // PER_SEED seeds; the count."""
    count = [0]

    @FUZZ
    @given(st.integers(0, 2 ** 64 - 1))
    def run(seed):
        count[0] += run_inputs(build_inputs(random.Random(seed)), call, (DsinspectError,))

    run()
    return count[0]


def test_manifest_parsing(manifests):
    def inputs(rng):
        for _ in range(PER_SEED):
            raw = rng.choice(manifests)
            if rng.random() < 0.5:
                yield mutate_bytes(raw, rng)
            else:
                yield json.dumps(mutate_json(json.loads(raw), rng), allow_nan=True).encode()

    assert fuzz(inputs, lambda raw: Manifest.from_bytes(raw, "fuzzed manifest")) >= GOAL


def test_address_parsing():
    good = ["demo-text", "demo-text@v1:17", "a@latest:0", "x.y_z@0123abcd:0", "A" * 128]
    pieces = ["@", ":", "..", "/", "\\", "\0", "\n", "%2e", "é", "ａ",
              "-", "_", ".", "0", "-5", "1e3", " ", "s3://", "C:"]

    def inputs(rng):
        for _ in range(PER_SEED):
            text = rng.choice(good)
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(len(text) + 1)
                text = text[:i] + rng.choice(pieces) + text[i + rng.randrange(3):]
            yield text

    def check(text):
        address = parse_address(text)
        import re
        assert re.fullmatch(NAME_PATTERN, address.name) and re.fullmatch(NAME_PATTERN, address.ref), address
        # the index, when there is one, is exactly the ASCII digits after the last ':' (no sign, space, other digits)
        if address.index is not None:
            tail = text.rsplit(":", 1)[1]
            assert address.index >= 0 and tail == f"{address.index:0{len(tail)}d}", text

    assert fuzz(inputs, check) >= GOAL


def test_run_spec_parsing(spec):
    valid = spec.dumps()

    def inputs(rng):
        for _ in range(PER_SEED):
            if rng.random() < 0.3:
                yield mutate_bytes(valid.encode(), rng).decode("utf-8", "replace")
            else:
                yield json.dumps(mutate_json(json.loads(valid), rng), allow_nan=True)

    def check(text):
        parsed = RunSpec.loads(text, "fuzzed spec")
        assert parsed.order_hash == RunSpec.loads(parsed.dumps()).order_hash  # accepted means round-trips

    assert fuzz(inputs, check) >= GOAL


def test_loader_state_loading(spec):
    states = [LoaderState.at(spec, step, rank).to_json() for step in (0, 7, 123) for rank in (0, 1)]

    def inputs(rng):
        for _ in range(PER_SEED):
            yield mutate_json(rng.choice(states), rng)

    def check(data):
        LoaderState.from_json(data).resume_spec(spec)

    assert fuzz(inputs, check) >= GOAL


def test_bombs_stay_bounded(manifests):
    """Crafted inputs that declare huge sizes do not allocate them."""
    start = _rss_mb()
    data = json.loads(manifests[0])
    data["num_rows"] = 10 ** 12
    data["shards"] = [{**data["shards"][0], "rows": 10 ** 12}]
    huge = Manifest.from_bytes(json.dumps(data).encode(), "bomb")  # consistent, so accepted: but nothing allocated
    assert huge.num_rows == 10 ** 12
    for raw in (b"[" * 200_000 + b"]" * 200_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
                b'"' + b"x" * (1 << 20)):
        with pytest.raises(DsinspectError):
            Manifest.from_bytes(raw, "bomb")
    with pytest.raises(DsinspectError):
        RunSpec.loads("[" * 200_000 + "]" * 200_000)
    assert _rss_mb() - start < 200


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):  # peak resident set
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("field, value", [("name", "Infinity"), ("name", "null"), ("version", "[1]")])
def test_run_spec_sources_that_are_not_strings_are_refused(spec, field, value):
    """Found by a newer hypothesis in CI: a source name of Infinity reached the order hash's JSON
    encoder (ValueError) instead of being refused."""
    text = spec.dumps().replace(f'"{field}": "{getattr(spec.sources[0], field)}"', f'"{field}": {value}', 1)
    with pytest.raises(UserError, match=f"source {field} must be a string"):
        RunSpec.loads(text)

"""Fuzzing every decoder of the inspection core. The views must never raise: the property is "returns
a View" (an ErrorView when the input is broken), for mutated real media, random bytes and hostile
structures. Hypothesis draws seeds (derandomized, no database); each seed drives a cheap mutator,
and every input decoded is counted."""

import io
import math
import random

import numpy as np
import pytest
from fuzz_helpers import HOSTILE_VALUES, mutate_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from dsinspect.defaults import open_catalog
from dsinspect.inspect.hexdump import hex_page
from dsinspect.inspect.images import image_view
from dsinspect.inspect.sample import open_sample
from dsinspect.inspect.structured import array_view, bytes_view, json_view, scalar_view
from dsinspect.inspect.text import text_view
from dsinspect.inspect.tokens import tokens_view
from dsinspect.inspect.trajectory import trajectory_view
from dsinspect.inspect.video import video_view
from dsinspect.inspect.views import View
from dsinspect.loaders.format.npy import to_npy

# slow: property-based fuzzing of every decoder (Hypothesis: hundreds of inputs each)
pytestmark = pytest.mark.slow

GOAL = 10_000
PER_SEED = 50


def fuzz(build_inputs, decode, goal: int = GOAL) -> int:
    count = [0]

    @settings(max_examples=goal // PER_SEED, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2 ** 64 - 1))
    def run(seed):
        for item in build_inputs(random.Random(seed)):
            count[0] += 1
            try:
                view = decode(item)
                assert isinstance(view, View), type(view)
                view.to_json()
            except Exception as e:  # noqa: BLE001 - the property: views never raise
                raise AssertionError(f"{e.__class__.__name__}: {e} on input {item!r:.400}") from e

    run()
    return count[0]


@pytest.fixture(scope="module")
def images():
    out = []
    for fmt in ("PNG", "JPEG", "WEBP", "GIF"):
        buf = io.BytesIO()
        Image.new("RGB", (8, 6), (200, 30, 90)).save(buf, fmt)
        out.append(buf.getvalue())
    return out


@pytest.fixture(scope="module")
def sample_version():
    return open_catalog().resolve("demo-video@v1")


def test_images(images):
    def inputs(rng):
        for _ in range(PER_SEED):
            r = rng.random()
            yield rng.randbytes(rng.randrange(64)) if r < 0.1 else mutate_bytes(rng.choice(images), rng)

    assert fuzz(inputs, image_view) >= GOAL


def _small_inputs(kind: str):
    """Inputs for one of the small decoders: random bytes, their text, JSON framings and nesting
    bombs, hostile scalars, ragged and non-finite number arrays."""
    def inputs(rng):
        for _ in range(PER_SEED):
            raw = rng.randbytes(rng.randrange(300))
            if kind == "text":
                yield raw if rng.random() < 0.5 else raw.decode("utf-8", "surrogateescape")
            elif kind == "json":
                yield rng.choice((lambda: raw, lambda: b'{"a": [1, ' + raw + b"]}",  # noqa: B023 (called at once)
                                  lambda: b"[" * rng.randrange(600) + b"]" * rng.randrange(600)))()
            elif kind == "scalar":
                yield rng.choice(HOSTILE_VALUES + [raw, 1.5, -0.0])
            elif kind == "array" and rng.random() < 0.3:  # a .npy value (rows of varying dtype), mutated
                yield mutate_bytes(to_npy(np.arange(rng.randrange(6)).astype(rng.choice(["<i8", "<f4", "|b1"]))
                                          .reshape(rng.choice([(-1,), (-1, 1)]))), rng)
            elif kind == "array":
                yield [rng.choice([rng.random(), float("nan"), float("inf"), None, rng.randrange(-9, 9),
                                   [rng.random() for _ in range(rng.randrange(4))]])
                       for _ in range(rng.randrange(12))]
            else:
                yield raw
    return inputs


def _hex_then_bytes(value: bytes):
    page = hex_page(value, page=random.Random(len(value)).randrange(-2, 5))
    assert page is not None
    return bytes_view(value)


@pytest.mark.parametrize("kind, decode", [
    ("text", text_view), ("json", json_view), ("bytes", bytes_view), ("hexdump", _hex_then_bytes),
    ("scalar", lambda v: scalar_view(v, "double")), ("array", array_view)])
def test_small_decoders(kind, decode):
    assert fuzz(_small_inputs(kind), decode) >= GOAL


def test_tokens():
    vocab = open_sample(open_catalog().resolve("demo-text@v1"), 0)._vocab(
        open_catalog().resolve("demo-text@v1").manifest.field("tokens"), None)[0]

    def inputs(rng):
        for _ in range(PER_SEED):
            n = rng.randrange(80)
            ids = [rng.choice((None, -1, 0, 2 ** 31 - 1, -2 ** 31, 10 ** 12, rng.randrange(300), rng.randrange(70000)))
                   for _ in range(n)]
            yield ids, rng.random() < 0.7, rng.choice((1, 7, 256, 10 ** 6))

    assert fuzz(inputs, lambda item: tokens_view(item[0], vocab if item[1] else None, page_size=item[2])) >= GOAL


def test_trajectories():
    def inputs(rng):
        for _ in range(PER_SEED):
            n = rng.choice((0, 1, 3, 17))
            value = {"observation": [[rng.choice((0.0, math.nan, math.inf, -1e308))] * rng.randrange(3)
                                     for _ in range(n)],
                     "action": [rng.choice((0, -1, 2 ** 31)) for _ in range(n + rng.choice((0, 0, 1, -1)))],
                     "reward": [rng.choice((1.0, math.nan, -math.inf, None)) for _ in range(rng.choice((n, n + 2)))],
                     "terminated": [rng.random() < 0.1 for _ in range(n)], "truncated": None}
            for _ in range(rng.randrange(3)):
                value[rng.choice(list(value) + ["extra", "done", "obs"])] = rng.choice(HOSTILE_VALUES)
            yield value

    assert fuzz(inputs, trajectory_view) >= GOAL


def test_video(sample_version):
    clips = sorted((sample_version.row(i)["video"] for i in range(sample_version.num_rows)), key=len)[:2]

    def inputs(rng):
        for _ in range(PER_SEED):
            clip = rng.choice(clips)
            r = rng.random()
            yield (clip[: rng.randrange(len(clip))] if r < 0.3 else rng.randbytes(rng.randrange(64)) if r < 0.35
                   else mutate_bytes(clip, rng))

    assert fuzz(inputs, video_view, VIDEO_GOAL) >= VIDEO_GOAL


VIDEO_GOAL = GOAL


def test_decompression_bombs_stay_bounded():
    """A PNG header declaring 60000x60000 pixels and a JSON nesting bomb: an error view, little memory."""
    import struct
    import zlib

    start = _peak_rss_mb()
    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    png = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
           + struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND")))
    assert image_view(png).kind == "error"
    assert json_view(b"[" * 1_000_000 + b"]" * 1_000_000).kind in ("error", "json")
    assert isinstance(tokens_view([1] * 1_000_000, None), View)
    assert _peak_rss_mb() - start < 300


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def test_inputs_the_fuzzer_found_in_ci():
    """Found by a newer hypothesis in a fresh CI venv: a GIF whose first frame decodes and whose
    second frame header is cut (Pillow raised IndexError while counting frames)."""
    gif = (b"GIF87a\x08\x00\x06\x00\x81\x00\x00\xc8\x1eZ" + b"\x00" * 9 + b",\x00\x00\x00\x00\x08\x00\x06\x00\x00"
           b"\x00\x00,\x00\x00\x00\x00\x08\x00\x06c\xf6t\xef\xbf.`\xcc\x07\x00\x00\x08\x0e\x00\x01\x08\x1cH\xb0\xa0"
           b"\xc1\x83\x08\x13\x0e\x0c\x08\x00;\x00\x08\x0e\x00\x01\x08\x1cH\xb0\xa0\xc1\x83\x08\x13\x0e\x0c\x08\x00;")
    view = image_view(gif)
    assert view.kind == "image" and view.frames == 1
    assert [f.code for f in view.findings] == ["image-frames"]
    view.to_json()

"""Test media (real encoders, no network) and an exact row comparison for the ingest source tests."""

from __future__ import annotations

import io
import math
import struct
from fractions import Fraction
from functools import lru_cache

import av
import numpy as np
from PIL import Image

from dsinspect.demo.video import encode_mp4, render_frames


def _picture(seed: int, size=(24, 16)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB")


@lru_cache(maxsize=None)
def image_bytes(fmt: str, seed: int = 0) -> bytes:
    """A small picture encoded by Pillow as `fmt` (JPEG, PNG, WEBP, GIF)."""
    buf = io.BytesIO()
    _picture(seed).save(buf, fmt)
    return buf.getvalue()


@lru_cache(maxsize=None)
def mp4_bytes() -> bytes:
    return encode_mp4(render_frames("slide", "red", "blue", (32, 32), 3), (32, 32), 10)


@lru_cache(maxsize=None)
def webm_bytes() -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="webm") as out:
        stream = out.add_stream("libvpx-vp9", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i, arr in enumerate(render_frames("slide", "green", "black", (32, 32), 3)):
            frame = av.VideoFrame.from_ndarray(arr, format="yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, 10)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def odd_floats() -> list[float]:
    """Floats whose bits a sloppy reader would change: -0.0, subnormals, extremes, NaN payloads aside."""
    return [0.1, -0.0, 5e-324, 1.7976931348623157e308, math.pi, -2.5, 1 / 3, float("inf")]


def float_bits(x: float | None) -> int | None:
    return None if x is None else struct.unpack("<Q", struct.pack("<d", x))[0]


def assert_rows_identical(got: list[dict], want: list[dict]) -> None:
    """Every row, every field equal; floats bit-for-bit, bytes as bytes (no implicit str/bytes mixing)."""
    assert len(got) == len(want), (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        assert set(g) == set(w), (i, sorted(g), sorted(w))
        for k in w:
            _assert_value(g[k], w[k], f"row {i} field {k!r}")


def _assert_value(g, w, where: str) -> None:
    if isinstance(w, float):
        assert isinstance(g, float) and float_bits(g) == float_bits(w), (where, g, w)
    elif isinstance(w, (bytes, bytearray)):
        assert isinstance(g, bytes) and g == bytes(w), (where, g[:16] if isinstance(g, bytes) else g, w[:16])
    elif isinstance(w, (list, tuple)):
        assert isinstance(g, list) and len(g) == len(w), (where, g, w)
        for j, (a, b) in enumerate(zip(g, w)):
            _assert_value(a, b, f"{where}[{j}]")
    elif isinstance(w, dict):
        assert isinstance(g, dict) and set(g) == set(w), (where, g, w)
        for k in w:
            _assert_value(g[k], w[k], f"{where}.{k}")
    else:
        assert type(g) is type(w) and g == w, (where, g, w)


def mds_writer_class():
    """mosaicml-streaming's MDSWriter without running `streaming/__init__`, which imports its
    DataLoader (needs transformers) and vision datasets (torchvision; its PyPI wheel cannot load beside
    the CPU torch). The writer itself needs neither: empty package shells skip those two __init__s."""
    import importlib.util
    import sys
    import types

    if "streaming" not in sys.modules:
        root = importlib.util.find_spec("streaming").submodule_search_locations[0]
        for name, sub in (("streaming", ""), ("streaming.base", "/base")):
            shell = types.ModuleType(name)
            shell.__path__ = [root + sub]
            sys.modules[name] = shell
    from streaming.base.format.mds.writer import MDSWriter

    return MDSWriter

"""Deterministic tiny H.264 MP4 clips of a moving shape, encoded in memory with PyAV.

Frames are drawn and converted to yuv420p (BT.601, limited range) in numpy, so swscale's CPU-specific
paths are never used. libx264 runs single-threaded with every SIMD path off (``asm=0``) and a fixed GOP,
and the muxer with ``+bitexact``, so the bytes are the same on every CPU, in every run and process.

Why ``asm=0``, and why through ``x264-params``: x264's AVX-512 code made different bytes from identical
frames from one encode to the next on AVX-512 machines (a clip took 3 forms in 6 encodes in one
process; with SIMD off or capped at AVX2 it took one). ``asm`` is not an option of FFmpeg's libx264
wrapper, and PyAV drops options nobody reads without a word, so it must go to x264 itself, whose
parser refuses a key it does not know. ``tests/test_demo_generators.py`` checks the options arrive.
"""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np

_SALT = 0x71DE
_MASK = (1 << 64) - 1
_GOP = 12

COLORS = {
    "red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 70), "yellow": (245, 210, 40),
    "orange": (245, 140, 30), "purple": (140, 60, 190), "white": (245, 245, 245), "black": (20, 20, 20),
}
_BACKGROUNDS = ["blue", "black", "white", "green", "purple"]
MOTIONS = {
    "bounce": "a {fg} ball bouncing from left to right on a {bg} background",
    "slide": "a {fg} square sliding from left to right on a {bg} background",
    "orbit": "a {fg} ball circling the centre of a {bg} background",
    "pulse": "a {fg} disc growing and shrinking on a {bg} background",
    "sweep": "a {fg} vertical bar sweeping across a {bg} background",
}
SIZES = [(64, 48), (96, 64)]
FPS = [12, 24]

# Every x264 setting in x264's own syntax: one parser that fails loudly on a typo.
X264_PARAMS = f"asm=0:threads=1:keyint={_GOP}:scenecut=0:bframes=0:crf=30"
_X264 = {"preset": "medium", "threads": "1", "x264-params": X264_PARAMS}


def _rng(seed: int, clip_id: int, salt: int = _SALT) -> np.random.Generator:
    """Per-row generator so a clip depends only on (seed, clip_id)."""
    return np.random.default_rng([seed & _MASK, clip_id & _MASK, salt])


def _coverage(motion: str, t: float, w: int, h: int) -> np.ndarray:
    """Anti-aliased foreground coverage in [0, 1] at phase t in [0, 1]."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    r = min(w, h) * 0.18
    if motion == "sweep":
        cx = r + t * (w - 2 * r)
        return np.clip(r * 0.5 + 0.5 - np.abs(xx - cx), 0, 1)
    if motion == "orbit":
        a = 2 * np.pi * t
        cx, cy = w / 2 + np.cos(a) * w * 0.28, h / 2 + np.sin(a) * h * 0.25
    elif motion == "pulse":
        cx, cy, r = w / 2, h / 2, r * (0.6 + 0.9 * np.sin(np.pi * t))
    else:
        cx = r + t * (w - 2 * r)
        cy = h / 2 if motion == "slide" else h - r - abs(np.sin(3 * np.pi * t)) * (h - 2 * r)
    if motion == "slide":
        d = np.maximum(np.abs(xx - cx), np.abs(yy - cy))
    else:
        d = np.hypot(xx - cx, yy - cy)
    return np.clip(r + 0.5 - d, 0, 1)


def _yuv420(rgb: np.ndarray) -> np.ndarray:
    """RGB (h, w, 3) float -> planar yuv420p bytes laid out as PyAV expects, shape (h*3/2, w)."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 16 + 0.257 * r + 0.504 * g + 0.098 * b
    u = 128 - 0.148 * r - 0.291 * g + 0.439 * b
    v = 128 + 0.439 * r - 0.368 * g - 0.071 * b
    h, w = y.shape
    sub = lambda p: p.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))  # noqa: E731
    planes = [y.ravel(), sub(u).ravel(), sub(v).ravel()]
    flat = np.clip(np.concatenate(planes).round(), 0, 255).astype(np.uint8)
    return flat.reshape(h * 3 // 2, w)


def render_frames(motion: str, fg: str, bg: str, size: tuple[int, int], n: int) -> list[np.ndarray]:
    """Draw ``n`` yuv420p frames of the moving shape."""
    w, h = size
    f, b = np.array(COLORS[fg], np.float64), np.array(COLORS[bg], np.float64)
    frames = []
    for i in range(n):
        cov = _coverage(motion, i / max(1, n - 1), w, h)[..., None]
        frames.append(_yuv420(b * (1 - cov) + f * cov))
    return frames


def encode_mp4(frames: list[np.ndarray], size: tuple[int, int], fps: int) -> bytes:
    """Encode yuv420p frames as H.264 in MP4 (in memory, no faststart) with fixed options."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4", options={"fflags": "+bitexact"}) as out:
        stream = out.add_stream("libx264", rate=fps, options=dict(_X264))
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i, arr in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(arr, format="yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def _spec(rng: np.random.Generator) -> dict:
    """Draw the parameters of one clip."""
    motion = list(MOTIONS)[int(rng.integers(len(MOTIONS)))]
    bg = _BACKGROUNDS[int(rng.integers(len(_BACKGROUNDS)))]
    fgs = [c for c in COLORS if c != bg]
    return {"motion": motion, "fg": fgs[int(rng.integers(len(fgs)))], "bg": bg,
            "size": SIZES[int(rng.integers(len(SIZES)))], "fps": FPS[int(rng.integers(len(FPS)))],
            "n": int(rng.integers(12, 31))}


def _row(clip_id: int, spec: dict) -> dict:
    """Render, encode and describe one clip."""
    frames = render_frames(spec["motion"], spec["fg"], spec["bg"], spec["size"], spec["n"])
    caption = MOTIONS[spec["motion"]].format(fg=spec["fg"], bg=spec["bg"])
    return {"clip_id": clip_id, "video": encode_mp4(frames, spec["size"], spec["fps"]), "caption": caption,
            "fps": spec["fps"], "num_frames": spec["n"], "width": spec["size"][0], "height": spec["size"][1]}


def video_rows(start_id: int, count: int, seed: int) -> list[dict]:
    """Rows ``clip_id = start_id .. start_id+count-1`` with MP4 bytes and metadata."""
    return [_row(i, _spec(_rng(seed, i))) for i in range(start_id, start_id + count)]


def mutate_video_row(row: dict, seed: int) -> dict:
    """Return a different clip (new motion/colours/length) with the same clip_id."""
    rng = _rng(seed, row["clip_id"], salt=_SALT + 1)
    while True:
        new = _row(row["clip_id"], _spec(rng))
        if new["caption"] != row["caption"] and new["video"] != row["video"]:
            return new

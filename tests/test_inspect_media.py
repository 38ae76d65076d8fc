"""Images and video: what the sample catalog holds, decoded exactly, and broken files that become
error views (with whatever did decode) instead of exceptions."""

import io
import struct
import zlib
from fractions import Fraction

import av
import numpy as np
import pytest
from PIL import Image

from dsinspect.defaults import BUNDLED
from dsinspect.inspect import ErrorView, FrameView, ImageView, VideoView, image_view, video_view
from dsinspect.loaders.store.catalog import Catalog


@pytest.fixture(scope="module")
def images():
    return Catalog(str(BUNDLED)).resolve("demo-images@v1")


@pytest.fixture(scope="module")
def clips():
    return Catalog(str(BUNDLED)).resolve("demo-video@v1")


def png_declaring(width, height):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
            + chunk(b"IEND", b""))


def encode(fmt, frames=24, size=(64, 48), fps=12, **options):
    buf = io.BytesIO()
    codec = {"webm": "libvpx-vp9", "mp4": "libx264"}[fmt]
    with av.open(buf, "w", format=fmt, options=options) as out:
        stream = out.add_stream(codec, rate=fps, options={"threads": "1", "g": "6"})
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), (i * 7) % 256, np.uint8), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


# -- images ------------------------------------------------------------------------------------

def test_every_sample_image_decodes_with_its_recorded_size_and_format(images):
    for i in range(images.num_rows):
        row = images.row(i)
        view = image_view(row["image"])
        assert isinstance(view, ImageView), (i, getattr(view, "reason", None))
        assert (view.format.lower(), view.width, view.height) == (row["format"], row["width"], row["height"])
        assert view.byte_size == len(row["image"]) and not view.errors


def test_exif_orientation_turns_the_picture_upright(images):
    row = next(images.row(i) for i in range(images.num_rows) if "orientation 6" in images.row(i)["caption"])
    view = image_view(row["image"])
    assert view.orientation == 6 and (view.display_width, view.display_height) == (view.height, view.width)
    assert (view.image().size == (view.height, view.width)
            and view.image(oriented=False).size == (view.width, view.height))
    assert view.findings[0].code == "image-orientation"
    upright = np.asarray(view.image(), dtype=float).mean(axis=2)
    # the demo draws an arrow pointing up: the upper rows hold less of it than the lower rows
    assert ((upright[: upright.shape[0] // 3] != upright[0, 0]).sum()
            < (upright[upright.shape[0] // 3:] != upright[0, 0]).sum())


def test_thumbnail_png_and_pixels(images):
    view = image_view(images.row(0)["image"])
    assert max(view.thumbnail(16).size) == 16
    assert Image.open(io.BytesIO(view.png(max_side=20))).size[0] <= 20
    px = view.pixels(10, 10)
    assert px.dtype == np.uint8 and px.shape[2] == 3 and max(px.shape[:2]) == 10
    assert "decoded" not in view.to_json()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_images_become_error_views(fmt):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, fmt)
    data = buf.getvalue()
    cut = data[: len(data) // 2]
    view = image_view(cut)
    assert isinstance(view, ErrorView) and view.role == "image" and view.raw == cut
    assert "truncated" in view.reason.lower()
    assert view.hex().lines[0].hex.startswith("89 50" if fmt == "PNG" else "ff d8")


def test_png_declaring_a_huge_size_is_refused_before_decoding():
    for w, h, words in [(9000, 9000, "81,000,000 pixels"), (100_000, 100_000, "decompression-bomb")]:
        view = image_view(png_declaring(w, h))
        assert isinstance(view, ErrorView) and words in view.reason
    assert isinstance(image_view(png_declaring(40, 40), max_pixels=1000), ErrorView)


def test_not_an_image_and_empty():
    assert "first bytes 68 65 6c 6c 6f" in image_view(b"hello").reason
    assert "0 bytes" in image_view(b"").reason


# -- video -------------------------------------------------------------------------------------

def test_sample_clips_report_their_recorded_metadata(clips):
    for i in range(clips.num_rows):
        row = clips.row(i)
        view = video_view(row["video"])
        assert isinstance(view, VideoView), (i, getattr(view, "reason", None))
        assert (view.width, view.height, view.frame_count) == (row["width"], row["height"], row["num_frames"])
        assert view.fps == row["fps"] and view.codec == "h264" and "mp4" in view.container
        assert view.keyframes[0] == 0 and view.duration == pytest.approx(row["num_frames"] / row["fps"], abs=0.05)
        assert not view.findings


def test_frames_by_index_and_time_match_a_linear_decode(clips):
    raw = clips.row(0)["video"]
    view = video_view(raw)
    with av.open(io.BytesIO(raw)) as container:
        linear = [np.asarray(f.to_image()) for f in container.decode(video=0)]
    assert len(linear) == view.frame_count
    for i in (0, 5, view.keyframes[-1], view.frame_count - 1, 3):
        frame = view.frame(i)
        assert isinstance(frame, FrameView) and frame.index == i
        assert np.array_equal(np.asarray(frame.picture), linear[i])
    assert view.frame(-1).index == view.frame_count - 1
    at = view.frame_at(0.5)
    assert at.time <= 0.5 < at.time + 1 / view.fps
    assert isinstance(view.frame(view.frame_count), ErrorView)


def test_strip_of_evenly_spaced_thumbnails(clips):
    view = video_view(clips.row(1)["video"])
    strip = view.strip(5, max_side=32)
    assert [f.index for f in strip][0] == 0 and strip[-1].index == view.frame_count - 1 and len(strip) == 5
    assert all(max(f.picture.size) <= 32 for f in strip)
    assert [f.keyframe for f in strip][0] is True


def test_mp4_cut_in_half_and_zero_bytes(clips):
    raw = clips.row(0)["video"]
    cut = video_view(raw[: len(raw) // 2])
    assert isinstance(cut, ErrorView) and cut.raw == raw[: len(raw) // 2]
    assert "truncated" in cut.reason and "moov" in cut.reason
    empty = video_view(b"")
    assert isinstance(empty, ErrorView) and "0 bytes" in empty.reason
    garbage = video_view(b"\x00\x01" * 500)
    assert isinstance(garbage, ErrorView) and garbage.partial is None


def test_webm_cut_in_half_keeps_the_frames_it_has():
    data = encode("webm")
    assert video_view(data).frame_count == 24
    cut = video_view(data[: len(data) // 2])
    assert isinstance(cut, VideoView) and 0 < cut.frame_count < 24
    assert "video-short" in {f.code for f in cut.findings}
    assert isinstance(cut.frame(cut.frame_count - 1), FrameView)


def test_fragmented_mp4_cut_in_half_decodes_its_complete_frames():
    data = encode("mp4", frames=36, movflags="frag_keyframe+empty_moov")
    cut = video_view(data[: len(data) // 2])
    assert isinstance(cut, VideoView) and 0 < cut.frame_count < 36
    assert "video-truncated" in {f.code for f in cut.findings}
    assert isinstance(cut.frame(0), FrameView)


@pytest.mark.parametrize("fmt, options", [("mp4", {}), ("mp4", {"movflags": "frag_keyframe+empty_moov"}), ("webm", {})])
def test_every_cut_and_every_damaged_spot_gives_a_view(fmt, options):
    """Cut the file at 40 places and overwrite 16 bytes at 40 others: always a view, never an exception;
    a fragmented MP4 damaged mid-way keeps the frames decoded before the damage as `partial`."""
    data = encode(fmt, frames=36, **options)
    step = max(1, len(data) // 40)
    kinds = set()
    for pos in range(40, len(data), step):
        damaged = bytearray(data)
        damaged[pos:pos + 16] = b"\xff" * 16
        for blob in (data[:pos], bytes(damaged)):
            view = video_view(blob)
            assert isinstance(view, (VideoView, ErrorView))
            if isinstance(view, ErrorView) and view.partial is not None:
                kinds.add("partial")
                assert view.partial.frame_count >= 1 and isinstance(view.partial.frame(0), FrameView)
                assert view.partial.findings[0].code == "video-partial"
            elif isinstance(view, VideoView) and view.frame_count:
                kinds.add("video")
                assert isinstance(view.frame(view.frame_count - 1), (FrameView, ErrorView))
            else:
                kinds.add("error")
    assert "video" in kinds and ("error" in kinds or "partial" in kinds)
    if options:
        assert "partial" in kinds


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_every_cut_and_every_damaged_spot_of_an_image_gives_a_view(fmt):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(buf, fmt)
    data = buf.getvalue()
    for pos in range(0, len(data), max(1, len(data) // 40)):
        damaged = bytearray(data)
        damaged[pos:pos + 8] = b"\xff" * 8
        for blob in (data[:pos], bytes(damaged)):
            view = image_view(blob)
            assert isinstance(view, (ImageView, ErrorView))
            if isinstance(view, ErrorView):
                assert view.raw == blob and view.reason

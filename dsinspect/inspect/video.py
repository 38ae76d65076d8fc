"""Video: container, codec, fps, duration, frame count and keyframes from demuxing (no decoding);
frames by index or time by seeking, and a strip of evenly spaced thumbnails, decoded when asked.

A file that will not demux becomes an ErrorView whose `partial` holds the frames that did decode.
"""

from __future__ import annotations

import bisect
import io
import struct
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, Iterator

import av
import numpy as np
from PIL import Image

from dsinspect.inspect.images import MAX_PIXELS, fit_pixels, png_bytes
from dsinspect.inspect.views import ErrorView, Finding, Severity, View, no_json, reason_of

__all__ = ["FrameView", "VideoView", "video_view", "decodable_frames", "container_name", "MAX_PACKETS", "MAX_DECODE"]

MAX_PACKETS = 200_000   # packets demuxed when probing; more are not counted
MAX_DECODE = 2_000      # frames decoded to reach one requested frame
SALVAGE_KEEP = 64       # frames of a broken file kept (as thumbnails) for viewing
SALVAGE_SIDE = 256


@dataclass
class FrameView(View):
    """One decoded frame; `picture` is RGB, possibly a thumbnail of a `width` x `height` frame."""

    kind: ClassVar[str] = "frame"
    index: int
    pts: int | None
    time: float | None
    keyframe: bool
    width: int
    height: int
    picture: Image.Image = no_json(default=None)

    def image(self) -> Image.Image:
        return self.picture.copy()

    def pixels(self, max_width: int, max_height: int) -> np.ndarray:
        return fit_pixels(self.picture, max_width, max_height)

    def png(self) -> bytes:
        return png_bytes(self.picture)


@dataclass
class VideoView(View):
    """What demuxing says about a video; frames decode on request through `frame`, `frame_at`, `strip`."""

    kind: ClassVar[str] = "video"
    container: str
    codec: str
    width: int
    height: int
    pix_fmt: str | None
    fps: float | None
    duration: float | None
    frame_count: int
    keyframes: list[int]
    byte_size: int
    bit_rate: int | None
    streams: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    raw: bytes = no_json(default=b"")
    stream_index: int = no_json(default=0)
    pts: list[int] = no_json(default_factory=list)        # presentation timestamps in display order
    time_base: Fraction = no_json(default=Fraction(1))
    seekable: bool = no_json(default=True)
    decoded: dict[int, FrameView] | None = no_json(default=None)  # a broken file's frames, kept

    def frame(self, index: int, max_side: int | None = None) -> FrameView | ErrorView:
        """The frame at `index` in display order (negative counts from the end)."""
        return self.frames([index], max_side)[0]

    def frame_index_at(self, seconds: float) -> int:
        """Index of the frame shown at `seconds` from the start."""
        if not self.pts:  # frames without timestamps: count by the frame rate
            return min(max(0, self.frame_count - 1), max(0, int(seconds * (self.fps or 0))))
        target = self.pts[0] + seconds / float(self.time_base)
        return max(0, bisect.bisect_right(self.pts, target) - 1)

    def frame_at(self, seconds: float, max_side: int | None = None) -> FrameView | ErrorView:
        return self.frame(self.frame_index_at(seconds), max_side)

    def strip(self, count: int = 8, max_side: int = 96) -> list[FrameView | ErrorView]:
        """`count` evenly spaced frames, first and last included, as thumbnails."""
        n = self.frame_count
        if n == 0:
            return []
        picks = sorted({round(i * (n - 1) / max(1, count - 1)) for i in range(min(count, n))})
        return self.frames(picks, max_side)

    def frames(self, indices: list[int], max_side: int | None = None) -> list[FrameView | ErrorView]:
        """Several frames decoded through one open container (seeking to each)."""
        indices = [i + self.frame_count if i < 0 else i for i in indices]
        if not indices:
            return []
        if self.decoded is not None:
            return [self._kept(i, max_side) for i in indices]
        refused = self._refusal(indices)
        if refused is not None:
            return [refused] * len(indices)
        errors: list[Exception] = []
        found: dict[int, FrameView] = {}
        try:
            found.update(_decode(self, sorted(set(indices)), max_side, errors))
        except Exception as e:  # noqa: BLE001 - a corrupt file must become a view
            errors.append(e)
        why = f": {_ffmpeg_reason(errors[0])}" if errors else ": the decoder stopped first"
        return [found.get(i) or ErrorView("video", f"frame {i} could not be decoded{why}", self.raw) for i in indices]

    def _refusal(self, indices: list[int]) -> ErrorView | None:
        bad = [i for i in indices if not 0 <= i < self.frame_count]
        if bad:
            return ErrorView("video", f"frame {bad[0]} is out of range: the video has {self.frame_count} frames", b"")
        if self.width * self.height > MAX_PIXELS:
            return ErrorView("video", f"refused: frames of {self.width}x{self.height} are over the limit of "
                                      f"{MAX_PIXELS:,} pixels", self.raw)
        return None

    def _kept(self, index: int, max_side: int | None) -> FrameView | ErrorView:
        frame = self.decoded.get(index) if self.decoded else None
        if frame is None:
            return ErrorView("video", f"frame {index} is not among the frames kept from the broken file", b"")
        if max_side:
            thumb = frame.picture.copy()
            thumb.thumbnail((max_side, max_side))
            return FrameView(frame.index, frame.pts, frame.time, frame.keyframe, frame.width, frame.height, thumb)
        return frame


def video_view(data: bytes) -> VideoView | ErrorView:
    """Probe `data`; a file that cannot be demuxed becomes an ErrorView with the frames that did decode."""
    if not data:
        return ErrorView("video", "empty: the field holds 0 bytes", b"")
    try:
        return _probe(data)
    except Exception as e:  # noqa: BLE001
        reason = _ffmpeg_reason(e)
        hint = _mp4_hint(data)
        partial = _salvage(data)
        if partial is not None:
            reason += f"; {partial.frame_count} frame(s) decoded before it"
        return ErrorView("video", reason + (f" ({hint})" if hint else ""), data, partial)


def decodable_frames(view: VideoView) -> int:
    """How many frames decode, counted from the start (at most MAX_DECODE): fewer than
    `frame_count` when the index lists frames whose data is damaged or missing; for a broken
    file's view, the frames kept from it."""
    if view.decoded is not None:
        return len(view.decoded)
    count, errors = 0, []
    try:
        with _open(view.raw) as c:
            for _ in _decoded(c, c.streams[view.stream_index], errors):
                count += 1
                if count >= MAX_DECODE:
                    break
    except Exception:  # noqa: BLE001 - a damaged file ends the count
        pass
    return count


def _ffmpeg_reason(e: Exception) -> str:
    text = getattr(e, "strerror", None) if isinstance(e, av.FFmpegError) else None
    return f"{type(e).__name__}: {text}" if text else reason_of(e)


def _open(data: bytes) -> Any:
    return av.open(io.BytesIO(data), mode="r")


def _video_stream(container: Any) -> Any:
    streams = [s for s in container.streams if s.type == "video"]
    if not streams:
        kinds = ", ".join(f"{s.type} {s.codec_context.name}" for s in container.streams) or "none"
        raise ValueError(f"no video stream (streams: {kinds})")
    return streams[0]


def _probe(data: bytes) -> VideoView:
    findings: list[Finding] = []
    with _open(data) as c:
        s = _video_stream(c)
        packets = []
        for n, p in enumerate(c.demux(s)):
            if n >= MAX_PACKETS:
                findings.append(Finding(Severity.WARNING, "video-long", f"stopped counting at {MAX_PACKETS:,} packets"))
                break
            if p.size:
                packets.append((p.pts if p.pts is not None else p.dts, bool(p.is_keyframe)))
        view = _describe(c, s, data, packets, findings)
    return view


# ISO base media major brands (bytes 8..12, after "ftyp") -> the name a file of that kind goes by
_BRANDS = {b"qt  ": "mov", b"M4A ": "m4a", b"M4V ": "m4v", b"mjp2": "mj2", b"3gp": "3gp", b"3g2": "3g2"}


def container_name(demuxer: str, data: bytes) -> str:
    """One name for the container: FFmpeg names a demuxer by every format it reads
    ("mov,mp4,m4a,3gp,3g2,mj2"); the file's major brand says which of them this one is."""
    if "," not in demuxer:
        return demuxer
    names = demuxer.split(",")
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        named = next((name for prefix, name in _BRANDS.items() if brand.startswith(prefix)), "mp4")
        if named in names:
            return named
    return names[0]


def _describe(c: Any, s: Any, data: bytes, packets: list[tuple[int | None, bool]],
              findings: list[Finding]) -> VideoView:
    seekable = all(pts is not None for pts, _ in packets)
    order = sorted(range(len(packets)), key=lambda i: packets[i][0]) if seekable else list(range(len(packets)))
    pts = [packets[i][0] for i in order] if seekable else []
    keyframes = [rank for rank, i in enumerate(order) if packets[i][1]]
    tb = s.time_base or Fraction(1, 1)
    rate = s.average_rate or s.guessed_rate
    fps = float(rate) if rate else None
    duration = float(s.duration * tb) if s.duration else (c.duration / 1e6 if c.duration else None)
    cc = s.codec_context
    view = VideoView(container_name(c.format.name, data), cc.name, cc.width, cc.height, cc.pix_fmt, fps, duration,
                     len(packets), keyframes, len(data), c.bit_rate or None,
                     [f"{x.type} {x.codec_context.name}" for x in c.streams], findings, data, s.index, pts, tb,
                     seekable)
    _check(view, s.frames, packets)
    return view


def _check(view: VideoView, declared_frames: int, packets: list) -> None:
    add = view.findings.append
    hint = _mp4_hint(view.raw)
    if hint:
        add(Finding(Severity.ERROR, "video-truncated", hint))
    if view.frame_count == 0:
        add(Finding(Severity.ERROR, "video-no-frames", "the video stream holds no frames"))
        return
    if declared_frames and declared_frames != view.frame_count:
        add(Finding(Severity.WARNING, "video-frame-count",
                    f"the container declares {declared_frames} frames; {view.frame_count} are present"))
    if view.keyframes[:1] != [0]:
        add(Finding(Severity.WARNING, "video-first-not-key", "the first frame is not a keyframe"))
    if view.pts and view.duration and view.fps:
        end = float((view.pts[-1] - view.pts[0]) * view.time_base) + 1 / view.fps
        if view.duration > end * 1.5 + 0.1:
            add(Finding(Severity.WARNING, "video-short", f"the container declares {view.duration:.3g} s but the frames "
                                                         f"end at {end:.3g} s: the file may be truncated"))


def _frame_view(index: int, frame: Any, time_base: Fraction, max_side: int | None) -> FrameView:
    picture = frame.to_image()
    if max_side:
        picture.thumbnail((max_side, max_side))
    time = float(frame.pts * time_base) if frame.pts is not None else None
    return FrameView(index, frame.pts, time, bool(frame.key_frame), frame.width, frame.height, picture)


def _decoded(c: Any, s: Any, errors: list[Exception]) -> Iterator[Any]:
    """Frames of stream `s` from the current position; a packet that fails is skipped and recorded,
    and the decoder is drained at the end, so frames before a damaged spot still come out."""
    packets = c.demux(s)
    while len(errors) < 32:
        try:
            packet = next(packets)
        except StopIteration:
            return
        except Exception as e:  # noqa: BLE001 - a truncated container ends the stream
            errors.append(e)
            break
        try:
            yield from packet.decode()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    try:
        yield from s.codec_context.decode(None)
    except Exception as e:  # noqa: BLE001
        errors.append(e)


def _decode(view: VideoView, indices: list[int], max_side: int | None,
            errors: list[Exception]) -> Iterator[tuple[int, FrameView]]:
    """Yield (index, frame) for sorted `indices`: seek to the keyframe before each, decode forward."""
    with _open(view.raw) as c:
        s = c.streams[view.stream_index]
        if not view.seekable:
            wanted = set(indices)
            for n, frame in enumerate(_decoded(c, s, errors)):
                if n > min(indices[-1], MAX_DECODE * 10):
                    return
                if n in wanted:
                    yield n, _frame_view(n, frame, view.time_base, max_side)
            return
        for index in indices:
            target = view.pts[index]
            c.seek(target, stream=s, backward=True, any_frame=False)
            for n, frame in enumerate(_decoded(c, s, errors)):
                if n >= MAX_DECODE:
                    break
                if frame.pts is not None and frame.pts >= target:
                    yield index, _frame_view(index, frame, view.time_base, max_side)
                    break


def _salvage(data: bytes) -> VideoView | None:
    """Decode a broken file from the start for as long as it lasts; None when it does not even open."""
    try:
        c = _open(data)
    except Exception:  # noqa: BLE001
        return None
    kept: dict[int, FrameView] = {}
    count, keys, errors = 0, [], []
    with c:
        try:
            s = _video_stream(c)
            for frame in _decoded(c, s, errors):
                if count < SALVAGE_KEEP:
                    kept[count] = _frame_view(count, frame, s.time_base or Fraction(1), SALVAGE_SIDE)
                keys += [count] if frame.key_frame else []
                count += 1
                if count >= MAX_DECODE:
                    break
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        if count == 0:
            return None
        cc = s.codec_context
        view = VideoView(c.format.name, cc.name, cc.width, cc.height, cc.pix_fmt, float(s.average_rate or 0) or None,
                         None, count, keys, len(data), None, [f"{x.type} {x.codec_context.name}" for x in c.streams],
                         [], data, s.index, [], s.time_base or Fraction(1), False, kept)
    more = f"; the first {SALVAGE_KEEP} are kept" if count > SALVAGE_KEEP else ""
    stop = f" before {_ffmpeg_reason(errors[0])}" if errors else ""
    view.findings.append(Finding(Severity.ERROR, "video-partial", f"{count} frame(s) decoded{stop}{more}"))
    return view


def _mp4_hint(data: bytes) -> str | None:
    """What the top-level MP4 boxes say about a file that will not open (truncation, missing index)."""
    if data[4:8] != b"ftyp":
        return None
    pos, names = 0, []
    while pos + 8 <= len(data) and len(names) < 256:
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        name = kind.decode("latin-1")
        if size == 1 and pos + 16 <= len(data):
            size = struct.unpack(">Q", data[pos + 8:pos + 16])[0]
        elif size == 0:
            size = len(data) - pos
        if size < 8:
            return f"MP4 box {name!r} at byte {pos} declares an impossible size {size}"
        if pos + size > len(data):
            missing = "" if "moov" in names else "; its index (the 'moov' box) is missing"
            return (f"MP4 box {name!r} at byte {pos:,} declares {size:,} bytes but only {len(data) - pos:,} remain: "
                    f"the file is truncated{missing}")
        names.append(name)
        pos += size
    if "moov" not in names:
        return f"no 'moov' box (the MP4 index) among the top-level boxes {', '.join(names)}"
    return None

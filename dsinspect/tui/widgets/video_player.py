"""A video field: what demuxing says, the current frame as a picture, and frame stepping keys."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from dsinspect.inspect import ErrorView, FrameView, VideoView
from dsinspect.tui.widgets.pictures import picture, set_picture

__all__ = ["VideoPlayer", "FRAME_SIDE"]

FRAME_SIDE = 192  # frames are decoded as thumbnails of at most this many pixels a side


class VideoPlayer(Vertical, can_focus=True):
    DEFAULT_CSS = """
    VideoPlayer { height: auto; }
    VideoPlayer:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("full_stop,right", "step(1)", "Next frame"),
        Binding("comma,left", "step(-1)", "Prev frame"),
        Binding("home", "seek(0)", "First frame", show=False),
        Binding("end", "seek(-1)", "Last frame", show=False),
    ]

    frame_index = reactive(0, init=False)

    class FrameShown(Message):
        def __init__(self, player: "VideoPlayer", frame: FrameView | ErrorView) -> None:
            super().__init__()
            self.player, self.frame = player, frame

    def __init__(self, view: VideoView, first: FrameView | ErrorView, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view, self.first = view, first

    def compose(self) -> ComposeResult:
        v = self.view
        fps = f"{v.fps:.4g} fps" if v.fps else "? fps"
        yield Static(Text(f"{v.container} · {v.codec} {v.width}x{v.height} · {fps} · {v.frame_count} frames · "
                          f"keyframes {v.keyframes[:12]}", "bold"), classes="video-head")
        yield Static(self._label(self.first), id="frame-label")
        if isinstance(self.first, FrameView):
            yield picture(self.first.image(), id="frame-picture")

    def _label(self, frame: FrameView | ErrorView) -> Text:
        """Frames are 0-based, as in `dsinspect show --frame`."""
        if isinstance(frame, ErrorView):
            return Text(f"frame {self.frame_index}: {frame.reason}", "bold red")
        return Text(f"frame {frame.index} (0..{self.view.frame_count - 1}) · pts {frame.pts} · {frame.time or 0:.3f} s"
                    + (" · keyframe" if frame.keyframe else "") + "   (, . step)", "bold")

    def action_step(self, delta: int) -> None:
        if self.view.frame_count:
            self.frame_index = (self.frame_index + delta) % self.view.frame_count

    def action_seek(self, index: int) -> None:
        self.frame_index = index % max(1, self.view.frame_count)

    def watch_frame_index(self, index: int) -> None:
        self.decode(index)

    @work(thread=True, exclusive=True, group="frame")
    def decode(self, index: int) -> None:
        frame = self.view.frame(index, max_side=FRAME_SIDE)
        self.app.call_from_thread(self.show_frame, index, frame)

    def show_frame(self, index: int, frame: FrameView | ErrorView) -> None:
        if index != self.frame_index:
            return
        self.query_one("#frame-label", Static).update(self._label(frame))
        if isinstance(frame, FrameView):
            pictures = self.query("#frame-picture")
            if pictures:
                set_picture(pictures.first(), frame.image())
            else:
                self.mount(picture(frame.image(), id="frame-picture"))
        self.post_message(self.FrameShown(self, frame))

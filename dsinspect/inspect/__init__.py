"""The inspection core: one stored sample as UI-neutral views (decoded tokens, text, images, video
frames, RL trajectories, JSON, scalars, bytes), each next to its raw bytes and hashes.

Imports no UI framework. Import it as `from dsinspect.inspect import ...` (never
`from dsinspect import inspect`, which reads like the standard library's module).

The names load on first use (PEP 562): a face that needs only `cells` or `views` does not load the
image and video modules, which need Pillow and PyAV (the `media` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsinspect.lazy import lazy_names as _lazy_names

_HOMES = {  # module (relative to this package) -> the names it holds
    ".hexdump": ("HexLine", "HexPage", "hex_page"),
    ".images": ("ImageView", "fit_pixels", "image_view"),
    ".sample": ("TOKENIZER_CHOICES", "FieldInfo", "RowHashCheck", "Sample", "open_address", "open_sample"),
    ".structured": ("BytesView", "JsonView", "ScalarView", "bytes_view", "json_view", "scalar_view", "sniff"),
    ".text": ("CodePointNote", "TextView", "text_view"),
    ".tokens": ("TokenPage", "TokenPiece", "TokensView", "TokenStats", "encode_text", "tokens_view"),
    ".trajectory": ("StepRow", "TrajectoryPage", "TrajectoryView", "trajectory_view"),
    ".video": ("FrameView", "VideoView", "video_view"),
    ".views": ("ErrorView", "Finding", "NullView", "Severity", "View", "jsonable", "safely"),
    ".vocab": ("TIKTOKEN_ENCODINGS", "Vocab", "huggingface_vocab", "tiktoken_encoding", "tiktoken_vocab"),
}

__all__ = [
    "open_address", "open_sample", "Sample", "FieldInfo", "RowHashCheck", "TOKENIZER_CHOICES",
    "View", "ErrorView", "NullView", "Finding", "Severity", "jsonable", "safely",
    "HexLine", "HexPage", "hex_page",
    "TokensView", "TokenPage", "TokenPiece", "TokenStats", "tokens_view", "encode_text",
    "Vocab", "huggingface_vocab", "tiktoken_vocab", "tiktoken_encoding", "TIKTOKEN_ENCODINGS",
    "TextView", "CodePointNote", "text_view",
    "ImageView", "image_view", "fit_pixels",
    "VideoView", "FrameView", "video_view",
    "TrajectoryView", "TrajectoryPage", "StepRow", "trajectory_view",
    "JsonView", "ScalarView", "BytesView", "json_view", "scalar_view", "bytes_view", "sniff",
]


__getattr__, __dir__ = _lazy_names(__name__, _HOMES)


if TYPE_CHECKING:
    from dsinspect.inspect.hexdump import HexLine, HexPage, hex_page
    from dsinspect.inspect.images import ImageView, fit_pixels, image_view
    from dsinspect.inspect.sample import TOKENIZER_CHOICES, FieldInfo, RowHashCheck, Sample, open_address, open_sample
    from dsinspect.inspect.structured import BytesView, JsonView, ScalarView, bytes_view, json_view, scalar_view, sniff
    from dsinspect.inspect.text import CodePointNote, TextView, text_view
    from dsinspect.inspect.tokens import TokenPage, TokenPiece, TokenStats, TokensView, encode_text, tokens_view
    from dsinspect.inspect.trajectory import StepRow, TrajectoryPage, TrajectoryView, trajectory_view
    from dsinspect.inspect.video import FrameView, VideoView, video_view
    from dsinspect.inspect.views import ErrorView, Finding, NullView, Severity, View, jsonable, safely
    from dsinspect.inspect.vocab import TIKTOKEN_ENCODINGS, Vocab, huggingface_vocab, tiktoken_encoding, tiktoken_vocab

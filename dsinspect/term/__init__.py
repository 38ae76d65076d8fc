"""Rich renderings of inspection views for the terminal faces: `dsinspect show` (cli) and the Textual
UI (tui) both draw through these, so neither face imports the other. Depends on rich,
dsinspect.inspect and dsinspect.loaders only: loaders <- inspect <- term <- {cli, tui}.

The renderings of `term.render` load on first use (PEP 562): the previews (what `dsinspect replay`
needs) come without the inspection views and their Pillow and PyAV."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dsinspect.inspect.sizes import human_bytes

# the function, not the submodule of the same name, is `dsinspect.term.preview`
from dsinspect.term.preview import preview, sniff_format

__all__ = ["Options", "clean", "findings_text", "half_blocks", "hex_panel", "human_bytes", "mismatch_banner",
           "preview", "render_sample", "render_view", "sniff_format", "sparkline"]

_RENDER = ("Options", "clean", "findings_text", "half_blocks", "hex_panel", "mismatch_banner", "render_sample",
           "render_view", "sparkline")


def __getattr__(name: str) -> Any:
    if name not in _RENDER:
        raise AttributeError(f"module 'dsinspect.term' has no attribute {name!r}")
    value = getattr(importlib.import_module("dsinspect.term.render"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from dsinspect.term.render import (
        Options,
        clean,
        findings_text,
        half_blocks,
        hex_panel,
        mismatch_banner,
        render_sample,
        render_view,
        sparkline,
    )

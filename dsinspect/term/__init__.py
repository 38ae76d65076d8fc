"""Rich renderings of inspection views for the terminal faces: `dsinspect show` (cli) and the Textual
UI (tui) both draw through these, so neither face imports the other. Depends on rich,
dsinspect.inspect and dsinspect.loaders only: loaders <- inspect <- term <- {cli, tui}.

The renderings of `term.render` load on first use (PEP 562): the previews (what `dsinspect replay`
needs) come without the inspection views and their Pillow and PyAV."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsinspect.inspect.sizes import human_bytes
from dsinspect.lazy import lazy_names as _lazy_names

# the function, not the submodule of the same name, is `dsinspect.term.preview`
from dsinspect.term.preview import preview, sniff_format

__all__ = ["Options", "clean", "findings_text", "half_blocks", "hex_panel", "human_bytes", "mismatch_banner",
           "preview", "render_sample", "render_view", "sniff_format", "sparkline"]

__getattr__, __dir__ = _lazy_names(__name__, {".render": (
    "Options", "clean", "findings_text", "half_blocks", "hex_panel", "mismatch_banner", "render_sample", "render_view",
    "sparkline")})


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

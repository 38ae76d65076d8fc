"""Rich renderings of inspection views for the terminal faces: `dsinspect show` (cli) and the Textual
UI (tui) both draw through these, so neither face imports the other. Depends on rich,
dsinspect.inspect and dsinspect.loaders only: loaders <- inspect <- term <- {cli, tui}."""

from dsinspect.term.render import (
    Options, clean, findings_text, half_blocks, hex_panel, human_bytes, mismatch_banner, render_sample, render_view,
    sparkline,
)
from dsinspect.term.preview import preview, size_text, sniff_format

__all__ = ["Options", "clean", "findings_text", "half_blocks", "hex_panel", "human_bytes", "mismatch_banner",
           "preview", "render_sample", "render_view", "size_text", "sniff_format", "sparkline"]

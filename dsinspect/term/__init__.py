"""Rich renderings of inspection views for the terminal faces: `dsinspect show` (cli) and the Textual
UI (tui) both draw through these, so neither face imports the other. Depends on rich and
dsinspect.inspect only: loaders <- inspect <- term <- {cli, tui}."""

from dsinspect.term.render import (
    Options, clean, findings_text, half_blocks, hex_panel, human_bytes, mismatch_banner, render_sample, render_view,
    sparkline,
)

__all__ = ["Options", "clean", "findings_text", "half_blocks", "hex_panel", "human_bytes", "mismatch_banner",
           "render_sample", "render_view", "sparkline"]

"""The CLI's rich renderings; they live in `dsinspect.term`, shared with the terminal UI."""

from dsinspect.term.render import (  # noqa: F401 - re-exported
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

__all__ = ["render_sample", "render_view", "hex_panel", "half_blocks", "sparkline", "mismatch_banner", "clean",
           "Options", "findings_text"]

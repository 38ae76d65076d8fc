"""Rich renderings of inspection views: token pieces coloured by boundary, half-block pixels for images
and frames, trajectory tables with sparklines, hex panels, and a loud row-hash mismatch banner.

Shared by the two terminal faces (`dsinspect show` and the Textual UI); rich only, no Textual, no click."""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import numpy as np
from rich.color import Color
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.rule import Rule
from rich.style import Style
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from dsinspect.inspect import (
    BytesView,
    ErrorView,
    Finding,
    FrameView,
    HexPage,
    ImageView,
    JsonView,
    NullView,
    RowHashCheck,
    Sample,
    ScalarView,
    Severity,
    TextView,
    TokensView,
    TrajectoryView,
    VideoView,
    View,
)
from dsinspect.inspect.sizes import human_bytes

__all__ = ["render_sample", "render_view", "hex_panel", "half_blocks", "sparkline", "mismatch_banner", "clean",
           "Options", "findings_text", "human_bytes"]

SPARKS = "▁▂▃▄▅▆▇█"
_PIECE_BG = ["#2d4f7c", "#6b3e75", "#2f6b4f", "#7a5a1e", "#1f6470", "#7a2e3a"]
_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_TEXT_LIMIT = 4000
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # rich passes ESC and C1 codes straight to the terminal


def clean(text: str) -> str:
    """`text` with terminal control characters shown as \\xNN, so data can never drive the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Options:
    """What the person asked for: fields, hex dumps, page (0-based), tokenizer, a video frame, pixel width."""

    def __init__(self, fields: Sequence[str] = (), raw: bool = False, page: int = 0, tokenizer: str | None = None,
                 frame: int | None = None, width: int = 100, color: bool = True):
        self.fields, self.raw, self.page, self.tokenizer, self.frame = fields, raw, page, tokenizer, frame
        self.width, self.color = width, color  # without colour, token boundaries are drawn as │


# -- the whole sample --------------------------------------------------------------------------

def render_sample(sample: Sample, opts: Options) -> RenderableType:
    parts: list[RenderableType] = [
        Text.assemble((sample.address, "bold"), f"   row {sample.index:,} of {sample.num_rows:,}   version ",
                      (sample.version_id, "dim")),
    ]
    parts.append(_row_hash_line(sample.row_hash) if sample.row_hash.ok else mismatch_banner(sample.row_hash))
    parts.append(_fields_table(sample, opts))
    for name in opts.fields or [f.name for f in sample.fields]:
        info = sample.field(name)
        title = Text.assemble((clean(info.name), "bold"), f" · {info.role} · {clean(info.type)}")
        parts.append(Rule(title, align="left"))
        parts.append(render_view(sample.view(name, opts.tokenizer), opts))
        if opts.raw:
            parts.append(_raw_panels(sample, name, opts.page))
    if not sample.row_hash.ok:
        parts.append(mismatch_banner(sample.row_hash))
    return Group(*parts)


def _row_hash_line(check: RowHashCheck) -> Text:
    return Text.assemble("row hash ", (check.stored or "-", "bold"),
                         ("  ✓ matches the hash recomputed from the data", "green"))


def mismatch_banner(check: RowHashCheck) -> Panel:
    body = Text.assemble(("The stored row hash does not match the data.\n", "bold"),
                         "stored      ", (check.stored or "(none)", "bold"), "\n",
                         "recomputed  ", (check.recomputed, "bold"), "\n",
                         "This row is not what was written. Run `dsinspect verify` on the version.")
    return Panel(body, title="[blink bold]!! ROW HASH MISMATCH !![/]", border_style="bold red", style="red")


def _fields_table(sample: Sample, opts: Options) -> Table:
    table = Table(title="fields", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("field", "role", "type", "bytes", "field hash (xxh3-128)"):
        table.add_column(col, justify="right" if col == "bytes" else "left", no_wrap=col != "type")
    for f in sample.fields:
        if opts.fields and f.name not in opts.fields:
            continue
        size = "null" if f.null else f"{f.size:,}" + ("" if not f.raw_is_canonical else " (canonical)")
        table.add_row(clean(f.name), f.role, clean(f.type), size, f.hash)
    return table


def _raw_panels(sample: Sample, name: str, page: int) -> RenderableType:
    info = sample.field(name)
    panels = [hex_panel(sample.hex(name, page, canonical=True),
                        f"{name}: canonical bytes ({info.canonical_size:,}) · field hash {info.hash}")]
    if not info.raw_is_canonical and not info.null:
        panels.insert(0, hex_panel(sample.hex(name, page), f"{name}: raw bytes ({info.size:,})"))
    return Group(*panels)


# -- one view ----------------------------------------------------------------------------------

def render_view(view: View, opts: Options) -> RenderableType:
    render: Callable[[Any, Options], RenderableType] = _RENDERERS.get(view.kind, _render_unknown)
    body = render(view, opts)
    findings = getattr(view, "findings", None)
    return Group(body, findings_text(findings)) if findings and view.kind != "error" else body


def findings_text(findings: list[Finding]) -> Text:
    text = Text()
    for f in findings:
        text.append(f"{f.severity.value}: ", _SEVERITY_STYLE[f.severity]).append(f"{clean(f.message)} [{f.code}]\n")
    text.rstrip()
    return text


def _render_unknown(view: View, opts: Options) -> RenderableType:
    return Text(clean(str(view.to_json())))


def _render_null(view: NullView, opts: Options) -> RenderableType:
    return Text("null", "dim italic")


def _render_scalar(view: ScalarView, opts: Options) -> RenderableType:
    return Text(clean(view.display))


def _render_json(view: JsonView, opts: Options) -> RenderableType:
    return Syntax(clean(view.pretty), "json", theme="ansi_dark", word_wrap=True, background_color="default")


def _render_bytes(view: BytesView, opts: Options) -> RenderableType:
    head = Text.assemble(f"{view.size:,} bytes", ("  sha256 ", "dim"), view.sha256,
                         ("  looks like: ", "dim"), view.detected or "unknown")
    return Group(head, hex_panel(view.hex(opts.page), "bytes"))


def _render_text(view: TextView, opts: Options) -> RenderableType:
    head = Text(f"{view.chars:,} characters · {view.utf8_bytes:,} UTF-8 bytes · {view.lines:,} line(s)", "dim")
    limit = None if opts.fields else _TEXT_LIMIT
    body = Text()
    for chunk, note in view.segments(limit):
        if note is None:
            body.append(clean(chunk))
        else:
            style = "bold black on yellow" if note.category != "invalid-utf8" else "bold white on red"
            body.append(f"⟨{note.label}⟩", style)
    if limit is not None and view.chars > limit:
        body.append(f" … ({view.chars - limit:,} more characters; use --field to see all)", "dim")
    return Group(head, body)


def _render_tokens(view: TokensView, opts: Options) -> RenderableType:
    s = view.stats
    page = view.page(opts.page)
    head = Text(f"{s.length:,} tokens · tokenizer {view.tokenizer or '(none)'}"
                + (f" ({view.vocab_size:,} ids)" if view.vocab_size else "")
                + f" · {s.special} special · {s.unknown} unknown · padding {s.pad_right} right, {s.pad_left} left"
                + (f" (pad id {s.pad_id})" if s.pad_id is not None else "")
                + f" · page {page.page + 1}/{page.pages}", "dim")
    pieces = Text()
    for p in page.pieces:
        pieces.append_text(_piece_text(p, view.vocab is not None))
        if not opts.color:
            pieces.append("│", "dim")
    ids = Text("ids " + " ".join(str(p.id) for p in page.pieces), "dim")
    decoded = Text.assemble(("decoded: ", "dim"),
                            clean(view.text[:_TEXT_LIMIT]) + ("…" if len(view.text) > _TEXT_LIMIT else ""))
    parts: list[RenderableType] = [head, pieces, ids, decoded]
    if opts.fields and view.vocab is not None:  # a focused look: every piece with its exact byte span
        parts.append(_pieces_table(page.pieces))
    return Group(*parts)


def _pieces_table(pieces: list[Any]) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for col in ("pos", "id", "bytes", "byte span", "piece", "note"):
        table.add_column(col, justify="right" if col in ("pos", "id") else "left")
    for p in pieces:
        note = "special" if p.special else "unknown id" if p.unknown else "part of a character" if p.partial else ""
        table.add_row(str(p.position), str(p.id), p.data.hex(" "), f"{p.start}-{p.end}",
                      clean(_escaped(p.display)), note)
    return table


def _escaped(text: str) -> str:
    return text.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def _piece_text(p: Any, has_vocab: bool) -> Text:
    if not has_vocab:
        return Text(f"[{p.id}]", "dim")
    if p.unknown:
        return Text(f"⟨{p.id}?⟩", "bold white on red")
    if p.special:
        return Text(clean(p.display), "bold magenta reverse")
    shown = clean(p.display).replace("\n", "↵\n").replace("\t", "→")
    style = Style(bgcolor=Color.parse(_PIECE_BG[p.position % len(_PIECE_BG)]), color="white",
                  italic=p.partial, underline=p.partial)
    return Text(shown, style)


def _render_image(view: ImageView, opts: Options) -> RenderableType:
    orient = f" · EXIF orientation {view.orientation}, shown {view.display_width}x{view.display_height}" \
        if view.orientation not in (None, 1) else ""
    head = Text(f"{view.format} {view.width}x{view.height} {view.mode}{orient} · {human_bytes(view.byte_size)}"
                + (f" · {view.frames} frames" if view.frames > 1 else ""), "bold")
    cols = min(opts.width, 2 * 48, view.display_width)
    return Group(head, half_blocks(view.pixels(cols, 2 * 24)))


def _render_video(view: VideoView, opts: Options) -> RenderableType:
    dur = f"{view.duration:.3g} s" if view.duration is not None else "? s"
    fps = f"{view.fps:.4g} fps" if view.fps else "? fps"
    keys = ", ".join(map(str, view.keyframes[:20])) + ("…" if len(view.keyframes) > 20 else "")
    head = Text(f"{view.container} · {view.codec} {view.width}x{view.height} {view.pix_fmt or ''} · {fps} · {dur} · "
                f"{view.frame_count} frames · keyframes [{keys}] · {human_bytes(view.byte_size)}", "bold")
    count = max(1, min(6, opts.width // 18))
    strip = [_frame_cell(f, 16) for f in view.strip(count, max_side=96)]
    parts: list[RenderableType] = [head, Columns(strip, padding=(0, 1))]
    if opts.frame is not None:
        parts.append(_render_frame(view.frame(opts.frame), opts))
    return Group(*parts)


def _frame_cell(frame: FrameView | ErrorView, cols: int) -> RenderableType:
    if isinstance(frame, ErrorView):
        return Text(f"frame failed:\n{clean(frame.reason)}", "red")
    label = Text(f"#{frame.index} {frame.time or 0:.2f}s" + (" K" if frame.keyframe else ""), "dim")
    return Group(half_blocks(frame.pixels(cols, cols)), label)


def _render_frame(view: FrameView, opts: Options) -> RenderableType:
    head = Text(f"frame {view.index} · pts {view.pts} · {view.time or 0:.3f} s · {view.width}x{view.height}"
                + (" · keyframe" if view.keyframe else ""), "bold")
    return Group(head, half_blocks(view.pixels(min(opts.width, 96), 48)))


def _render_trajectory(view: TrajectoryView, opts: Options) -> RenderableType:
    ret = "?" if view.episode_return is None else f"{view.episode_return:.6g}"
    end = (f"terminated at step {view.terminated_at}" if view.terminated_at is not None
           else f"truncated at step {view.truncated_at}" if view.truncated_at is not None else "no terminal flag")
    head = Text(f"episode: {view.length} steps · return {ret} · {end} · observation shape "
                f"{'x'.join(map(str, view.observation_shape or [])) or '?'}", "bold")
    spark_w = max(10, min(opts.width - 12, 100))
    sparks = Text.assemble(("reward  ", "dim"), sparkline(view.rewards, spark_w), "\n",
                           ("return  ", "dim"), sparkline(view.returns, spark_w))
    page = view.page(opts.page)
    table = Table(title=f"steps (page {page.page + 1}/{page.pages})", title_justify="left", show_edge=False)
    extra = list(page.rows[0].extra) if page.rows else []
    for col in ("step", "observation", "action", "reward", "return", "terminated", "truncated", *extra):
        table.add_column(col, justify="right" if col in ("step", "reward", "return") else "left")
    for r in page.rows:
        table.add_row(str(r.step), clean(str(r.observation)), clean(str(r.action)), _num(r.reward), _num(r.cumulative),
                      _flag(r.terminated), _flag(r.truncated), *(clean(str(r.extra.get(k))) for k in extra))
    return Group(head, sparks, table)


def _num(x: float | None) -> Text:
    if x is None:
        return Text("null", "red")
    return Text(f"{x:.4g}", "bold red" if not math.isfinite(x) else "")


def _flag(x: bool | None) -> Text:
    return Text("-" if x is None else ("yes" if x else "no"), "bold" if x else "dim")


def _render_error(view: ErrorView, opts: Options) -> RenderableType:
    parts: list[RenderableType] = [Text(clean(view.reason), "bold")]
    if view.findings:
        parts.append(findings_text(view.findings))
    if view.partial is not None:
        parts += [Text("what did decode:", "dim"), render_view(view.partial, opts)]
    parts.append(hex_panel(view.hex(opts.page), f"raw bytes ({view.raw_size:,})"))
    return Panel(Group(*parts), title=f"[bold red]could not decode as {view.role}[/]", border_style="red")


_RENDERERS: dict[str, Callable[[Any, Options], RenderableType]] = {
    "null": _render_null, "scalar": _render_scalar, "json": _render_json, "bytes": _render_bytes,
    "text": _render_text, "tokens": _render_tokens, "image": _render_image, "video": _render_video,
    "frame": _render_frame, "trajectory": _render_trajectory, "error": _render_error,
}


# -- building blocks ---------------------------------------------------------------------------

def hex_panel(page: HexPage, title: str) -> Panel:
    text = Text()
    pad = max((len(line.hex) for line in page.lines), default=0) + 1  # a short last line keeps the columns
    for line in page.lines:
        text.append(f"{line.offset:08x}  ", "dim").append(f"{line.hex:<{pad}}").append(f" │{line.ascii}│\n", "cyan")
    if not page.lines:
        text.append("(no bytes)", "dim")
    text.rstrip()
    more = f" · page {page.page + 1}/{page.pages}" if page.pages > 1 else ""
    return Panel(text, title=f"{title}{more}", title_align="left", border_style="dim", expand=False)


def half_blocks(pixels: np.ndarray) -> Text:
    """Pixels as rows of ▀: the upper half-cell takes the foreground colour, the lower the background."""
    if len(pixels) % 2:
        pixels = np.concatenate([pixels, np.zeros_like(pixels[:1])])
    text = Text()
    for top, bottom in zip(pixels[0::2], pixels[1::2]):
        for (r1, g1, b1), (r2, g2, b2) in zip(top.tolist(), bottom.tolist()):
            text.append("▀", Style(color=Color.from_rgb(r1, g1, b1), bgcolor=Color.from_rgb(r2, g2, b2)))
        text.append("\n")
    text.rstrip()
    return text


def sparkline(values: Sequence[float | None], width: int = 60) -> str:
    """A one-line ▁▂▃▄▅▆▇█ chart, each cell the mean of its bucket; gaps for missing or non-finite values."""
    arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if not len(arr):
        return ""
    buckets = np.array_split(arr, min(width, len(arr)))
    means = np.array([b[np.isfinite(b)].mean() if np.isfinite(b).any() else np.nan for b in buckets])
    finite = means[np.isfinite(means)]
    if not len(finite):
        return " " * len(means)
    lo, hi = finite.min(), finite.max()
    scale = (len(SPARKS) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join(" " if not np.isfinite(m) else SPARKS[int(round((m - lo) * scale))] for m in means)

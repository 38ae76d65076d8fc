"""Token pieces coloured by boundary, with a cursor: the id, bytes and byte span under it are shown."""

from __future__ import annotations

from rich.color import Color
from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget

from dsinspect.inspect import TokenPiece, TokensView
from dsinspect.term import clean

__all__ = ["TokenStrip", "piece_text", "quoted_piece"]

PIECE_BG = ["#2d4f7c", "#6b3e75", "#2f6b4f", "#7a5a1e", "#1f6470", "#7a2e3a"]
_CURSOR = Style(color="black", bgcolor="#ffd75f", bold=True)


def piece_text(p: TokenPiece, has_vocab: bool, at_cursor: bool = False) -> Text:
    """One piece: alternating backgrounds mark boundaries; special, unknown and partial pieces stand out."""
    if not has_vocab:
        text = Text(f"[{p.id}]", "dim")
    elif p.unknown:
        text = Text(f"⟨{p.id}?⟩", "bold white on red")
    elif p.special:
        text = Text(clean(p.display), "bold magenta reverse")
    else:
        shown = clean(p.display).replace("\n", "↵\n").replace("\t", "→") or "∅"
        text = Text(shown, Style(bgcolor=Color.parse(PIECE_BG[p.position % len(PIECE_BG)]), color="white",
                                 italic=p.partial, underline=p.partial))
    if at_cursor:
        text.stylize(_CURSOR)
    return text


class TokenStrip(Widget, can_focus=True):
    """A page of pieces; left/right move the cursor across pieces (and pages)."""

    DEFAULT_CSS = """
    TokenStrip { height: auto; padding: 0 1; }
    TokenStrip:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left", "move(-1)", "Prev token"),
        Binding("right", "move(1)", "Next token"),
        Binding("[", "page(-1)", "Prev page", show=False),
        Binding("]", "page(1)", "Next page", show=False),
    ]

    cursor = reactive(0)

    def __init__(self, view: TokensView, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view = view

    @property
    def current(self) -> TokenPiece | None:
        pieces = self.view.pieces(self.cursor, self.cursor + 1)
        return pieces[0] if pieces else None

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, min(len(self.view.ids) - 1, self.cursor + delta))

    def action_page(self, delta: int) -> None:
        self.action_move(delta * self.view.page_size)

    def render(self) -> RenderableType:
        v, s = self.view, self.view.stats
        page = v.page(self.cursor // v.page_size)
        head = Text(f"{s.length:,} tokens · tokenizer {v.tokenizer or '(none)'} · {s.special} special · "
                    f"{s.unknown} unknown · pad {s.pad_right} right, {s.pad_left} left · page {page.page + 1}/"
                    f"{page.pages}", "dim")
        pieces = Text()
        for p in page.pieces:
            pieces.append_text(piece_text(p, v.vocab is not None, p.position == self.cursor))
        return Group(head, pieces, self._cursor_line())

    def _cursor_line(self) -> Text:
        p = self.current
        if p is None:
            return Text("(no tokens)", "dim")
        kind = " special" if p.special else " unknown" if p.unknown else " partial character" if p.partial else ""
        return Text.assemble(("token ", "dim"), (f"#{p.position}", "bold"), ("  id ", "dim"),
                             (str(p.id), "bold yellow"), ("  bytes ", "dim"), p.data.hex(" ") or "-",
                             ("  span ", "dim"), f"{p.start}-{p.end}", ("  piece ", "dim"), quoted_piece(p),
                             (kind, "magenta"))


def quoted_piece(p: TokenPiece) -> str:
    """A piece's text in quotes, escaped once: newline, tab and return as \\n \\t \\r, control
    characters as \\xNN, and the bytes of a partial character as the core gives them (\\xe3\\x83),
    never escaped again."""
    text = p.display.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f"'{clean(text)}'"

"""A packed batch as rows of sequences (docs/PRETRAINING.md, "What a batch carries"): each sequence's
documents with the token range taken from each and where it sits, its tokens decoded with the field's
stored tokenizer (the ids without one), documents in alternating styles and separated by ` │ `, the
padding and loss-masked tokens dim, and its digest. Sample data is data: it goes into `Text`, never
into markup, and control characters are shown escaped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from dsinspect.inspect.packed import decode_ids, short_address
from dsinspect.term import clean

__all__ = ["PackedBatchTable", "SequenceView", "sequence_views", "sequence_text", "documents_text"]

DOCUMENT_STYLES = ("", "cyan")  # alternating, one per document of a sequence
MASKED = "dim"                   # padding and tokens masked from the loss
DAMAGED = "bold red"
SEPARATOR = " │ "
PREVIEW = 160                    # characters of decoded text a table row shows (as `dsinspect replay`)
_FIXED = (("slot", 4), ("sequence", 11), ("documents [tokens) → at", 38), ("digest", 16))


@dataclass(frozen=True)
class SequenceView:
    """One sequence of a replayed packed batch, decoded (made in the replay worker, shown on the screen)."""

    rank: int
    slot: int
    epoch: int
    sequence: int
    padding: bool             # a repeat filling the epoch's last batch: every token masked from the loss
    segments: tuple[Any, ...]  # packed_batch.Segment: address, start, stop, offset
    texts: tuple[str, ...]    # each segment's tokens decoded (ids without a tokenizer)
    pad: int                  # best_fit, pad: the padding tokens after the documents
    width: int                # W: tokens in the sequence
    digest: str
    damaged: frozenset[str]   # addresses of its documents whose bytes no longer hash as stored

    @property
    def name(self) -> str:
        return f"e{self.epoch}:{self.sequence:,}" + (" pad" if self.padding else "")


def sequence_views(replay: Any, vocab: Any) -> list[SequenceView]:
    """Every sequence of a PackedReplay, each segment decoded with `vocab` (None: the ids)."""
    bad: dict[tuple[int, int], set[str]] = {}
    for rank, slot, address in replay.damaged:
        bad.setdefault((rank, slot), set()).add(address)
    views = []
    for batch in replay.batches:
        width = int(batch.tokens.shape[1])
        for i, s in enumerate(batch.sequences):
            segments = tuple(batch.segments(i))
            ids = batch.tokens[i].tolist()
            texts = tuple(decode_ids(vocab, ids[g.offset:g.offset + g.stop - g.start]) for g in segments)
            views.append(SequenceView(batch.rank, i, s.source_epoch, s.sequence, bool(s.padding), segments, texts,
                                      width - int(batch.held[i]), width, bytes(batch.digests[i]).hex(),
                                      frozenset(bad.get((batch.rank, i), ()))))
    return views


def documents_text(view: SequenceView) -> Text:
    """A line per document: its address, the token range [start, stop) taken from it and its offset in
    the sequence, in its document's style; a document that no longer verifies in red."""
    out = Text()
    for n, g in enumerate(view.segments):
        if n:
            out.append("\n")
        damaged = g.address in view.damaged
        style = DAMAGED if damaged else DOCUMENT_STYLES[n % 2]
        out.append(f"{short_address(g.address)} [{g.start}, {g.stop}) → {g.offset}", style)
        if damaged:
            out.append(" ✗ damaged", DAMAGED)
    return out


def sequence_text(view: SequenceView, limit: int | None = None, one_line: bool = False) -> Text:
    """The decoded sequence: documents in alternating styles with ` │ ` between them, the padding after
    them as ‹pad ×n›, all dim when the sequence is a padding repeat (masked from the loss). `limit` cuts
    the documents' text to that many characters; `one_line` shows line breaks as ↵."""
    out, left = Text(), limit
    for n, text in enumerate(view.texts):
        if n:
            out.append(SEPARATOR, MASKED)
        text = clean(text.replace("\n", "↵") if one_line else text)
        if left is not None:
            text, left = (text, left - len(text)) if len(text) <= left else (text[:max(left - 1, 0)] + "…", 0)
        style = DAMAGED if view.segments[n].address in view.damaged else DOCUMENT_STYLES[n % 2]
        out.append(text, MASKED if view.padding else style)
        if left == 0:
            break
    if view.pad:
        out.append(f" ‹pad ×{view.pad}›", MASKED)
    return out


class PackedBatchTable(DataTable):
    """The sequences of a packed batch, a row each (keyed by their place in `views`); Enter selects one."""

    DEFAULT_CSS = """
    PackedBatchTable { height: 1fr; }
    PackedBatchTable.hidden { display: none; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.views: list[SequenceView] = []

    def show(self, views: list[SequenceView]) -> None:
        self.views = views
        many = len({v.rank for v in views}) > 1
        self.clear(columns=True)
        fixed = (("rank", 4),) * many + _FIXED
        text_width = max(24, (self.size.width or self.app.size.width) - sum(w + 2 for _, w in fixed) - 4)
        for label, width in (*fixed[:-1], ("text", text_width), fixed[-1]):
            self.add_column(label, width=width, key=label)
        for i, v in enumerate(views):
            cells = [str(v.slot), Text(v.name, MASKED if v.padding else ""), documents_text(v),
                     sequence_text(v, PREVIEW, one_line=True), v.digest[:16]]
            self.add_row(*([str(v.rank)] if many else []), *cells, key=str(i), height=None)

    def mark_diverging(self, rank: int, slots: set[int]) -> None:
        """Flag the sequences a log check names as diverging from the run's record."""
        for i, v in enumerate(self.views):
            if v.rank == rank and v.slot in slots:
                self.update_cell(str(i), "digest", Text("✗ DIVERGES", DAMAGED))

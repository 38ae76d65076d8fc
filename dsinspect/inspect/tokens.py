"""Token sequences: every id with its exact bytes and byte offsets, special and unknown ids marked,
the decoded text, and length and padding statistics. Pieces are built a page at a time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np

from dsinspect.inspect.views import Finding, Severity, View, no_json
from dsinspect.inspect.vocab import Vocab

__all__ = ["TokenPiece", "TokenStats", "TokenPage", "TokensView", "tokens_view", "encode_text", "TOKEN_PAGE"]

TOKEN_PAGE = 256
_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class TokenPiece:
    """One token. `start`/`end` are byte offsets into the decoded bytes; a piece holding part of a
    multibyte character (`partial`) shows the bytes it lacks a character for as \\xNN in `display`."""

    position: int
    id: int | None                 # None for a null entry
    data: bytes
    start: int
    end: int
    display: str
    special: bool = False
    unknown: bool = False
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "id": self.id, "bytes": self.data.hex(), "start": self.start,
                "end": self.end, "display": self.display, "special": self.special, "unknown": self.unknown,
                "partial": self.partial}


@dataclass(frozen=True)
class TokenStats:
    length: int
    unique: int
    special: int
    unknown: int
    pad_id: int | None
    pad_total: int      # pad ids anywhere
    pad_left: int       # leading run of pad ids
    pad_right: int      # trailing run of pad ids
    decoded_bytes: int
    decoded_chars: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TokenPage(View):
    kind: ClassVar[str] = "token-page"
    page: int
    pages: int
    page_size: int
    start: int          # position of the first piece
    pieces: list[TokenPiece]


@dataclass
class TokensView(View):
    """A token sequence; `page(n)` builds the pieces of one page (positions n*page_size onwards)."""

    kind: ClassVar[str] = "tokens"
    tokenizer: str | None
    vocab_size: int | None
    ids: list[int | None]           # as stored (None for null entries)
    text: str                       # the decoded bytes as text (invalid UTF-8 shown as U+FFFD)
    stats: TokenStats
    findings: list[Finding] = field(default_factory=list)
    page_size: int = TOKEN_PAGE
    vocab: Vocab | None = no_json(default=None)
    ends: np.ndarray = no_json(default=None)      # byte end offset of each position
    data: bytes = no_json(default=b"")            # the decoded bytes

    @property
    def pages(self) -> int:
        return max(1, -(-len(self.ids) // self.page_size))

    def pieces(self, start: int, stop: int) -> list[TokenPiece]:
        start, stop = max(0, start), min(len(self.ids), stop)
        return [self._piece(p) for p in range(start, stop)]

    def page(self, n: int = 0) -> TokenPage:
        """Page `n` (clamped into range; negative counts from the end)."""
        n = min(max(n + self.pages if n < 0 else n, 0), self.pages - 1)
        first = n * self.page_size
        return TokenPage(n, self.pages, self.page_size, first, self.pieces(first, first + self.page_size))

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "pages": self.pages, "first_page": self.page(0).to_json()}

    def _piece(self, p: int) -> TokenPiece:
        tid = self.ids[p]
        end = int(self.ends[p]) if self.ends is not None else 0
        data = self.vocab.piece(tid) if self.vocab is not None and tid is not None else None
        if data is None:
            return TokenPiece(p, tid, b"", end, end, "", unknown=self.vocab is not None)
        special = tid in self.vocab.special
        try:
            display, partial = data.decode("utf-8"), False
        except UnicodeDecodeError:
            display, partial = data.decode("utf-8", "backslashreplace"), True
        return TokenPiece(p, tid, data, end - len(data), end, display, special, False, partial)


def encode_text(text: str, vocab: Vocab, page_size: int = TOKEN_PAGE) -> TokensView:
    """Tokenize `text` with `vocab` (e.g. cl100k_base) and view the result."""
    return tokens_view(vocab.encode(text), vocab, page_size=page_size)


def tokens_view(ids: Sequence[int | None], vocab: Vocab | None, *, page_size: int = TOKEN_PAGE,
                note: Finding | None = None) -> TokensView:
    """View `ids` decoded with `vocab` (None: ids only, with `note` saying why)."""
    findings = [note] if note else []
    ids = list(ids)
    arr, nulls = _clean_ids(ids)
    if nulls:
        findings.append(Finding(Severity.ERROR, "token-null", f"{len(nulls)} null id(s), first at position {nulls[0]}",
                                {"position": nulls[0]}))
    if vocab is None:
        stats = _stats(arr, None, b"", "")
        return TokensView(None, None, ids, "", stats, findings, page_size, None, np.zeros(len(arr), np.int64))
    lengths = vocab.lengths()
    known = (arr >= 0) & (arr < vocab.size)
    known[known] = lengths[arr[known]] >= 0
    ends = np.cumsum(np.where(known, lengths[np.where(known, arr, 0)], 0))
    data = b"".join(vocab.pieces[i] for i in arr[known].tolist())
    text = data.decode("utf-8", "replace")
    findings += _unknown_findings(ids, known, vocab, nulls)
    findings += _utf8_findings(data, ends)
    stats = _stats(arr, vocab, data, text, int((~known).sum()) - len(nulls))
    if stats.pad_total > stats.pad_left + stats.pad_right:
        findings.append(Finding(Severity.INFO, "token-pad-inside",
                                f"{stats.pad_total - stats.pad_left - stats.pad_right} pad id(s) inside the sequence"))
    return TokensView(vocab.name, vocab.size, ids, text, stats, findings, page_size, vocab, ends, data)


def _clean_ids(ids: list[int | None]) -> tuple[np.ndarray, list[int]]:
    """Ids as an int64 array (null and out-of-range values become -1) and the positions of nulls."""
    nulls = [p for p, i in enumerate(ids) if i is None]
    clean = [-1 if i is None or not _INT64[0] <= i <= _INT64[1] else int(i) for i in ids]
    return np.array(clean, dtype=np.int64), nulls


def _unknown_findings(ids: list[int | None], known: np.ndarray, vocab: Vocab, nulls: list[int]) -> list[Finding]:
    bad = np.flatnonzero(~known)
    bad = bad[~np.isin(bad, nulls)] if nulls else bad
    if not len(bad):
        return []
    first = int(bad[0])
    return [Finding(Severity.ERROR, "token-unknown-id",
                    f"{len(bad)} id(s) outside the vocabulary of {vocab.name} ({vocab.size} ids), "
                    f"first: id {ids[first]} at position {first}", {"position": first, "id": ids[first]})]


def _utf8_findings(data: bytes, ends: np.ndarray) -> list[Finding]:
    try:
        data.decode("utf-8")
        return []
    except UnicodeDecodeError as e:
        pos = int(np.searchsorted(ends, e.start, side="right"))
        return [Finding(Severity.WARNING, "token-invalid-utf8",
                        f"the decoded bytes are not valid UTF-8 at byte {e.start} (token position {pos}): {e.reason}",
                        {"byte": e.start, "position": pos})]


def _run(mask: np.ndarray) -> int:
    """Length of the leading run of True in `mask`."""
    off = np.flatnonzero(~mask)
    return int(off[0]) if len(off) else len(mask)


def _stats(arr: np.ndarray, vocab: Vocab | None, data: bytes, text: str, unknown: int = 0) -> TokenStats:
    special = int(np.isin(arr, list(vocab.special)).sum()) if vocab and vocab.special else 0
    pad_id = vocab.pad_id if vocab else None
    pad = arr == pad_id if pad_id is not None else np.zeros(len(arr), bool)
    return TokenStats(len(arr), int(len(np.unique(arr))), special, unknown, pad_id, int(pad.sum()),
                      _run(pad), _run(pad[::-1]), len(data), len(text))

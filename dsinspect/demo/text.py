"""Deterministic tokenized-text rows built from the bundled corpus and shipped tokenizer.

Each row depends only on ``(seed, doc_id)``, so ``text_rows(0, 10, s)[5] == text_rows(5, 1, s)[0]``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from tokenizers import Tokenizer

from dsinspect.demo.tokenizer import documents, load_tokenizer

_SALT = 0x7E47  # separates this stream from the other generators' streams
_PAD_MULTIPLE = 16
_MASK = (1 << 64) - 1

# (first, last) code points of scripts that identify a language on their own.
_SCRIPTS = [
    ("ja", 0x3040, 0x30FF), ("ko", 0xAC00, 0xD7AF), ("ru", 0x0400, 0x04FF),
    ("el", 0x0370, 0x03FF), ("ar", 0x0600, 0x06FF), ("zh", 0x4E00, 0x9FFF),
]
_LATIN_HINTS = [
    ("pl", "ąęłńśźżć"), ("de", "äöüß„"), ("fr", "éèêàçœùâî«"),
]


def _rng(seed: int, row_id: int, salt: int = _SALT) -> np.random.Generator:
    """Per-row generator so a row depends only on (seed, id), not on the batch it is in."""
    return np.random.default_rng([seed & _MASK, row_id & _MASK, salt])


@lru_cache(maxsize=1)
def _tok() -> Tokenizer:
    """The shipped tokenizer, loaded once per process."""
    return load_tokenizer()


@lru_cache(maxsize=1)
def _docs() -> tuple[str, ...]:
    """Corpus documents, cached."""
    return tuple(documents())


def detect_lang(text: str) -> str:
    """Guess a language tag from the characters used ('mixed' when several scripts dominate)."""
    counts: dict[str, int] = {}
    for ch in text:
        cp = ord(ch)
        for tag, lo, hi in _SCRIPTS:
            if lo <= cp <= hi:
                counts[tag] = counts.get(tag, 0) + 1
                break
    if counts.get("ja") and counts.get("zh"):  # kanji counted as zh inside Japanese text
        counts["ja"] += counts.pop("zh")
    letters = sum(ch.isalpha() for ch in text) or 1
    major = [tag for tag, n in counts.items() if n >= 0.2 * letters]
    if len(major) > 1:
        return "mixed"
    if major:
        return major[0]
    lower = text.lower()
    hits = [tag for tag, chars in _LATIN_HINTS if sum(lower.count(c) for c in chars) >= 3]
    return hits[0] if len(hits) == 1 else ("mixed" if hits else "en")


def _combine(langs: list[str]) -> str:
    """One tag for several pieces: the shared tag, or 'mixed'."""
    return langs[0] if len(set(langs)) == 1 else "mixed"


def _pick_text(rng: np.random.Generator) -> tuple[str, str]:
    """Choose a short snippet, a whole document, or several documents joined; return (text, lang)."""
    docs = _docs()
    kind = rng.choice(["short", "doc", "multi"], p=[0.25, 0.5, 0.25])
    if kind == "multi":
        picks = [docs[int(i)] for i in rng.choice(len(docs), size=int(rng.integers(2, 6)), replace=False)]
        return "\n\n".join(picks), _combine([detect_lang(d) for d in picks])
    doc = docs[int(rng.integers(len(docs)))]
    if kind == "doc":
        return doc, detect_lang(doc)
    words = doc.split()
    if len(words) >= 3:
        return " ".join(words[: int(rng.integers(2, 5))]), detect_lang(doc)
    return doc[: int(rng.integers(3, 8))], detect_lang(doc)  # CJK: no spaces, take a few characters


def _encode(text: str, eos: bool, pad: bool) -> list[int]:
    """Tokenize text, optionally append <|endoftext|> and pad with <|pad|> to a multiple of 16."""
    tok = _tok()
    ids = tok.encode(text, add_special_tokens=False).ids
    if eos:
        ids.append(tok.token_to_id("<|endoftext|>"))
    if pad:
        ids.extend([tok.token_to_id("<|pad|>")] * (-len(ids) % _PAD_MULTIPLE))
    return ids


def _make_row(doc_id: int, lang: str, text: str, eos: bool, pad: bool) -> dict:
    """Assemble one row dict."""
    return {"doc_id": doc_id, "lang": lang, "text": text, "tokens": _encode(text, eos, pad)}


def text_rows(start_id: int, count: int, seed: int) -> list[dict]:
    """Rows ``doc_id = start_id .. start_id+count-1`` with text and its token ids."""
    rows = []
    for doc_id in range(start_id, start_id + count):
        rng = _rng(seed, doc_id)
        text, lang = _pick_text(rng)
        eos = bool(rng.random() < 0.5)
        pad = eos and bool(rng.random() < 0.3)
        rows.append(_make_row(doc_id, lang, text, eos, pad))
    return rows


def _edit(text: str, lang: str, rng: np.random.Generator) -> tuple[str, str]:
    """Apply one seeded edit (append a snippet, truncate, upper-case a word, insert an emoji)."""
    op = int(rng.integers(4))
    words = text.split(" ")
    if op == 1 and len(text) > 12:
        return text[: len(text) * 2 // 3], lang
    if op == 2 and len(words) > 1 and any(c.islower() for c in text):
        i = int(rng.integers(len(words)))
        words[i] = words[i].upper()
        return " ".join(words), lang
    if op == 3:
        words.insert(int(rng.integers(len(words))), ["✏️", "👩‍💻", "🇵🇱", "🔁"][int(rng.integers(4))])
        return " ".join(words), lang
    doc = _docs()[int(rng.integers(len(_docs())))]
    return text + " " + " ".join(doc.split()[:6]), _combine([lang, detect_lang(doc)])


def mutate_text_row(row: dict, seed: int) -> dict:
    """Return an edited, re-tokenized copy of ``row`` with the same doc_id (same eos/pad style)."""
    rng = _rng(seed, row["doc_id"], salt=_SALT + 1)
    eot, pad_id = _tok().token_to_id("<|endoftext|>"), _tok().token_to_id("<|pad|>")
    toks = row["tokens"]
    pad = bool(toks) and toks[-1] == pad_id
    eos = pad or (bool(toks) and toks[-1] == eot)
    text, lang = _edit(row["text"], row["lang"], rng)
    if text == row["text"]:
        text = row["text"] + " (edited)"
    return _make_row(row["doc_id"], lang, text, eos, pad)

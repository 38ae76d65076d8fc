"""What every face shows of a packed-sequence batch (docs/PRETRAINING.md) beside the engine's own
data: the vocabulary of the packed field's stored tokenizer, a segment's ids as text through it (the
ids themselves without one), and a document's address with its version id cut to 12 characters (what
`dsinspect show` takes). One home for the CLI's, the TUI's and the web app's packed replay."""

from __future__ import annotations

from typing import Any, Sequence

from dsinspect.inspect.vocab import Vocab, tokenizer_vocab

__all__ = ["packed_vocab", "decode_ids", "short_address"]


def packed_vocab(catalog: Any, spec: Any) -> Vocab | None:
    """The vocabulary of the tokenizer stored with the packed field of `spec`'s first source, or None
    (none stored, or it cannot be loaded here: the ids are shown)."""
    source = spec.sources[0]
    try:
        version = catalog.version(source.name, source.version)
        options = version.manifest.field(spec.sequences.field).options.get("tokenizer")
        return tokenizer_vocab(catalog, source.name, dict(options)) if options else None
    except Exception:  # noqa: BLE001 - no tokenizer to hand: the ids are shown
        return None


def decode_ids(vocab: Vocab | None, ids: Sequence[int]) -> str:
    """Token ids as text through the vocabulary's exact bytes (U+FFFD for an id without a piece), or
    the ids joined by spaces without a vocabulary."""
    if vocab is None:
        return " ".join(map(str, ids))
    return b"".join(vocab.piece(t) or b"\xef\xbf\xbd" for t in ids).decode("utf-8", "replace")


def short_address(address: str) -> str:
    """dataset@version:index with the version id cut to 12 characters."""
    name, _, rest = address.partition("@")
    version, _, index = rest.partition(":")
    return f"{name}@{version[:12]}:{index}"

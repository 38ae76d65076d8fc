"""Sequences: documents of a token field packed into fixed-length training sequences, as pure
arithmetic over per-shard document and token counts (no index built, no pass over the documents).

Owns the token layout of a source and each packing's map between sequences and
the document segments they hold, both ways. Pure: the per-document lengths of a shard come from a
function the caller gives (the I/O stays at the edge). May import `order`, `format`, `dsinspect.errors`.

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""

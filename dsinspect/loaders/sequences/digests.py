"""What identifies a packed sequence in a run record: the stored row hash of each of its documents
and the token range taken from each. Under one run spec (its `eos` fixed) equal digests mean equal
tokens, whichever shard or version the documents sit in; an edited document changes the digest of
every sequence that took tokens from it, and of no other."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xxhash

from dsinspect.loaders.sequences.segments import Segments

__all__ = ["sequence_digests"]


def sequence_digests(segments: Sequence[Segments], doc_hashes: Sequence[np.ndarray]) -> np.ndarray:
    """(n, 16) uint8: per sequence, xxh3-128 of its segments' (row hash, start, stop) in order, the
    row hashes (k, 16) uint8 of its k documents and the range as two little-endian int64."""
    out = np.empty((len(segments), 16), np.uint8)
    for i, (seg, hashes) in enumerate(zip(segments, doc_hashes)):
        ranges = np.stack([seg.starts, seg.stops], axis=1).astype("<i8").view(np.uint8)
        record = np.concatenate([np.asarray(hashes, np.uint8).reshape(len(seg), 16), ranges], axis=1)
        out[i] = np.frombuffer(xxhash.xxh3_128_digest(record.tobytes()), np.uint8)
    return out

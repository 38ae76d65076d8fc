"""What identifies a packed sequence in a run record: the stored row hash of each of its documents
and the token range taken from each. Under one run spec (its `eos` fixed) equal digests mean equal
tokens, whichever shard or version the documents sit in; an edited document changes the digest of
every sequence that took tokens from it, and of no other."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xxhash

from dsinspect.loaders.sequences.segments import Segments

__all__ = ["flat_digests", "sequence_digests"]


def sequence_digests(segments: Sequence[Segments], doc_hashes: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
    """(n, 16) uint8: per sequence, xxh3-128 of its segments' (row hash, start, stop) in order, the
    row hashes (k, 16) uint8 of its k documents and the range as two little-endian int64. `doc_hashes`
    is one array per sequence, or one (total segments, 16) array of all of them in order."""
    counts = np.array([len(seg) for seg in segments], np.int64)
    hashes = np.asarray(doc_hashes, np.uint8) if isinstance(doc_hashes, np.ndarray) else \
        (np.concatenate(doc_hashes) if len(doc_hashes) else np.zeros((0, 16), np.uint8))
    starts = np.concatenate([seg.starts for seg in segments]) if segments else np.zeros(0, np.int64)
    stops = np.concatenate([seg.stops for seg in segments]) if segments else np.zeros(0, np.int64)
    return flat_digests(np.concatenate([[0], np.cumsum(counts)]), hashes, starts, stops)


def flat_digests(bounds: np.ndarray, hashes: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """`sequence_digests` of sequences given flat: segments bounds[i]:bounds[i + 1] are sequence i's,
    each with its document's row hash (hashes, (segments, 16) uint8) and its range."""
    record = np.empty((len(starts), 32), np.uint8)  # 32 bytes a segment: its whole record in one buffer
    record[:, :16] = np.asarray(hashes, np.uint8).reshape(len(starts), 16)
    record[:, 16:] = np.stack([starts, stops], axis=1).astype("<i8").view(np.uint8).reshape(len(starts), 16)
    raw = record.tobytes()
    cuts = (np.asarray(bounds, np.int64) * 32).tolist()
    out = np.frombuffer(b"".join(xxhash.xxh3_128_digest(raw[a:b]) for a, b in zip(cuts, cuts[1:])), np.uint8)
    return out.reshape(len(cuts) - 1, 16)

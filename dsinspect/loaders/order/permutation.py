"""Keyed permutations and per-sample seeds as pure arithmetic: index i maps to a position with O(1)
memory, so any batch of any step is computable without materialising an epoch's order.

The exact functions are a contract (tests pin golden values): a change reorders every run.
"""

from __future__ import annotations

import numpy as np
import xxhash

__all__ = ["key_of", "mix64", "Permutation", "sample_seeds"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ROUNDS = 4
_M1_INT, _M2_INT, _U64 = int(_M1), int(_M2), (1 << 64) - 1
# at most this many indices still walking: Python ints beat numpy's per-call cost (8 beat 32 by up to
# 25 % at 128 and 1,024 indices, and tied at 8)
_SCALAR_WALKS = 8


def key_of(*parts: object) -> int:
    """A 64-bit key from labelled parts (ints and strings), stable across platforms and versions."""
    return xxhash.xxh3_64_intdigest("\x1f".join(map(str, parts)).encode("utf-8"))


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection on uint64 that scatters neighbouring inputs."""
    x = np.atleast_1d(np.asarray(x, dtype=np.uint64))  # arrays wrap silently; numpy scalars would warn
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


class Permutation:
    """A keyed bijection on [0, n): a 4-round Feistel network over the smallest even bit width that
    covers n, with cycle walking back into range (on average fewer than 4 walks per index)."""

    def __init__(self, n: int, key: int):
        self.n = int(n)
        bits = max(2, int(self.n - 1).bit_length())
        bits += bits % 2
        self._half = np.uint64(bits // 2)
        self._mask = np.uint64((1 << (bits // 2)) - 1)
        self._keys = [np.uint64(key_of(key, r)) for r in range(_ROUNDS)]

    def __call__(self, index: np.ndarray | int) -> np.ndarray:
        if np.ndim(index) == 0:
            return self(np.array([index]))[0]
        i = np.asarray(index, dtype=np.int64)
        if self.n <= 1:
            return np.zeros_like(i)
        x = self._rounds(i.astype(np.uint64))
        n = np.uint64(self.n)
        walking = np.flatnonzero(x >= n)  # cycle walking, on the indices still out of range only
        while len(walking) > _SCALAR_WALKS:
            y = self._rounds(x[walking])
            x[walking] = y
            walking = walking[y >= n]
        for w in walking.tolist():  # the last few walk in Python ints: no per-call numpy overhead
            v = int(x[w])
            while v >= self.n:
                v = self._rounds_int(v)
            x[w] = v
        return x.astype(np.int64)

    def inverse(self, value: np.ndarray | int) -> np.ndarray:
        """The index that maps to each value: the rounds run backwards, walking back through the
        out-of-range values the forward walk passed (each of those is >= n, the original is not)."""
        if np.ndim(value) == 0:
            return self.inverse(np.array([value]))[0]
        v = np.asarray(value, dtype=np.int64)
        if self.n <= 1:
            return np.zeros_like(v)
        x = self._unrounds(v.astype(np.uint64))
        n = np.uint64(self.n)
        walking = np.flatnonzero(x >= n)
        while len(walking):
            y = self._unrounds(x[walking])
            x[walking] = y
            walking = walking[y >= n]
        return x.astype(np.int64)

    def _unrounds(self, x: np.ndarray) -> np.ndarray:
        """The inverse of `_rounds`: each round (l, r) -> (r, l ^ F(r)) undone as (l', r') -> (r' ^ F(l'), l')."""
        left, right = x >> self._half, x & self._mask
        for k in reversed(self._keys):
            mixed = _mix_inplace(left ^ k)
            mixed &= self._mask
            mixed ^= right
            left, right = mixed, left
        left <<= self._half
        left |= right
        return left

    def _rounds(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for k in self._keys:
            mixed = _mix_inplace(right ^ k)
            mixed &= self._mask
            mixed ^= left
            left, right = right, mixed
        left <<= self._half
        left |= right
        return left

    def _rounds_int(self, v: int) -> int:
        """`_rounds` of one value with Python ints (bit for bit the same)."""
        half, mask = int(self._half), int(self._mask)
        left, right = v >> half, v & mask
        for k in self._keys:
            t = right ^ int(k)
            t ^= t >> 30
            t = (t * _M1_INT) & _U64
            t ^= t >> 27
            t = (t * _M2_INT) & _U64
            t ^= t >> 31
            left, right = right, left ^ (t & mask)
        return (left << half) | right


def _mix_inplace(x: np.ndarray) -> np.ndarray:
    """`mix64` of a fresh uint64 array, overwriting it (fewer temporaries)."""
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def sample_seeds(seed: int, epoch: np.ndarray | int, source: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The random seed of each sample, from (seed, epoch, source, index): augmentations replay too.
    `epoch` is the sample's own source epoch (for a mixture, each source cycles its own epochs)."""
    index = np.atleast_1d(np.asarray(index, dtype=np.uint64))
    epoch = np.broadcast_to(np.asarray(epoch, dtype=np.uint64), index.shape)
    source = np.broadcast_to(np.asarray(source, dtype=np.uint64), index.shape)
    k_index, k_epoch = np.uint64(key_of("sample-seed", seed)), np.uint64(key_of("sample-epoch", seed))
    return mix64(mix64(index ^ k_index) + mix64(epoch ^ k_epoch) + source)

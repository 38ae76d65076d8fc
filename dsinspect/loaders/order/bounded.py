"""What a shuffle costs under a cache bound, as arithmetic over the run spec and the shards' sizes:
the shards each shuffle needs resident at once, the fetch amplification expected when they do not
fit (streamed row groups fetched again by every batch that reads one of their rows), and the
shuffles or the bound that would fit. The reader states it once at start (read/reader.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dsinspect.loaders.order.spec import RunSpec, Shuffle

__all__ = ["BoundAdvice", "resident_shards", "bound_advice", "READ_AHEAD"]

# a sliding shuffle's reader holds one more shard across a block boundary, and fills one ahead
READ_AHEAD = 2


def resident_shards(spec: RunSpec, shards: int) -> int:
    """How many of a version's `shards` the shuffle needs in the cache at once (read-ahead included)."""
    if spec.shuffle is Shuffle.GLOBAL:
        return shards
    if spec.shuffle is Shuffle.WINDOW:
        return min(spec.window_shards, shards)
    if spec.shuffle is Shuffle.SLIDING:
        return min(spec.window_shards + READ_AHEAD, shards)
    return 1


@dataclass(frozen=True)
class BoundAdvice:
    """A working set the bound cannot hold, what streaming it costs, and what would fit."""

    what: str              # the working set in words
    bound: int             # bytes
    working_set: int       # bytes (as cached) the shuffle needs at once
    version_bytes: int     # bytes of the whole version as stored (what a fetch moves)
    streamed: int          # shards streamed
    shards: int
    group_rows: float      # rows per row group of the streamed shards
    amplification: float   # expected bytes fetched per epoch / version bytes
    sliding_shards: int    # the largest sliding shuffle that fits (0: none does)
    window_shards: int     # the largest window shuffle that fits with the next window read ahead (0: none)
    ratio: float = 1.0     # bytes as cached / as stored (1.0 at start: not known before the first fill)

    def message(self) -> str:
        options = []
        if self.sliding_shards >= 2:
            options.append(f"shuffle='sliding' with window_shards={self.sliding_shards} (samples mixed across "
                           f"{self.sliding_shards} resident shards; each shard fetched once an epoch)")
        if self.window_shards >= 1:
            options.append(f"shuffle='window' with window_shards={self.window_shards}")
        options.append(f"a bound of at least {self.working_set:,} bytes")
        judged = ("bytes as stored; judged again once a shard is filled, by what it takes decoded" if self.ratio == 1
                  else f"bytes as cached, {self.ratio:.1f}x their stored size")
        return (f"cache bound of {self.bound:,} bytes is smaller than {self.what} "
                f"({self.working_set:,} {judged}): {self.streamed} of {self.shards} shards will be streamed, "
                f"their row groups (~{self.group_rows:,.0f} rows each) fetched again by each batch that reads "
                f"one of their rows: expect ~{self.amplification:.1f}x the version's stored bytes "
                f"({self.version_bytes:,}) fetched per epoch. Alternatives: {'; '.join(options)}")


def bound_advice(spec: RunSpec, what: str, bound: int, stored: Sequence[int], shard_rows: Sequence[int],
                 streamed: Sequence[bool], group_rows: float, working_set: int, ratio: float = 1.0) -> BoundAdvice:
    """The advice for one version (`stored`: its shards' bytes as stored, `ratio` times that as
    cached; `streamed`: which of them will be streamed). A streamed row group of G rows whose rows
    are spread over R reads of `batch_size` rows is fetched by about R (1 - (1 - 1/R)^G) of them
    (global: R spans the epoch)."""
    sizes = [int(b * ratio) for b in stored]
    total = sum(sizes)
    kept = sum(s for s, st in zip(sizes, streamed) if not st)
    spread_rows = {Shuffle.GLOBAL: sum(shard_rows),
                   Shuffle.WINDOW: spec.window_shards * sum(shard_rows) / max(1, len(shard_rows)),
                   Shuffle.SLIDING: spec.window_shards * sum(shard_rows) / max(1, len(shard_rows))
                   }.get(spec.shuffle, group_rows)
    reads = max(1.0, spread_rows / spec.batch_size)
    per_group = max(1.0, reads * (1 - (1 - 1 / reads) ** max(1.0, group_rows))) if reads > 1 else 1.0
    amplification = (kept + (total - kept) * per_group) / max(1, total)
    fits = int(bound // max(1, max(sizes, default=1)))
    return BoundAdvice(what, bound, working_set, sum(stored), sum(map(bool, streamed)), len(sizes), group_rows,
                       amplification, max(0, min(fits - READ_AHEAD, len(sizes))), min(fits // 2, len(sizes)), ratio)

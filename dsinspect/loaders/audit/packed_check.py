"""The log check of a packed-sequence run: a line's fingerprint recomputed from the sequences its run
spec names at (step, rank), each from its documents' row hashes as the catalog holds them now
(hashes.py: re-hashed from every field with `rehash`) and the token range taken from each
(sequences/digests.py). At a mismatch: the slots whose digests differ from the line's, and the
documents those sequences took tokens from, each named by its address.

Line by line (a `PackedRun.batch` per line, ~1 ms): row runs plan whole windows of lines at once
(logcheck.py), packed runs do not yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.audit.divergence import Divergence
from dsinspect.loaders.audit.hashes import RowHashes
from dsinspect.loaders.order.plan import locate_step
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.packed import packed_run
from dsinspect.loaders.records.runlog import batch_fingerprint, decode_digests, digests_of
from dsinspect.loaders.sequences.digests import sequence_digests
from dsinspect.loaders.sequences.packed import PackedRun, PackedSequence

if TYPE_CHECKING:
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["PackedLines"]


class PackedLines:
    """What checking the lines of packed runs shares: one `PackedRun` per data order, and the row hashes."""

    def __init__(self, catalog: "Catalog", hashes: RowHashes):
        self.catalog, self.hashes = catalog, hashes
        self._runs: dict[str, tuple[PackedRun, list]] = {}

    def fingerprint(self, spec: RunSpec, step: int, rank: int) -> tuple[list[PackedSequence], np.ndarray, bool]:
        """The sequences of (step, rank), their digests now, and whether every document could be read."""
        run, versions = self._run(spec)
        sequences = run.batch(step, rank)
        hashes, complete = [], True
        for seq in sequences:
            got, found = self.hashes.gather(versions[seq.source], seq.segments.docs)
            hashes.append(got)
            complete &= bool(found.all())
        return sequences, sequence_digests([s.segments for s in sequences], hashes), complete

    def check(self, spec: RunSpec, line: dict) -> Divergence | None:
        """One line against the catalog now; None when it agrees."""
        step, rank, of = int(line["step"]), int(line["rank"]), line.get("of", "stored")
        if of != "stored":
            raise UserError(f"log line for step {step}, rank {rank}: a packed run records of=stored, not {of!r}")
        if not 0 <= rank < spec.world_size:
            return Divergence(step, rank, -1, of, line["fingerprint"], None, [],
                              f"the log has rank {rank}, but the run spec in force at step {step} has world size "
                              f"{spec.world_size}")
        versions = self._run(spec)[1]
        epoch = locate_step(spec, step)[0]
        try:
            sequences, digests, complete = self.fingerprint(spec, step, rank)
        except UserError as e:  # a shard's documents no longer add up to the counts the run was planned by
            return Divergence(step, rank, epoch, of, line["fingerprint"], None, [],
                              f"the catalog no longer holds the documents this run read: {e}")
        replayed = batch_fingerprint(digests) if complete else None
        n, logged_n = len(sequences), line.get("n")
        if replayed == line["fingerprint"] and (logged_n is None or int(logged_n) == n) \
                and (line.get("epoch") is None or int(line["epoch"]) == epoch):
            return None
        div = Divergence(step, rank, epoch, of, line["fingerprint"], replayed, [], "")
        logged = decode_digests(line["samples"], n) if isinstance(line.get("samples"), str) else None
        if logged_n is not None and int(logged_n) != n:
            div.reason = (f"the job logged {logged_n} sequences at step {step}, the run spec gives {n}: this is not "
                          "the job's run spec (batch size or last-batch policy differ)")
        elif not complete:
            div.reason = "some documents of this batch cannot be read now (run `dsinspect verify` on its versions)"
        elif logged is not None:
            div.positions = [i for i, (a, b) in enumerate(zip(logged, digests_of(list(map(bytes, digests)))))
                             if a != b]
            div.reason = ("the sequences at these positions are not the ones the job read; they took tokens from "
                          + self._documents(sequences, versions, div.positions))
        else:
            div.reason = ("the batch's documents are not the ones the job read (the line has no per-sample digests "
                          "to say which sequence)")
        return div

    def _documents(self, sequences: list[PackedSequence], versions: list, slots: list[int]) -> str:
        """The documents of the sequences at `slots`, each marked when its bytes no longer hash to its
        stored row hash (edited in place) rather than being another document."""
        stored = RowHashes(rehash=False)
        named = []
        for i in slots[:4]:
            seq = sequences[i]
            version = versions[seq.source]
            now = self.hashes.gather(version, seq.segments.docs)[0]
            kept = stored.gather(version, seq.segments.docs)[0]
            for doc, start, stop, a, b in zip(seq.segments.docs.tolist(), seq.segments.starts.tolist(),
                                              seq.segments.stops.tolist(), now, kept):
                edited = " (edited in place)" if bytes(a) != bytes(b) else ""
                named.append(f"{version.address}:{doc} tokens {start}..{stop}{edited}")
        more = "" if len(slots) <= 4 else f" (and the documents of {len(slots) - 4} more sequences)"
        return "; ".join(named) + more

    def _run(self, spec: RunSpec) -> tuple[PackedRun, list]:
        key = spec.hash
        hit = self._runs.get(key)
        if hit is None:
            hit = self._runs[key] = (packed_run(self.catalog, spec),
                                     [self.catalog.version(s.name, s.version) for s in spec.sources])
        return hit

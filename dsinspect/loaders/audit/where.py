"""Where a run read a sample: every (step, rank, slot) that read row INDEX of a version, or for a
run of packed sequences every sequence that held document INDEX and which of its tokens, up to a
step. The order's arithmetic run backwards (order/inverse.py, sequences/packed.py) over each of the
run's spec segments (a resumed run changes world size or batch size at a segment's first step)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from dsinspect.errors import UserError
from dsinspect.loaders.audit.replay import SpecSource, load_specs
from dsinspect.loaders.order.inverse import readings
from dsinspect.loaders.order.plan import epoch_end
from dsinspect.loaders.read.packed import packed_run
from dsinspect.loaders.store.address import parse_address

if TYPE_CHECKING:
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["Found", "where"]


@dataclass(frozen=True)
class Found:
    """One reading: the sample at `slot` of `rank`'s batch at `step` (of epoch `epoch`); for a packed
    run, the sequence index and the document's tokens [start, stop) at `offset` in the sequence."""

    step: int
    rank: int
    slot: int
    epoch: int
    sequence: int | None = None
    start: int | None = None
    stop: int | None = None
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def where(specs: SpecSource, address: str, catalog: "Catalog",
          until_step: int | None = None) -> tuple[list[Found], int]:
    """Every reading of the sample `address` (NAME@REF:INDEX) before `until_step` (default: the end of
    the epoch the run starts in), in step order, and the step it looked up to."""
    segments = load_specs(specs)
    addr = parse_address(address)
    if addr.index is None:
        raise UserError(f"{address}: name a sample, NAME[@REF]:INDEX")
    version = catalog.resolve(addr)
    first = segments[0]
    matches = [k for k, s in enumerate(first.sources) if (s.name, s.version) == (version.name, version.id)]
    if not matches:
        read = ", ".join(f"{s.name}@{s.version[:12]}" for s in first.sources)
        raise UserError(f"{version.name}@{version.id[:12]} is not read by this run (it reads {read})")
    source = matches[0]
    if not 0 <= addr.index < version.num_rows:
        raise UserError(f"{address}: index {addr.index} is outside 0..{version.num_rows - 1}")
    until = epoch_end(first, first.start.step) if until_step is None else until_step
    if until < 0:
        raise UserError(f"--until-step {until} is negative")
    found: list[Found] = []
    for i, spec in enumerate(segments):
        end = min(until, segments[i + 1].start.step) if i + 1 < len(segments) else until
        if end <= spec.start.step:
            continue
        if spec.sequences is None:
            found += [Found(r.step, r.rank, r.slot, r.epoch) for r in readings(spec, source, addr.index, end)]
        else:
            found += [Found(d.reading.step, d.reading.rank, d.reading.slot, d.reading.epoch, d.span.sequence,
                            d.span.start, d.span.stop, d.span.offset)
                      for d in packed_run(catalog, spec).where(source, addr.index, end)]
    return found, until

"""A packed-sequence run over a catalog: the arithmetic of `sequences/` given each shard's document
lengths, read from the packed field's list offsets when a located sequence first touches the shard
(checked against the manifest's document and token counts before use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.format.token_counts import document_lengths
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.sequences.packed import PackedRun

if TYPE_CHECKING:
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["packed_run"]


def packed_run(catalog: "Catalog", spec: RunSpec) -> PackedRun:
    """The packed sequences of `spec` over the versions it pins in `catalog`."""
    if spec.sequences is None:
        raise UserError("this run reads rows, not packed sequences (its spec has no `sequences`)")
    versions = [catalog.version(s.name, s.version) for s in spec.sources]
    field = spec.sequences.field

    def lengths(source: int, shard: int) -> np.ndarray:
        return document_lengths(versions[source].read_shard(shard, columns=[field]).column(field))

    return PackedRun(spec, lengths)

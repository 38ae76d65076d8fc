"""One rank's packed batches (docs/PRETRAINING.md) as a Grain `RandomAccessDataSource`: element i is
the packed batch of step `start + i`, with the order, state mapping (`loader_state`, `grain_state`)
and records of `StepSource`, whose contract it keeps."""

from __future__ import annotations

from typing import Any

import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.grain.source import StepSource
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.read.packed_loader import PackedLoader
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["PackedStepSource"]


class PackedStepSource(StepSource):
    """Element i: the packed batch of step `spec.start.step + i` for `rank`, as numpy arrays `[B, L]`:
    `input_ids`, `labels` (int32; a token id past int32 is refused), `position_ids` and `segment_ids`
    (int32: Grain's own packing's segmentation, from 1), `loss_mask` (bool), plus "step", "epoch",
    "digests" ([B, 16] uint8, what the run record holds) and "document_segments" ([S, 6] int64: slot,
    source, document, start, stop, offset). `epochs`, `state`, `record_dir`: as `StepSource`."""

    _HASHES = "digests"
    _METADATA = ("step", "epoch", "digests", "document_segments")

    def __init__(self, spec: RunSpec, catalog: Catalog | str, rank: int = 0, epochs: int = 1, *,
                 state: dict[str, Any] | None = None, record_dir: str | None = None,
                 record_samples: bool | str = "auto"):
        if spec.sequences is None:
            raise UserError("PackedStepSource reads packed sequences: its run spec has no `sequences` "
                            "(rows: StepSource)")
        super().__init__(spec, catalog, rank, None, epochs, state=state, record_dir=record_dir,
                         record_samples=record_samples)

    def _open(self) -> PackedLoader:
        """As StepSource's Loader: shards a batch read cold are filled into the node cache behind it
        (without, every later batch of theirs would be read cold again)."""
        return PackedLoader(self.spec, self.rank, Catalog(self.catalog_url))

    def _element(self, batch: PackedBatch) -> dict[str, Any]:
        out: dict[str, Any] = batch.model_arrays(np.int32)
        out.update(step=np.int64(batch.step), epoch=np.int64(batch.epoch), digests=batch.digests,
                   document_segments=batch.document_segments)
        return out

    def __repr__(self) -> str:
        return (f"PackedStepSource(rank={self.rank}, start={self.start}, steps={len(self)}, "
                f"order={self.spec.order_hash[:12]})")

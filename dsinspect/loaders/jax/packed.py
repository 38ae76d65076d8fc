"""Global packed batches as `jax.Array`s (docs/PRETRAINING.md): a JAX process reads its ranks'
packed sequences (a `PackedLoader` per rank, one shard cache) and lays each array out with the
user's sharding, as `JaxBatches` does for rows: the global batch of a step is the sequences of ranks
0, 1, ... in order, whatever the number of processes, and the state is a LoaderState (elastic)."""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.jax.batches import JaxBatches, _own_ranks
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.read.packed_loader import PackedLoader
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["PackedJaxBatches"]


class PackedJaxBatches(JaxBatches):
    """One epoch per pass: per step a dict of global `jax.Array`s `[B·world, L]`: `input_ids`, `labels`
    (int32; a token id past int32 is refused), `position_ids` and `segment_ids` (int32, the
    segmentation JAX's attention kernels take: tokens attend only within equal ids), `loss_mask`
    (bool); on the host "step", "epoch", "digests" ([B·k, 16] uint8, this process's sequences) and
    "document_segments" ([S, 6] int64: slot in this process's rows, source, document, start, stop,
    offset). `ranks`: the ranks this process reads (default its contiguous share); `record_dir`:
    each rank's run record, as a PackedLoader writes it."""

    def __init__(self, spec: RunSpec, catalog: Catalog, sharding: "jax.sharding.Sharding", *,
                 ranks: Sequence[int] | None = None, record_dir: str | None = None, cache: ShardCache | None = None):
        if spec.sequences is None:
            raise UserError("PackedJaxBatches reads packed sequences: its run spec has no `sequences` "
                            "(rows: JaxBatches)")
        self.sharding = sharding
        self.ranks = list(ranks) if ranks is not None else _own_ranks(spec.world_size)
        cache = cache or ShardCache()
        self._loaders = [PackedLoader(spec, rank, catalog, cache=cache, record_dir=record_dir) for rank in self.ranks]

    def _global(self, batches: Sequence[PackedBatch]) -> dict[str, Any]:
        arrays = [b.model_arrays(np.int32) for b in batches]
        world, out = self.spec.world_size, {}
        for name in arrays[0]:
            local = np.concatenate([a[name] for a in arrays])
            out[name] = jax.make_array_from_process_local_data(self.sharding, local,
                                                               (len(local) * world // len(self.ranks), local.shape[1]))
        tables = []
        for k, b in enumerate(batches):
            table = b.document_segments.copy()
            table[:, 0] += k * self.spec.batch_size  # slots count this process's rows
            tables.append(table)
        out.update(step=batches[0].step, epoch=batches[0].epoch, digests=np.concatenate([b.digests for b in batches]),
                   document_segments=np.concatenate(tables))
        return out

"""Global batches as `jax.Array`s: a JAX process reads its ranks' rows (a `Loader` per rank, one
shard cache), stacks them in rank order and hands them to `jax.make_array_from_process_local_data`
with the user's sharding. The global batch of a step is then exactly the rows `batch_indices(spec,
step, r)` names for r = 0, 1, ... in order, whatever the number of processes; the state is the
Loaders' (the step of the next batch), so it resumes into any process count, world size or batch
size, and each rank's run record is the one a Loader writes. Reading ahead is the Loaders' own
(`prefetch`); putting a batch on the devices is asynchronous in JAX, so it overlaps the step that
uses the batch before."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import jax
import numpy as np

from dsinspect.errors import UserError
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.batch import Batch
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.loader import Loader
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["JaxBatches"]


class JaxBatches:
    """One epoch per pass (as a Loader): per step a dict of global `jax.Array`s, one per column,
    plus on the host "step", "epoch" and "indices" (this process's rows, its ranks in order)."""

    def __init__(self, spec: RunSpec, catalog: Catalog, sharding: "jax.sharding.Sharding",
                 columns: Sequence[str] | None = None, *, ranks: Sequence[int] | None = None,
                 prefetch: int = 1, record_dir: str | None = None, cache: ShardCache | None = None):
        """`ranks`: the data-parallel ranks of `spec` this process reads (default: its contiguous
        share: process p of n reads ranks p*k .. p*k+k-1, k = world_size / n). `prefetch`: batches
        each rank reads ahead on a thread. `record_dir`: each rank's run record (`dsinspect replay
        --check-log` reads them as any Loader's)."""
        self.sharding = sharding
        self.ranks = list(ranks) if ranks is not None else _own_ranks(spec.world_size)
        cache = cache or ShardCache()
        self._loaders = [Loader(spec, rank, catalog=catalog, columns=columns, cache=cache, prefetch=prefetch,
                                record_dir=record_dir) for rank in self.ranks]
        self.columns = self._loaders[0].columns
        ragged = [c for c in self.columns if c not in self._loaders[0].dense_columns]
        if ragged:
            raise UserError(f"JaxBatches: column(s) {ragged} have no fixed shape (strings, bytes or ragged lists); "
                            "pick fixed-shape columns with columns=[...]")

    @property
    def spec(self) -> RunSpec:
        return self._loaders[0].spec

    @property
    def step(self) -> int:
        """The step of the next global batch."""
        return self._loaders[0].step

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batches in zip(*self._loaders):  # every rank has the same steps in an epoch
            yield self._global(batches)

    def _global(self, batches: Sequence[Batch]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        world = self.spec.world_size
        arrays = [b.to_numpy() for b in batches]
        for column in self.columns:
            local = np.concatenate([a[column] for a in arrays])
            shape = (len(local) * world // len(self.ranks), *local.shape[1:])  # every rank's batch is one size
            out[column] = jax.make_array_from_process_local_data(self.sharding, local, shape)
        out["step"], out["epoch"] = batches[0].step, batches[0].epoch
        out["indices"] = np.concatenate([b.indices for b in batches])
        return out

    def state_dict(self) -> dict[str, Any]:
        """Where the next global batch starts: a Loader's state (tiny, JSON-able, elastic). Every
        rank's record is durable up to here when it returns."""
        states = [loader.state_dict() for loader in self._loaders]
        return states[0]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state`, saved with any number of processes, ranks or batch size."""
        for loader in self._loaders:
            loader.load_state_dict(state)

    def close(self) -> None:
        for loader in self._loaders:
            loader.close()

    def __enter__(self) -> "JaxBatches":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _own_ranks(world_size: int) -> list[int]:
    """This JAX process's contiguous share of the ranks."""
    processes, me = jax.process_count(), jax.process_index()
    if world_size % processes:
        raise UserError(f"JaxBatches: world_size {world_size} does not split over {processes} JAX processes; "
                        "pass ranks=[...] or a world_size that is a multiple of jax.process_count()")
    share = world_size // processes
    return list(range(me * share, (me + 1) * share))

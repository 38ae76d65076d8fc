"""A `datasets.Dataset` pushed to a catalog as a version: the way back from Hugging Face.

The dataset is written with its own `save_to_disk` into a scratch directory on local disk, and that
directory is ingested (`ingest`, kind "hf"): so the version is, by construction, the one ingesting
the dataset's `save_to_disk` files gives (the same id: features to roles, media to bytes, the
shards each saved file makes), and every ingest option applies. It costs one local copy of the
data, removed afterwards; reading the dataset's Arrow tables directly would save it only for an
unshuffled, unfiltered dataset (its files are the data only when no indices mapping sits over them),
and would need a second path through ingest that could drift from the first.
"""

from __future__ import annotations

import tempfile
from typing import Any

import datasets

from dsinspect.errors import UserError
from dsinspect.loaders.ingest.pipeline import ingest
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["push_dataset"]


def push_dataset(dataset: datasets.Dataset, catalog: Catalog, name: str, *, num_shards: int | None = None,
                 max_shard_size: str | int | None = None, **ingest_args: Any) -> DatasetVersion:
    """Publish `dataset`'s rows, in order, as a new version of `name`. `num_shards` and
    `max_shard_size` are `save_to_disk`'s (they decide the saved files, so the shards); the rest are
    `ingest`'s (`key`, `roles`, `tokenizer`, `write`, `message`, `tags`, `engine`, ...)."""
    if not isinstance(dataset, datasets.Dataset):
        hint = " (push one split: dataset_dict['train'])" if isinstance(dataset, datasets.DatasetDict) else ""
        raise UserError(f"push_dataset takes a datasets.Dataset, not {type(dataset).__name__}{hint}")
    catalog.layout.dataset(name)  # a bad name is refused before anything is written
    with tempfile.TemporaryDirectory(prefix="dsinspect-hf-push-") as scratch:
        dataset.save_to_disk(scratch, num_shards=num_shards, max_shard_size=max_shard_size)
        return ingest(catalog, scratch, name, kind="hf", **ingest_args)

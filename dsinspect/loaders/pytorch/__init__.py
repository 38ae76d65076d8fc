"""The PyTorch adapter: one rank's batches as dicts of tensors for any number of DataLoader workers,
handed over through shared-memory rings, with a global state that restores into any worker or rank
count. Needs the `torch` extra.

May import `read`, `records`, `order`, `store`, `format`, `dsinspect.errors`.
"""

from dsinspect.loaders.pytorch.adapter import TorchBatches, TorchLoader, batch_to_torch

__all__ = ["TorchBatches", "TorchLoader", "batch_to_torch"]

"""Packed batches as the tensors a causal language model's step takes (docs/PRETRAINING.md)."""

from __future__ import annotations

from typing import Any

import torch

from dsinspect.loaders.read.packed_batch import PackedBatch

__all__ = ["packed_to_torch"]


def packed_to_torch(batch: PackedBatch) -> dict[str, Any]:
    """`input_ids` and `labels` ([B, L] int64), `position_ids` ([B, L] int64, restarting per document),
    `cu_seqlens` (int32 over the flattened inputs) and `max_seqlen` for variable-length attention,
    `loss_mask` ([B, L] bool: False on padding sequences), and `step`, `epoch`, `rank`, `digests`.

    Sequences of L + 1 tokens (`labels=True`, Megatron's convention) give inputs `tokens[:, :L]` and
    labels `tokens[:, 1:]`; sequences of L tokens give the tokens as both (the model shifts them)."""
    tokens = torch.from_numpy(batch.tokens.astype("int64"))
    length = batch.length
    inputs = tokens[:, :length]
    cu = batch.cu_seqlens_of(length)
    return {"input_ids": inputs, "labels": tokens[:, 1:] if tokens.shape[1] > length else inputs,
            "position_ids": torch.from_numpy(batch.position_ids[:, :length].astype("int64")),
            "cu_seqlens": torch.from_numpy(cu), "max_seqlen": int((cu[1:] - cu[:-1]).max(initial=0)),
            "loss_mask": torch.from_numpy(batch.loss_mask[:, :length].copy()),
            "step": batch.step, "epoch": batch.epoch, "rank": batch.rank,
            "digests": torch.from_numpy(batch.digests.copy())}

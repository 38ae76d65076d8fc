"""Packed batches as the tensors a causal language model's step takes (docs/PRETRAINING.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dsinspect.loaders.read.packed_batch import PackedBatch, PackedRows

__all__ = ["packed_to_torch"]


def packed_to_torch(batch: PackedBatch) -> dict[str, Any]:
    """`input_ids` and `labels` ([B, L] int64), `position_ids` ([B, L] int64, restarting per document),
    `segment_ids` ([B, L] int32, from 1 in each sequence), `cu_seqlens` (int32 over the flattened
    inputs) and `max_seqlen` for variable-length attention, `loss_mask` ([B, L] bool: False on
    padding sequences), `document_segments` ([S, 6] int64: slot, source, document, start, stop,
    offset of every document segment), and `step`, `epoch`, `rank`, `digests`.

    Sequences of L + 1 tokens (`labels=True`, Megatron's convention) give inputs `tokens[:, :L]` and
    labels `tokens[:, 1:]`; sequences of L tokens give the tokens as both (the model shifts them)."""
    run = batch.rows.shared("torch", _tensors)  # made once for the batches read together
    cu = batch.cu_seqlens_of(batch.length)
    out: dict[str, Any] = {name: tensor[batch.a:batch.b] for name, tensor in run.items()}
    out.update(cu_seqlens=torch.from_numpy(cu), max_seqlen=int((cu[1:] - cu[:-1]).max(initial=0)),
               document_segments=torch.from_numpy(batch.document_segments),
               step=batch.step, epoch=batch.epoch, rank=batch.rank, digests=out["digests"])
    return out


def _tensors(rows: PackedRows) -> dict[str, torch.Tensor]:
    """The model's arrays of all the rows as tensors (each batch's are row slices: views)."""
    tensors = {name: torch.from_numpy(array) for name, array in rows.model_arrays(np.int64, 0, len(rows.table)).items()}
    tensors["position_ids"] = tensors["position_ids"].long()
    tensors["digests"] = torch.from_numpy(rows.digests.copy())
    return tensors

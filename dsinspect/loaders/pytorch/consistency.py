"""Ranks that start a pass at different steps (resumed from states of different checkpoints) would
lose or repeat samples and get different numbers of steps, so the job's next collective hangs. The
adapters check it with one small collective at the start of each pass and refuse on every rank,
before the first batch."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils.data import get_worker_info

from dsinspect.errors import UserError
from dsinspect.loaders.order.state import states_disagree

__all__ = ["check_same_step"]


def check_same_step(step: int) -> None:
    """Under torch.distributed (and not in a DataLoader worker): all_gather every rank's next step;
    if they differ, raise UserError naming the steps and their ranks, on every rank. Every rank
    of the process group must call it (it is a collective)."""
    if not (dist.is_available() and dist.is_initialized()) or get_worker_info() is not None:
        return
    world = dist.get_world_size()
    if world == 1:
        return
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":  # nccl gathers CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device())
    mine = torch.tensor([step], dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    steps = [int(t.item()) for t in gathered]
    if len(set(steps)) > 1:
        where: dict[int, list[int]] = {}
        for rank, at in enumerate(steps):
            where.setdefault(at, []).append(rank)
        raise UserError(states_disagree(where))

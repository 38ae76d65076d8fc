"""Ranks that start a pass from different places (states of different checkpoints: another step, or
the same step at another position of the order) would lose or repeat samples and get different
numbers of steps, so the job's next collective hangs. The adapters compare every rank's
ResumePoint with one small collective, in the main process of each rank, and refuse on every rank
before the first batch: at each pass a TorchLoader or the main process starts, and when a
TorchBatches state is loaded in the main process (the one place a plain DataLoader's or a
StatefulDataLoader's workers leave to check)."""

from __future__ import annotations

from collections import deque

import torch
import torch.distributed as dist
from torch.utils.data import get_worker_info

from dsinspect.errors import UserError
from dsinspect.loaders.order.state import ResumePoint, disagreement

__all__ = ["check_ranks_agree", "distributed_world"]

_HEX = 15  # hex digits of a hash carried per rank: 60 bits, an int64
_KEPT_CHECKS = 8  # checks whose collective this process still holds (see check_ranks_agree)
_kept: deque = deque(maxlen=_KEPT_CHECKS)  # their (work, tensors), the oldest let go first


def distributed_world() -> int:
    """The number of ranks of torch.distributed's default group, 1 when it is not initialized."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def check_ranks_agree(point: ResumePoint) -> None:
    """Under torch.distributed (and not in a DataLoader worker): all_gather every rank's point; if
    they differ, raise UserError naming what differs and the ranks on each side, on every rank.
    Every rank of the process group must call it (it is a collective)."""
    if get_worker_info() is not None:
        return
    world = distributed_world()
    if world == 1:
        return
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":  # nccl gathers CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device())
    # The collective's work ends on a gloo thread, which may drop it after all_gather returned. If
    # that drop releases the tensors, that thread enters Python to free their Python objects (a new
    # thread state, made under CPython's thread-list lock without the GIL), and a DataLoader worker
    # forked in that instant inherits the lock held and hangs in os.fork (CPython < 3.11.10,
    # gh-112275; seen once in CI). So this process keeps the work and its tensors for the next
    # _KEPT_CHECKS checks: the gloo thread's drop releases nothing, and ours, by then, is the last.
    mine = torch.tensor(_as_ints(point), dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    work = dist.all_gather(gathered, mine, async_op=True)
    _kept.append((work, mine, gathered))
    work.wait()
    problem = disagreement({rank: _from_ints(t.tolist()) for rank, t in enumerate(gathered)})
    if problem:
        raise UserError(problem)


def _as_ints(point: ResumePoint) -> list[int]:
    hashes = [int(h[:_HEX], 16) if h else 0 for h in (point.order, point.spec, point.segment)]
    return [point.step, point.epoch, point.position, *hashes]


def _from_ints(values: list[int]) -> ResumePoint:
    step, epoch, position, *hashes = values
    order, spec, segment = (f"{h:0{_HEX}x}" if h else "" for h in hashes)
    return ResumePoint(step, epoch, position, order, spec, segment)

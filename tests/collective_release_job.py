"""One rank of tests/test_collective_release.py (gloo, CPU, world 2, rendezvous through FILE):

    python tests/collective_release_job.py RANK FILE

Rank 0 runs dsinspect's check_ranks_agree with torch.distributed.all_gather watched: every tensor
handed to the collective gets a finalizer noting the thread that frees it, and the first check's
gloo thread is held in a completion callback (as a loaded machine may hold it) until the check has
returned (or HOLD s, for a check that waits on the Work itself). Later checks run until the first
check's tensors are freed; it prints, as JSON, how many were freed on this (the calling) thread and
how many elsewhere. Rank 1 joins each collective only
once rank 0 has set it up (store key go<i>: "gather" or "stop")."""

import json
import sys
import threading
import weakref

import torch.distributed as dist

from dsinspect.loaders.order.state import ResumePoint
from dsinspect.loaders.pytorch.consistency import check_ranks_agree

CHECKS = 200
HOLD = 10  # s; the old check returned within ms of the future (only its failing needs the hold)


def point(i: int) -> ResumePoint:
    return ResumePoint(i, 0, 4 * i, "ab" * 8, "cd" * 8, "")


def rank0(store) -> dict:
    real, main = dist.all_gather, threading.get_ident()
    release, freed, first = threading.Event(), [], []
    count = [0]

    def watched(tensor_list, tensor, group=None, async_op=False):
        i = count[0]
        count[0] += 1
        for t in [*tensor_list, tensor]:
            weakref.finalize(t, lambda i=i: freed.append((i, threading.get_ident())))
            if i == 0:
                first.append(None)
        work = real(tensor_list, tensor, group=group, async_op=True)
        future = work.get_future()
        if i == 0:  # the gloo thread that ran it waits here, after waking the future's waiters, before it
            # lets go; at most HOLD s: a Work's own wait() (a check may call it) ends after this callback
            future.then(lambda _: release.wait(HOLD))
        store.set(f"go{i}", "gather")  # rank 1 joins now: the callback is in place before completion
        future.wait()
        return work if async_op else None

    dist.all_gather = watched
    try:
        check_ranks_agree(point(0))
        release.set()
        for k in range(1, CHECKS):
            if sum(1 for i, _ in freed if i == 0) == len(first):
                break
            check_ranks_agree(point(k))
    finally:
        dist.all_gather = real
    store.set(f"go{count[0]}", "stop")
    mine = [who for i, who in freed if i == 0]
    return {"tensors": len(first), "freed_here": mine.count(main), "freed_elsewhere": len(mine) - mine.count(main),
            "checks": count[0]}


def rank1(store) -> None:
    for i in range(CHECKS + 1):
        store.wait([f"go{i}"])
        if store.get(f"go{i}") == b"stop":
            return
        check_ranks_agree(point(i))


def main(rank: int, path: str) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"file://{path}")
    store = dist.distributed_c10d._get_default_store()
    try:
        if rank == 0:
            print(json.dumps(rank0(store)), flush=True)
        else:
            rank1(store)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])

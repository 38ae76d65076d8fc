"""check_ranks_agree lets go of its collective's tensors only once the collective no longer holds
them, so a gloo thread never frees them. The hang it closes (CI, once, in
test_torchrun_resume): when all_gather returned before gloo's run-loop thread dropped its work,
Python freed the tensors first, and that thread later freed their Python objects itself, creating
a thread state under CPython's thread-list lock without the GIL; a DataLoader worker forked in that
instant inherited the lock held and hung inside os.fork (CPython < 3.11.10, gh-112275). Real gloo,
two processes; the first check's gloo thread is held in a completion callback until the check
returned (what a loaded machine does at random), so the test fails on the old code every time."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

JOB = Path(__file__).with_name("collective_release_job.py")


def test_a_gloo_thread_never_frees_the_tensors_of_a_rank_check(tmp_path):
    rendezvous = tmp_path / "rendezvous"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen([sys.executable, str(JOB), str(r), str(rendezvous)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for r in range(2)]
    try:
        outs = [p.communicate(timeout=240) for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    assert [p.returncode for p in ranks] == [0, 0], f"{outs}"
    got = json.loads(outs[0][0].strip().splitlines()[-1])
    assert got["tensors"] == 3  # its point, and the gathered ones of two ranks
    assert (got["freed_here"], got["freed_elsewhere"]) == (3, 0), got

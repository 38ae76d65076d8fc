"""The CLI into a pipe: a reader that went away (`dsinspect replay ... | head`) ends the command
quietly with 141 (as SIGPIPE would), never the 1 of a failed check."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PIPE_CLOSED = 141


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """`dsinspect ARGS` writing into a pipe whose reader is already gone (what `| head` leaves once
    head has read its lines)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "dsinspect", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300, env={k: v for k, v in os.environ.items()
                                                           if k != "DSINSPECT_CATALOG"})
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [
    ("replay", "--address", "demo-text@v1", "--batch-size", "8", "--world-size", "4", "--step", "3", "--rank", "all"),
    ("query", "demo-text@v1", "--columns", "text,tokens", "--limit", "240", "--json"),
    ("ls",),
])
def test_a_closed_pipe_ends_quietly_with_its_own_code(args):
    done = into_closed_pipe(*args)
    assert done.returncode == PIPE_CLOSED, done.stderr
    assert done.stderr == ""

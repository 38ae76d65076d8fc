"""The CLI into a pipe: a reader that went away (`dsinspect replay ... | head`) ends the command
quietly with 141 (as SIGPIPE would), never the 1 of a failed check; a check that fails still says 1."""

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


def test_a_failed_check_into_a_closed_pipe_still_exits_1(tmp_path):
    """The reader went away, but the command still reaches its verdict: a damaged row is exit 1 and its
    line, as without the pipe, never the 141 a successful command gets."""
    import shutil

    from conftest import forge_rl_version

    from dsinspect.defaults import BUNDLED

    catalog = tmp_path / "catalog"
    shutil.copytree(BUNDLED, catalog)
    forge_rl_version(catalog, tmp_path)  # demo-rl@forged: row 3 no longer hashes to its stored row hash
    for json_flag in ((), ("--json",)):
        done = into_closed_pipe("--catalog", str(catalog), "replay", "--address", "demo-rl@forged", "--shuffle",
                                "none", "--batch-size", "40", "--step", "0", *json_flag)
        assert done.returncode == 1, (json_flag, done.returncode, done.stderr)
        assert done.stderr.count("\n") == 1 and "no longer hash to the stored row hash" in done.stderr, done.stderr
    intact = into_closed_pipe("--catalog", str(catalog), "replay", "--address", "demo-rl@v1", "--shuffle", "none",
                              "--batch-size", "40", "--step", "0")
    assert intact.returncode == PIPE_CLOSED and intact.stderr == ""

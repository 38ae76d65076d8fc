"""dsinspect.loaders.store.locks: flock on a lock file, exclusive or shared, waiting or not, and never
left behind by a process that dies."""

import os
import subprocess
import sys
import time

import pytest

from dsinspect.loaders.store.locks import locked_file, open_locked


def test_an_exclusive_lock_excludes_every_other_lock(tmp_path):
    path = tmp_path / "x.lock"
    fd = open_locked(path)  # a separate open file description conflicts even within one process
    try:
        assert open_locked(path, wait=False) is None
        assert open_locked(path, shared=True, wait=False) is None
    finally:
        os.close(fd)
    again = open_locked(path, wait=False)
    assert again is not None
    os.close(again)


def test_shared_locks_coexist_and_keep_out_an_exclusive_one(tmp_path):
    path = tmp_path / "x.pin"
    a, b = open_locked(path, shared=True), open_locked(path, shared=True, wait=False)
    assert b is not None
    assert open_locked(path, wait=False) is None
    os.close(a)
    os.close(b)


def test_locked_file_holds_for_the_block_and_creates_with_the_mode(tmp_path):
    path = tmp_path / "sub.lock"
    with locked_file(path, mode=0o600):
        assert open_locked(path, wait=False) is None
    assert (path.stat().st_mode & 0o777) == 0o600 & ~_umask()
    fd = open_locked(path, wait=False)
    assert fd is not None
    os.close(fd)


def test_without_create_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_locked(tmp_path / "absent", wait=False, create=False)
    assert not (tmp_path / "absent").exists()


def test_the_kernel_releases_the_lock_of_a_killed_process(tmp_path):
    path, ready = tmp_path / "x.lock", tmp_path / "ready"
    code = ("import sys, time, pathlib; from dsinspect.loaders.store.locks import open_locked\n"
            "open_locked(sys.argv[1]); pathlib.Path(sys.argv[2]).touch(); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path), str(ready)])
    try:
        while not ready.exists():  # however loaded the machine; pytest's timeout ends a hang
            assert holder.poll() is None, "the holder died before taking the lock"
            time.sleep(0.02)
        assert open_locked(path, wait=False) is None
    finally:
        holder.kill()
        holder.wait()
    fd = open_locked(path, wait=False)
    assert fd is not None
    os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

"""`dsinspect web` stopped by its PID: SIGTERM, SIGINT or SIGHUP to the process the user started
leaves no process behind and the port closed (it used to leave its Streamlit child serving).

Each server starts with the signal dispositions the test names, never the test runner's: a child
inherits an ignored signal across fork and exec, and Streamlit installs no handler for SIGHUP, so
under a runner that ignores SIGHUP (`nohup`, some CI job runners) a SIGHUP did nothing and
`dsinspect web` was "still running 60 s after SIGHUP" (CI, issue #31), whatever the load. That is
right for `nohup dsinspect web` (pinned below); SIGINT, which a shell script's background job
ignores, now stops the server even in the second before Streamlit installs its handlers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from web_fixtures import write_web_catalog
from web_server import free_port

pytestmark = pytest.mark.slow
STOPS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group `pgid`, read from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait_until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def ignored(pid: int) -> set[int]:
    """The signals process `pid` ignores (SigIgn in /proc/PID/status)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:"))
    mask = int(line.split()[1], 16)
    return {n for n in range(1, 64) if mask >> (n - 1) & 1}


def is_streamlit(pid: int) -> bool:
    """Whether `pid` has exec'd Streamlit (its command line says so)."""
    try:
        return b"streamlit" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@contextmanager
def dispositions(ignore: tuple[signal.Signals, ...] = ()):
    """Children started inside get SIGHUP, SIGINT and SIGTERM at their defaults, but `ignore` ignored,
    whatever the test runner gave this process (only the main thread may set them: pytest's)."""
    old = {sig: signal.signal(sig, signal.SIG_IGN if sig in ignore else signal.SIG_DFL) for sig in STOPS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def web(tmp_path, ignore: tuple[signal.Signals, ...] = ()):
    """`dsinspect web` on a free port, in its own process group: (process, port); killed afterwards."""
    write_web_catalog(str(tmp_path / "cat"))
    port = free_port()
    cmd = [sys.executable, "-m", "dsinspect", "--catalog", str(tmp_path / "cat"), "web", "--port", str(port)]
    with open(tmp_path / "web.log", "wb") as log, dispositions(ignore):
        # its own process group: whatever it starts can be found (and cleaned up) by the group id
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield proc, port
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def assert_stopped(proc, port: int) -> None:
    proc.wait(timeout=60)
    assert wait_until(lambda: not group_members(proc.pid), 60), f"left running: {group_members(proc.pid)}"
    assert wait_until(lambda: not port_open(port), 60), f"port {port} still open"


@pytest.mark.parametrize("sig", STOPS, ids=lambda s: s.name)
def test_a_signal_to_dsinspect_web_stops_the_server_and_frees_the_port(tmp_path, sig):
    with web(tmp_path) as (proc, port):
        assert wait_until(lambda: healthy(port) or proc.poll() is not None, 90) and proc.poll() is None, \
            (tmp_path / "web.log").read_text()
        os.kill(proc.pid, sig)  # the PID the user has, not the group
        assert_stopped(proc, port)


def test_sigint_stops_it_during_streamlits_start_up_even_when_started_ignoring_it(tmp_path):
    """A shell script's `dsinspect web &` starts with SIGINT ignored; exec keeps an ignored signal
    ignored, and Streamlit overrides that only once its server runs: a SIGINT in that second was lost."""
    with web(tmp_path, ignore=(signal.SIGINT, signal.SIGTERM)) as (proc, port):
        assert wait_until(lambda: is_streamlit(proc.pid) or proc.poll() is not None, 90) and proc.poll() is None
        assert not ignored(proc.pid) & {signal.SIGINT, signal.SIGTERM}  # from the first instant of Streamlit
        os.kill(proc.pid, signal.SIGINT)
        assert_stopped(proc, port)


def test_under_nohup_sighup_is_ignored_and_sigterm_still_stops_it(tmp_path):
    """`nohup dsinspect web`: the operator asked the server to outlive its terminal's hangup."""
    with web(tmp_path, ignore=(signal.SIGHUP,)) as (proc, port):
        assert wait_until(lambda: healthy(port) or proc.poll() is not None, 90) and proc.poll() is None
        assert signal.SIGHUP in ignored(proc.pid)
        os.kill(proc.pid, signal.SIGHUP)  # discarded when sent: an ignored signal is never queued
        assert healthy(port) and proc.poll() is None
        os.kill(proc.pid, signal.SIGTERM)
        assert_stopped(proc, port)

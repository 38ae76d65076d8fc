"""`dsinspect web` stopped by its PID: SIGTERM, SIGINT or SIGHUP to the process the user started
leaves no process behind and the port closed (it used to leave its Streamlit child serving)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from web_fixtures import write_web_catalog
from web_server import free_port

pytestmark = pytest.mark.slow


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


def wait_until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_dsinspect_web_stops_the_server_and_frees_the_port(tmp_path, sig):
    write_web_catalog(str(tmp_path / "cat"))
    port = free_port()
    cmd = [sys.executable, "-m", "dsinspect", "--catalog", str(tmp_path / "cat"), "web", "--port", str(port)]
    with open(tmp_path / "web.log", "wb") as log:
        # its own process group: whatever it starts can be found (and cleaned up) by the group id
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        assert wait_until(lambda: healthy() or proc.poll() is not None, 90) and proc.poll() is None, \
            (tmp_path / "web.log").read_text()
        os.kill(proc.pid, sig)  # the PID the user has, not the group
        proc.wait(timeout=60)
        assert wait_until(lambda: not group_members(proc.pid), 60), f"left running: {group_members(proc.pid)}"
        assert wait_until(lambda: not port_open(port), 60), f"port {port} still open"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

"""Start `dsinspect web` on a free loopback port for the browser tests, and stop it again."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator

_PIDS: dict[str, int] = {}


def server_pid(base: str) -> int:
    """The PID (and process group) of the server answering at `base`."""
    return _PIDS[base]


def artifact_log(name: str) -> str:
    """test-artifacts/NAME-WORKER.log, for a session's server: one may run on every xdist worker at once."""
    from pathlib import Path

    artifacts = Path(__file__).resolve().parent.parent / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    return str(artifacts / f"{name}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_web(catalog: str, log_path: str, timeout: float = 60, env: dict[str, str] | None = None,
                args: tuple[str, ...] = (), cwd: str | None = None) -> Iterator[str]:
    """`python -m dsinspect --catalog CATALOG web --port P [ARGS]` with `env` added to this process's
    environment (and run in `cwd`); yields the base URL once /_stcore/health answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "dsinspect", "--catalog", catalog, "web", "--port", str(port), *args]
    with _serving(cmd, port, log_path, timeout, env, cwd) as base:
        yield base


@contextmanager
def running_script(script: str, log_path: str, timeout: float = 60) -> Iterator[str]:
    """Any Streamlit script, served with the flags `dsinspect web` uses (loopback, no usage statistics)."""
    from dsinspect.cli.web_cmd import streamlit_command

    port = free_port()
    cmd = streamlit_command(port)
    cmd[cmd.index("run") + 1] = script
    with _serving(cmd, port, log_path, timeout, None, None) as base:
        yield base


@contextmanager
def _serving(cmd: list[str], port: int, log_path: str, timeout: float, env: dict[str, str] | None,
             cwd: str | None) -> Iterator[str]:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{cmd[2:4]} exited with {proc.returncode}: see {log_path}")
                try:
                    with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{cmd[2:4]} did not answer on {base} in {timeout} s")
                time.sleep(0.2)
            _PIDS[base] = proc.pid
            yield base
        finally:
            os.killpg(proc.pid, 15)  # the group this started (dsinspect web execs streamlit in place)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()

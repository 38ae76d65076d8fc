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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_web(catalog: str, log_path: str, timeout: float = 60) -> Iterator[str]:
    """`python -m dsinspect --catalog CATALOG web --port P`; yields the base URL once /_stcore/health answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "dsinspect", "--catalog", catalog, "web", "--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"dsinspect web exited with {proc.returncode}: see {log_path}")
                try:
                    with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"dsinspect web did not answer on {base} in {timeout} s")
                time.sleep(0.2)
            yield base
        finally:
            os.killpg(proc.pid, 15)  # the group this test started: dsinspect and its streamlit child
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()

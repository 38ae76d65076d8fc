"""The peers' own libraries, run in processes of their own (PYTHONPATH=$DSINSPECT_PEERS: their pins are
kept out of the main environment; .ci/run installs them there): where they are, and a worker process
started once per test module that answers one JSON request a line. No pytest fixtures in here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def peers_dir(package_file: str, what: str) -> Path:
    """$DSINSPECT_PEERS, or a skip when it is unset or lacks `package_file` (e.g. megatron/core/__init__.py)."""
    where = os.environ.get("DSINSPECT_PEERS")
    if not where:
        pytest.skip(f"DSINSPECT_PEERS is not set (the directory holding {what})")
    if not (Path(where) / package_file).is_file():
        pytest.skip(f"DSINSPECT_PEERS={where} lacks {what}")
    return Path(where)


class PeerWorker:
    """tests/`script`, started once with the peers on its path: `ask` sends a request and waits for "ok"."""

    def __init__(self, script: str, where: Path, log: Path):
        self.log = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-W", "ignore", str(HERE / script)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, "PYTHONPATH": str(where)})

    def ask(self, **request) -> None:
        self.proc.stdin.write(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in request.items()}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer == "ok", answer or f"the worker ended; see {self.log.name}"

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()

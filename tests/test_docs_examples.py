"""Examples in docs/ run as written: each named section's Python blocks in a fresh process with no
catalog named (the sample catalog), importing only public names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def python_blocks(page: str, heading: str) -> str:
    """The Python blocks between `heading` and the next heading of its level, joined."""
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    end = text.find(f"\n{level} ", start + len(heading) + 2)
    body = text[start:end if end != -1 else len(text)]
    return "\n\n".join(re.findall(r"^```python\n(.*?)^```$", body, flags=re.M | re.S))


def test_remote_cache_bound_example_runs_as_written(tmp_path):
    code = python_blocks("REMOTE.md", "## The cache bound")
    assert "from dsinspect.loaders import Loader, RunSpec, ShardCache" in code  # the public home
    script = tmp_path / "example.py"
    script.write_text(code + "\nprint(cache.max_bytes, batch.step)\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    bound, last_step = map(int, done.stdout.split())
    assert bound == 256 * 2**20 and last_step > 0  # the bound was taken and an epoch read under it

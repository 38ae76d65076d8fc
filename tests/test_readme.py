"""The README's "Reading for training" example runs as written: its Python blocks in a fresh folder
(the default catalog, the bundled sample data), then the `dsinspect replay` command it shows next,
which answers from the run record the example left behind."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Reading for training"


def section_blocks(heading: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block between `heading` and the next `## ` heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + len(heading) + 2)
    body = text[start:end if end != -1 else len(text)]
    return re.findall(r"^```(\w*)\n(.*?)^```$", body, flags=re.M | re.S)


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DSINSPECT_CATALOG"}  # the default catalog, as a reader has it
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_reading_for_training_runs_as_written(tmp_path):
    blocks = section_blocks(SECTION)
    python = [code for lang, code in blocks if lang == "python"]
    commands = [line for lang, code in blocks if lang in ("bash", "sh", "console") for line in code.splitlines()
                if line.startswith("dsinspect ")]
    assert python and commands == ["dsinspect replay --spec runs/exp1 --step 3 --rank 3"]

    script = tmp_path / "example.py"
    script.write_text("\n\n".join(python), encoding="utf-8")
    done = run([sys.executable, str(script)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    logged = {}  # what the example's loader recorded: (step, rank) -> fingerprint
    for log in (tmp_path / "runs" / "exp1" / "fingerprints").glob("*.jsonl"):
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if "step" in entry:
                logged[(entry["step"], entry["rank"])] = entry["fingerprint"]

    argv = shlex.split(commands[0])
    done = run([sys.executable, "-m", "dsinspect", *argv[1:]], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    assert "step 3 (epoch 0) · rank 3 of 4 · batch 8 · demo-text@" in done.stdout
    assert "shard:row" in done.stdout and "tokens [" in done.stdout  # provenance and the fields' previews
    assert f"fingerprint (stored)       rank 3: {logged[(3, 3)]}" in done.stdout  # the batch the loader read

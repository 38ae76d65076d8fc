"""The README's "Reading for training" example runs as written: its Python blocks in a fresh folder
(no catalog named: the sample catalog's copy in the cache), then the `dsinspect` commands it shows
next, which find the run in `<catalog>/runs` with no flags: listed, its check passing, its step
replayed. The web app's run listing finds it too."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from dsinspect.defaults import bundled_catalog_path

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


def dsinspect(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "dsinspect", *shlex.split(command)[1:]], cwd)


def test_reading_for_training_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.delenv("DSINSPECT_CATALOG", raising=False)
    blocks = section_blocks(SECTION)
    python = [code for lang, code in blocks if lang == "python"]
    commands = [line for lang, code in blocks if lang in ("bash", "sh", "console") for line in code.splitlines()
                if line.startswith("dsinspect ")]
    assert python and commands == ["dsinspect runs", "dsinspect replay --check-log exp1",
                                   "dsinspect replay --spec exp1 --step 3 --rank 3"]

    script = tmp_path / "example.py"
    script.write_text("\n\n".join(python), encoding="utf-8")
    done = run([sys.executable, str(script)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in tmp_path.iterdir()] == ["example.py"]  # nothing left in the working folder

    record = bundled_catalog_path() / "runs" / "exp1"  # the copy the subprocess used: the same cache
    logged = {}  # what the example's loaders recorded: (step, rank) -> fingerprint
    for log in (record / "fingerprints").glob("*.jsonl"):
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if "step" in entry:
                logged[(entry["step"], entry["rank"])] = entry["fingerprint"]
    assert {rank for _, rank in logged} == {0, 1, 2, 3}  # every rank of the world read

    listing = dsinspect(commands[0], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"│ exp1 +│ demo-text@\w+ +│ 4 +│ 1 +│ 0\.\.\d+ .*│ none +│", listing.stdout), listing.stdout

    check = dsinspect(commands[1], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith(f"ok: {len(logged)} log lines")

    done = dsinspect(commands[2], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    assert "step 3 (epoch 0) · rank 3 of 4 · batch 8 · demo-text@" in done.stdout
    assert "shard:row" in done.stdout and "tokens [" in done.stdout  # provenance and the fields' previews
    assert f"fingerprint (stored)       rank 3: {logged[(3, 3)]}" in done.stdout  # the batch the loader read

    from dsinspect.inspect.runs import default_runs_dir, run_names
    # what the web app's Run page lists: run_names of <catalog>/runs, its catalog the default one
    assert run_names(default_runs_dir(str(bundled_catalog_path()))) == ["demo-learner", "exp1"]  # beside the demo's

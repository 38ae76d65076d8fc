"""A new version ingested into an existing dataset keeps its parent's key, so `diff` matches by key.
From the shell: a lost key's exit 2 from a real process, the other commands in this process
(tests/cli_inprocess.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inprocess import run_cli

from dsinspect.errors import UserError
from dsinspect.loaders.diff.compare import diff
from dsinspect.loaders.ingest import ingest
from dsinspect.loaders.store.catalog import Catalog

REPO = Path(__file__).resolve().parents[1]


def run(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS`, run in this process with no DSINSPECT_CATALOG: a CompletedProcess."""
    return run_cli("--catalog", catalog, *args)


def run_process(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS` in a real process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSINSPECT_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(catalog), *args], capture_output=True,
                          text=True, env=env, timeout=180)


def write_rows(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows_v1():
    return [{"id": i, "text": f"document {i}", "score": i / 4} for i in range(300)]


def rows_v2():
    """v1 with rows 10-19 edited and moved to the end: by row hash 10 removed + 10 added, by key 10 changed."""
    rows = rows_v1()
    edited = [{**r, "text": r["text"] + " (edited)"} for r in rows[10:20]]
    return rows[:10] + rows[20:] + edited


def one_line_error(done, *fragments):
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture()
def v1(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    ingest(catalog, str(write_rows(tmp_path / "v1" / "a.jsonl", rows_v1())), "docs", key="id", engine="inline",
           tags=["v1"])
    return catalog


def test_a_next_version_keeps_the_key_and_diff_matches_by_it(v1, tmp_path):
    v2 = ingest(v1, str(write_rows(tmp_path / "v2" / "a.jsonl", rows_v2())), "docs", engine="inline")
    assert v2.manifest.key == "id" and v2.manifest.meta["parent"] == v1.resolve("docs@v1").id
    rows = diff(v1.resolve("docs@v1"), v2, v1, limit=None).rows
    assert rows.matched_by == "key" and rows.key == "id"
    assert (rows.counts["changed"], rows.counts["added"], rows.counts["removed"]) == (10, 0, 0)


def test_no_key_declares_none_and_an_explicit_key_wins(v1, tmp_path):
    src = write_rows(tmp_path / "v2" / "a.jsonl", rows_v2())
    assert ingest(v1, str(src), "docs", engine="inline", no_key=True).manifest.key is None
    src3 = write_rows(tmp_path / "v3" / "a.jsonl", [{**r, "uid": r["id"] + 1000} for r in rows_v2()])
    assert ingest(v1, str(src3), "docs", engine="inline", key="uid").manifest.key == "uid"


def test_a_source_that_cannot_keep_the_key_is_refused_and_publishes_nothing(v1, tmp_path):
    missing = write_rows(tmp_path / "m" / "a.jsonl", [{"doc": r["id"], "text": r["text"]} for r in rows_v1()])
    with pytest.raises(UserError,
                       match=r"key 'id' \(int64\), but the source has no such field: pass --key .* --no-key"):
        ingest(v1, str(missing), "docs", engine="inline")
    retyped = write_rows(tmp_path / "t" / "a.jsonl", [{**r, "id": str(r["id"])} for r in rows_v1()])
    with pytest.raises(UserError, match="holds it as string"):
        ingest(v1, str(retyped), "docs", engine="inline")
    assert len(v1.version_ids("docs")) == 1


@pytest.mark.slow
def test_from_the_shell_no_key_is_a_flag_and_a_lost_key_is_one_line_exit_2(v1, tmp_path):
    src = write_rows(tmp_path / "v2" / "a.jsonl", [{"doc": r["id"], "text": r["text"]} for r in rows_v2()])
    one_line_error(run_process("ingest", str(src), "docs", "--engine", "inline", catalog=v1.url),  # as a shell sees it
                   "key 'id'", "--no-key")
    one_line_error(run("ingest", str(src), "docs", "--key", "doc", "--no-key", catalog=v1.url), "--no-key")
    done = run("ingest", str(src), "docs", "--engine", "inline", "--no-key", "--json", catalog=v1.url)
    assert done.returncode == 0, done.stderr
    assert v1.resolve("docs").manifest.key is None and len(v1.version_ids("docs")) == 2

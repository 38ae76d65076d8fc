"""`dsinspect ingest`, `export` and `verify --engine` as a person and a script use them. Most commands run
in this process (tests/cli_inprocess.py); real processes where the process is the subject: exit 2 as a
shell sees it (a part that fails, a bad export), `verify --engine pool` (its workers started from a
dsinspect process), and the command list of `--help` (click fits it to the width of the process's stdout)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inprocess import run_cli
from ingest_helpers import write_jsonl_source

from dsinspect.demo.tokenizer import tokenizer_bytes

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # ingests, and some tests start real dsinspect processes


def run(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS`, run in this process with no DSINSPECT_CATALOG: a CompletedProcess."""
    return run_cli("--catalog", catalog, *args)


def run_process(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS` in a real process, importing dsinspect from this tree."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSINSPECT_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(catalog), *args], capture_output=True,
                          text=True, env=env, timeout=180)


def one_line_error(done, code, *fragments):
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_jsonl_source(tmp_path_factory.mktemp("src"), files=3, rows=400)


@pytest.fixture(scope="module")
def ingested(source, tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    (root / "tok.json").write_bytes(tokenizer_bytes())
    catalog = root / "catalog"
    done = run("ingest", str(source), "docs", "--engine", "inline", "--role", "score=scalar", "--key", "id",
               "--tokenizer", str(root / "tok.json"), "--tag", "v1", "-m", "first import", "--json", catalog=catalog)
    assert done.returncode == 0, done.stderr
    return catalog, json.loads(done.stdout)


def test_ingest_json_reports_the_version_and_the_work(ingested):
    catalog, result = ingested
    assert result["rows"] == 1200 and result["parts"] == 3 and result["parts_converted"] == 3
    assert result["engine"] == "inline" and result["seconds"] > 0 and len(result["id"]) == 64
    info = json.loads(run("info", "docs@v1", "--json", catalog=catalog).stdout)
    assert info["id"] == result["id"] and info["key"] == "id" and info["message"] == "first import"
    roles = {f["name"]: f["role"] for f in info["schema"]}
    assert roles == {"id": "scalar", "text": "text", "input_ids": "tokens", "score": "scalar"}


def test_ingest_prints_a_summary_for_people(source, tmp_path):
    done = run("ingest", str(source), "docs", "--engine", "inline", catalog=tmp_path / "c")
    assert done.returncode == 0, done.stderr
    assert "1,200 rows" in done.stdout and "input_ids: tokens" in done.stdout


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "webdataset"])
def test_export_then_ingest_from_the_shell_gives_the_same_id(ingested, tmp_path, fmt):
    catalog, result = ingested
    dest = tmp_path / "out"
    done = run("export", "docs@v1", str(dest), "--format", fmt, "--json", catalog=catalog)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == fmt
    again = run("ingest", str(dest), "docs", "--engine", "inline", "--json", catalog=tmp_path / "fresh")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["id"] == result["id"]


@pytest.mark.slow
def test_verify_with_the_pool_prints_what_serial_verify_prints(ingested):
    catalog, _ = ingested
    serial = run("verify", "docs", "--json", catalog=catalog)
    pooled = run_process("verify", "docs", "--engine", "pool", "--workers", "2", "--json", catalog=catalog)
    assert serial.returncode == pooled.returncode == 0
    assert json.loads(pooled.stdout) == json.loads(serial.stdout)


def test_user_mistakes_are_one_line_and_exit_2(source, tmp_path):
    catalog = tmp_path / "c"
    one_line_error(run("ingest", str(tmp_path / "nope.jsonl"), "x", catalog=catalog), 2, "nope.jsonl")
    one_line_error(run("ingest", str(source), "x", "--kind", "csv", catalog=catalog), 2, "unknown source kind 'csv'")
    one_line_error(run("ingest", str(source), "x", "--role", "score", catalog=catalog), 2, "--role 'score'")
    one_line_error(run("ingest", str(source), "x", "--role", "nofield=text", "--engine", "inline", catalog=catalog),
                   2, "no field 'nofield'")
    (tmp_path / "bad-tok.json").write_text("{}")
    one_line_error(run("ingest", str(source), "x", "--tokenizer", str(tmp_path / "bad-tok.json"), "--engine", "inline",
                       catalog=catalog), 2, "bad-tok.json", "not a Hugging Face tokenizer.json")
    one_line_error(run_process("export", "x", str(tmp_path / "o"), "--format", "parquet", catalog=catalog), 2,
                   "'x'")  # exit 2 as a shell sees it
    assert not (catalog / "datasets" / "x" / "versions").exists()


def test_a_failing_part_names_its_file_and_line_and_publishes_nothing(tmp_path):
    src = write_jsonl_source(tmp_path / "src", files=2, rows=1100)
    with open(src / "part-001.jsonl", "a") as f:
        f.write('{"id": 1, "text": 5, "input_ids": [], "score": 1.0}\n')
    catalog = tmp_path / "c"
    one_line_error(run_process("ingest", str(src), "x", "--engine", "inline", catalog=catalog), 2,
                   "part 1", "part-001.jsonl:1101")  # exit 2 as a shell sees it
    assert not (catalog / "datasets" / "x" / "versions").exists()


def test_help_names_every_source_kind_and_the_key_rule(tmp_path):
    from dsinspect.loaders.ingest.sources import KINDS

    listing = run_process("--help", catalog=tmp_path).stdout  # as wide as a piped process's command list
    lines = listing.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("ingest "))
    line = " ".join(lines[at:at + 2])  # the command list's entry (it may wrap once)
    text = " ".join(run("ingest", "--help", catalog=tmp_path).stdout.split())
    summary = text.split("Options:")[0]
    assert all(kind in line for kind in KINDS), line
    assert "WebDataset" in summary and "MDS" in summary and "files" in summary, summary
    assert "Default: the key of NAME's latest version; else a files folder's name, an `id` field, or the one " \
           "`*_id` field, if no value repeats; else none." in text

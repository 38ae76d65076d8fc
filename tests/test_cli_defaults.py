"""With no catalog named, dsinspect reads the sample catalog from a copy in the user's cache and
writes nothing into the install tree: reading leaves its derived values and run records in the copy,
and a command that adds user data (ingest, tag) asks for a catalog instead."""

from __future__ import annotations

import json

import pytest
from ingest_helpers import write_jsonl_source

from dsinspect.defaults import BUNDLED, bundled_catalog_path, cache_dir


def tree(root):
    """Every path under `root` with its size: what a command may not change."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


@pytest.fixture
def no_catalog_named(monkeypatch):
    monkeypatch.delenv("DSINSPECT_CATALOG", raising=False)


def test_the_sample_catalog_is_a_copy_in_the_cache(no_catalog_named):
    path = bundled_catalog_path()
    assert path.is_relative_to(cache_dir()) and not path.is_relative_to(BUNDLED)
    assert {p.name for p in (path / "datasets").iterdir()} == {p.name for p in (BUNDLED / "datasets").iterdir()}
    assert bundled_catalog_path() == path  # copied once


def test_reading_the_sample_catalog_writes_nothing_into_the_install_tree(cli, no_catalog_named):
    before = tree(BUNDLED)
    code, out, err = cli("query", "demo-text@v1", "--where", "tokens_len > 5", "--json")  # makes derived values
    assert code == 0, err
    assert json.loads(out)["rows"]
    assert tree(BUNDLED) == before
    assert list((bundled_catalog_path() / "datasets" / "demo-text").glob("derived/*/*.parquet"))


@pytest.mark.parametrize("argv", [("ingest", "SOURCE", "mine"), ("tag", "demo-text@v1", "mine")])
def test_writing_needs_a_named_catalog(cli, no_catalog_named, tmp_path, argv):
    source = write_jsonl_source(tmp_path / "src", files=1, rows=5)
    before = tree(BUNDLED), tree(bundled_catalog_path())
    code, out, err = cli(*[str(source) if a == "SOURCE" else a for a in argv])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--catalog URL or DSINSPECT_CATALOG" in err, err
    assert (tree(BUNDLED), tree(bundled_catalog_path())) == before


def test_writing_to_a_catalog_from_the_environment(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("DSINSPECT_CATALOG", str(tmp_path / "mine"))
    source = write_jsonl_source(tmp_path / "src", files=1, rows=5)
    code, _, err = cli("ingest", str(source), "docs", "--engine", "inline")
    assert code == 0, err
    assert (tmp_path / "mine" / "datasets" / "docs" / "versions").is_dir()

"""Without --key, ingest infers one (an `id`-like field, a media folder's `name`) when every row holds
a value for it and no value repeats, so `diff` of two versions reports a changed row as a change
of its fields, not as one row removed and another added."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ingest_fixtures import image_bytes

from dsinspect.loaders.diff.compare import diff
from dsinspect.loaders.ingest import ingest
from dsinspect.loaders.store.catalog import Catalog

REPO = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def docs(n: int = 40) -> list[dict]:
    return [{"id": i, "text": f"document {i}", "score": i / 4} for i in range(n)]


def run(*args, catalog):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSINSPECT_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(catalog), *args], capture_output=True,
                          text=True, env=env, timeout=180)


def test_an_id_field_becomes_the_key_and_diff_names_the_changed_field(tmp_path):
    catalog = Catalog(str(tmp_path / "cat"))
    v1 = ingest(catalog, str(write_jsonl(tmp_path / "v1" / "a.jsonl", docs())), "docs", engine="inline", tags=["v1"])
    assert v1.manifest.key == "id"
    changed = docs()
    changed[7] = {**changed[7], "text": "document seven, edited"}
    v2 = ingest(catalog, str(write_jsonl(tmp_path / "v2" / "a.jsonl", changed)), "docs", engine="inline", tags=["v2"])
    assert v2.manifest.key == "id"  # kept from v1
    rows = diff(v1, v2).rows
    assert (rows.counts["changed"], rows.counts["added"], rows.counts["removed"]) == (1, 0, 0)
    assert rows.changed[0]["key"] == 7 and rows.changed[0]["fields"] == ["text"]
    done = run("diff", "docs@v1", "docs@v2", catalog=catalog.url)
    assert done.returncode == 0, done.stderr
    assert "(matched by key 'id'): 0 added, 0 removed, 1 changed" in done.stdout, done.stdout
    assert "fields changed: text (1)" in done.stdout and "seven, edited" in done.stdout, done.stdout


def test_a_media_folders_name_becomes_the_key_and_diff_shows_the_image_change(tmp_path):
    catalog = Catalog(str(tmp_path / "cat"))
    for version, seed in (("v1", 3), ("v2", 9)):
        for i, s in enumerate([1, 2, seed, 4]):
            path = tmp_path / version / f"img-{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(image_bytes("PNG", s))
        ingest(catalog, str(tmp_path / version), "pics", engine="inline", tags=[version])
    v1, v2 = catalog.resolve("pics@v1"), catalog.resolve("pics@v2")
    assert v1.manifest.key == v2.manifest.key == "name"
    rows = diff(v1, v2).rows
    assert (rows.counts["changed"], rows.counts["added"], rows.counts["removed"]) == (1, 0, 0)
    change = rows.changed[0]
    assert change["key"] == "img-2.png" and change["fields"] == ["data"]
    assert change["details"]["data"]["pixels_changed"] > 0


@pytest.mark.parametrize("rows, key", [
    ([{"doc_id": f"d{i}", "user_id": i % 3} for i in range(6)], None),  # two *_id fields: no guess
    ([{"doc_id": f"d{i}", "text": "x"} for i in range(6)], "doc_id"),
    ([{"ID": i} for i in range(6)], "ID"),
    ([{"id": i % 5} for i in range(6)], None),  # repeats
    ([{"id": i if i != 3 else None} for i in range(6)], None),  # a null
    ([{"id": float(i)} for i in range(6)], None),  # neither integers nor strings
])
def test_the_inferred_key_is_conservative(tmp_path, rows, key):
    src = write_jsonl(tmp_path / "src" / "a.jsonl", rows)
    assert ingest(Catalog(str(tmp_path / "cat")), str(src), "d", engine="inline").manifest.key == key


def test_uniqueness_is_checked_over_every_part_and_the_flags_still_win(tmp_path):
    write_jsonl(tmp_path / "dup" / "a.jsonl", docs(5))
    write_jsonl(tmp_path / "dup" / "b.jsonl", docs(10)[5:])
    assert ingest(Catalog(str(tmp_path / "c0")), str(tmp_path / "dup"), "d", engine="inline").manifest.key == "id"
    write_jsonl(tmp_path / "dup" / "b.jsonl", docs(5))  # each file unique on its own, not together
    assert ingest(Catalog(str(tmp_path / "c1")), str(tmp_path / "dup"), "d", engine="inline").manifest.key is None
    src = write_jsonl(tmp_path / "ok" / "a.jsonl", [{**r, "uid": r["id"]} for r in docs()])
    assert ingest(Catalog(str(tmp_path / "c2")), str(src), "d", engine="inline", no_key=True).manifest.key is None
    assert ingest(Catalog(str(tmp_path / "c3")), str(src), "d", engine="inline", key="uid").manifest.key == "uid"


def test_a_next_version_keeps_its_parents_key_or_after_a_keyless_one_infers_its_own(tmp_path):
    catalog = Catalog(str(tmp_path / "cat"))
    src = write_jsonl(tmp_path / "a" / "a.jsonl", [{**r, "uid": r["id"]} for r in docs()])
    assert ingest(catalog, str(src), "d", engine="inline", key="uid").manifest.key == "uid"
    assert ingest(catalog, str(src), "d", engine="inline", message="again").manifest.key == "uid"  # the parent's
    assert ingest(catalog, str(src), "d", engine="inline", no_key=True).manifest.key is None
    assert ingest(catalog, str(src), "d", engine="inline", message="after").manifest.key == "id"  # inferred anew

"""`ingest --tokenizer cl100k_base|o200k_base` stores the encoding in the catalog, content-addressed,
so every viewer decodes the ids without a flag and without the package data; verify re-hashes it and
export → ingest carries it along."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsinspect.inspect import open_address, tiktoken_encoding
from dsinspect.inspect.vocab import tiktoken_document
from dsinspect.loaders.ingest import ingest
from dsinspect.loaders.ingest.export import export_version
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.verify import verify_version

REPO = Path(__file__).resolve().parents[1]
TEXTS = ["Hello, world!", "héllo wörld — 日本語のテキスト 🙂", "def f(x):\n    return x * 2\n<|endoftext|>"]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def write_ids(directory: Path, encoding: str) -> tuple[Path, list[list[int]]]:
    enc = tiktoken_encoding(encoding)
    ids = [enc.encode(t, allowed_special="all") for t in TEXTS]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "a.jsonl").write_text("".join(json.dumps({"n": i, "input_ids": x}) + "\n" for i, x in enumerate(ids)))
    return directory, ids


def run(*args, catalog, env_extra=None):
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    env.pop("DSINSPECT_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(catalog), *args], capture_output=True,
                          text=True, env=env, timeout=180)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_ingest_stores_the_encoding_by_content_and_viewers_decode_without_a_flag(tmp_path, encoding):
    src, ids = write_ids(tmp_path / "src", encoding)
    catalog = Catalog(str(tmp_path / "catalog"))
    version = ingest(catalog, str(src), "toks", tokenizer=encoding, engine="inline")
    option = version.manifest.field("input_ids").options["tokenizer"]
    document = tiktoken_document(encoding)
    assert option == {"kind": "tiktoken", "name": encoding, "blob": hashlib.sha256(document).hexdigest()}
    assert catalog.read_blob("toks", option["blob"], ".json") == document
    enc = tiktoken_encoding(encoding)
    for i, expected in enumerate(ids):
        view = open_address(catalog, f"toks:{i}").view("input_ids")
        assert view.tokenizer == encoding and view.ids == expected
        assert view.data == enc.decode_bytes(expected) and view.text == enc.decode(expected)
        pieces = view.page(0).pieces
        assert [p.data for p in pieces] == [enc.decode_single_token_bytes(t) for t in expected]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("tk")
    src, ids = write_ids(root / "src", "cl100k_base")
    catalog = Catalog(str(root / "catalog"))
    return catalog, ingest(catalog, str(src), "toks", tokenizer="cl100k_base", engine="inline"), ids


@pytest.mark.slow
def test_show_decodes_from_the_catalog_alone_without_the_package_data(stored, tmp_path):
    catalog, _, ids = stored
    fake = tmp_path / "nopkg" / "bpe_openai"  # a bpe-openai without its data files: only the stored blob can decode
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    done = run("show", "toks:1", "--json", catalog=catalog.url,
               env_extra={"PYTHONPATH": f"{tmp_path / 'nopkg'}{os.pathsep}{REPO}"})
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)["fields"][1]["view"]
    enc = tiktoken_encoding("cl100k_base")
    assert view["tokenizer"] == "cl100k_base" and not view["findings"]
    assert [bytes.fromhex(p["bytes"]) for p in view["first_page"]["pieces"]] == \
        [enc.decode_single_token_bytes(t) for t in ids[1]]
    assert view["text"] == TEXTS[1]


def test_verify_rehashes_the_stored_encoding(stored, tmp_path):
    catalog, version, _ = stored
    assert verify_version(version).ok
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(catalog.url, copy)
    sha = version.manifest.field("input_ids").options["tokenizer"]["blob"]
    blob = copy / "datasets" / "toks" / "blobs" / f"{sha}.json"
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))
    report = verify_version(Catalog(str(copy)).resolve("toks"))
    assert not report.ok and any("tokenizer" in p and sha in p for p in report.problems), report.problems


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_then_ingest_carries_the_encoding(stored, tmp_path, fmt):
    catalog, version, ids = stored
    export_version(version, fmt, str(tmp_path / "out"))
    fresh = Catalog(str(tmp_path / "fresh"))
    again = ingest(fresh, str(tmp_path / "out"), "toks", engine="inline")
    assert again.id == version.id
    view = open_address(fresh, "toks:2").view("input_ids")
    assert view.tokenizer == "cl100k_base" and view.data == tiktoken_encoding("cl100k_base").decode_bytes(ids[2])

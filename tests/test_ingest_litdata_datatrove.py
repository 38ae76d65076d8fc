"""LitData's TokensLoader chunks (dsinspect/loaders/ingest/litdata_tokens.py) and datatrove's `.ds` files
(dsinspect/loaders/ingest/datatrove.py), each written by its own writer and read back by its own reader in
one subprocess (tests/token_peers_worker.py, PYTHONPATH=$DSINSPECT_PEERS, as tests/test_peer_sequences.py
runs its peers): ingested with no flags, the rows concatenated are the stream the peer's reader reads
(sha256), every row is one item LitData's optimize wrote / one document datatrove's index ends, and
datatrove's loss masks come through bit for bit. Hand-written files (no peer needed): the layouts as
documented, parts cut inside a file, and hostile inputs: one line naming file and field, exit 2, no
version."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from cli_inprocess import run_cli
from ingest_helpers import ingest_with_cli as ingest
from ingest_helpers import sha
from ingest_helpers import version_rows as rows
from peer_workers import peers_dir

from dsinspect.loaders.ingest import datatrove as datatrove_module
from dsinspect.loaders.ingest.sources import detect_source, open_source

HERE = Path(__file__).resolve().parent


def by_file(table: pa.Table) -> dict[str, list[int]]:
    """Row numbers of each file, in row order; each file's documents numbered 0, 1, … and `id` FILE:DOCUMENT."""
    out: dict[str, list[int]] = {}
    for i, (key, name, document) in enumerate(zip(*(table.column(c).to_pylist() for c in ("id", "file", "document")))):
        assert key == f"{name}:{document}" and document == len(out.setdefault(name, []))
        out[name].append(i)
    return out


def stream(table: pa.Table, picked: list[int] | None = None) -> np.ndarray:
    """The tokens of the rows (all, or those `picked`) end to end, as stored."""
    tokens = table.column("tokens") if picked is None else table.column("tokens").take(picked)
    return tokens.combine_chunks().flatten().to_numpy()


def lengths(table: pa.Table, picked: list[int]) -> np.ndarray:
    return np.array([len(t) for t in table.column("tokens").take(picked).to_pylist()])


def refused(tmp_path: Path, source, *fragments: str, kind: str | None = None) -> str:
    """Ingest `source`: exit 2, one line naming every fragment, no version written."""
    catalog = tmp_path / "catalog"
    done = run_cli("--catalog", catalog, "ingest", source, "x", "--engine", "inline",
                   *(["--kind", kind] if kind else []))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("dsinspect: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not (catalog / "datasets" / "x" / "versions").exists() or \
        not any((catalog / "datasets" / "x" / "versions").iterdir())
    return lines[0]


# -- the peers' own writers and readers ----------------------------------------------------------

@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    """The worker's corpora (one run for both libraries) and what the peers' readers read from them."""
    where = str(peers_dir("litdata/__init__.py", "litdata"))
    peers_dir("datatrove/__init__.py", "datatrove")
    work = tmp_path_factory.mktemp("token-peers")
    done = subprocess.run([sys.executable, "-W", "ignore", str(HERE / "token_peers_worker.py"), str(work)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": where}, timeout=300)
    assert done.returncode == 0, f"the peers' worker failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    with np.load(work / "peers.npz") as data:
        result = {k: data[k] for k in data.files}
    for module in result["module_files"]:  # the pinned peers, not other copies
        assert Path(str(module)).is_relative_to(Path(where)), module
    return work, result


@pytest.fixture(scope="module")
def ingested(peers):
    """Every corpus the worker wrote, ingested with no flags into one catalog."""
    work, _ = peers
    names = ("lit_int32", "lit_uint16", "dt_u16", "dt_u32")
    return {name: ingest(work / "catalog", work / name, name) for name in names}


@pytest.mark.parametrize("name, dtype", [("lit_int32", "int32"), ("lit_uint16", "uint16")])
def test_litdata_optimize_output_is_one_row_per_item_its_stream_bit_exact(peers, ingested, name, dtype):
    work, peer = peers
    assert detect_source(str(work / name)).kind == "litdata"
    version = ingested[name]
    table = rows(version)
    assert str(version.manifest.schema.field("tokens").type.value_type) == dtype
    assert {f.name: f.role.value for f in version.fields}["tokens"] == "tokens"
    ours = stream(table)
    assert ours.dtype == np.dtype(dtype) and peer[f"{name}/stream"].dtype == np.dtype(dtype)
    # the stream LitData's own reader reads (TokensLoader, block_size 1: every token of every chunk)
    assert sha(ours.tobytes()) == sha(peer[f"{name}/stream"].tobytes()) == sha(peer[f"{name}/items"].tobytes())
    # a row per item the optimize function yielded, in order
    assert [len(t) for t in table.column("tokens").to_pylist()] == peer[f"{name}/item_lengths"].tolist()
    # rows grouped as index.json lists its chunks
    index = json.loads((work / name / "index.json").read_text())
    files = by_file(table)
    assert list(files) == [c["filename"] for c in index["chunks"]]
    assert name == "lit_int32" or list(files) != sorted(files)  # 12 chunks: chunk-0-10 after chunk-0-9
    for chunk in index["chunks"]:
        picked = files[chunk["filename"]]
        assert len(picked) == chunk["chunk_size"] and lengths(table, picked).sum() == chunk["dim"]
        data = (work / name / chunk["filename"]).read_bytes()
        assert stream(table, picked).astype(f"<{np.dtype(dtype).str[1:]}").tobytes() == \
            data[4 * (chunk["chunk_size"] + 2):]


@pytest.mark.parametrize("name, dtype", [("dt_u16", "uint16"), ("dt_u32", "uint32")])
def test_datatrove_tokenizer_output_is_one_row_per_document_bit_exact(peers, ingested, name, dtype):
    work, peer = peers
    assert detect_source(str(work / name)).kind == "datatrove"
    table = rows(ingested[name])
    assert str(ingested[name].manifest.schema.field("tokens").type.value_type) == dtype
    files = by_file(table)
    assert list(files) == peer[f"{name}/files"].tolist() and len(files) == (5 if name == "dt_u16" else 1)
    for file, picked in files.items():
        ours = stream(table, picked)
        theirs = peer[f"{name}/{file}/stream"]  # DatatroveFileDataset's one window over the whole file
        assert ours.dtype == np.dtype(dtype) and np.array_equal(ours, theirs)
        assert sha(ours.astype(f"<{np.dtype(dtype).str[1:]}").tobytes()) == sha((work / name / file).read_bytes())
        starts = np.concatenate([[0], np.cumsum(lengths(table, picked))[:-1]])
        assert np.array_equal(starts, peer[f"{name}/{file}/starts"])  # where its reader's positions restart
    # the documents are the tokenizer step's, each with its EOS (shuffled: compared as a multiset)
    docs = np.split(peer[f"{name}/doc_tokens"], np.cumsum(peer[f"{name}/doc_lengths"])[:-1])
    assert sorted(map(tuple, docs)) == sorted(map(tuple, table.column("tokens").to_pylist()))
    assert all(d[-1] == 0 for d in docs)  # <eos> is id 0


def test_datatrove_loss_masks_are_the_ds_loss_bytes_document_by_document(peers, ingested):
    work, peer = peers
    version = ingested["dt_u16"]
    table = rows(version)
    assert {f.name: f.role.value for f in version.fields}["loss_mask"] == "array"
    assert "loss_mask" not in rows(ingested["dt_u32"]).column_names  # written without save_loss_metadata
    masks = table.column("loss_mask").to_pylist()
    assert [len(m) for m in masks] == [len(t) for t in table.column("tokens").to_pylist()]
    for file, picked in by_file(table).items():
        ours = np.concatenate([masks[i] for i in picked]).astype(np.uint8)
        assert sha(ours.tobytes()) == sha((work / "dt_u16" / (file + ".loss")).read_bytes())
    # each document's mask is the one the tokenizer step computed for it (some tokens masked out)
    name = "dt_u16"
    docs = np.split(peer[f"{name}/doc_tokens"], np.cumsum(peer[f"{name}/doc_lengths"])[:-1])
    loss = np.split(peer[f"{name}/doc_loss"], np.cumsum(peer[f"{name}/doc_lengths"])[:-1])
    expected = sorted((tuple(d), tuple(m.astype(bool))) for d, m in zip(docs, loss))
    assert sorted(zip(map(tuple, table.column("tokens").to_pylist()), map(tuple, masks))) == expected
    assert 0 < sum(not v for m in masks for v in m) < sum(len(m) for m in masks)


def test_datatrove_token_size_without_metadata_and_a_pool_give_the_same_version(peers, ingested, tmp_path):
    """The token size from the sizes alone (no .ds.metadata), and parts converted in spawned workers
    from nothing but their JSON: the same rows, so the same version id."""
    work, _ = peers
    bare = tmp_path / "bare"
    shutil.copytree(work / "dt_u32", bare, ignore=shutil.ignore_patterns("*.metadata"))
    assert not list(bare.glob("*.metadata"))
    assert ingest(tmp_path / "c1", bare, "dt_u32").id == ingested["dt_u32"].id
    done = run_cli("--catalog", tmp_path / "c2", "ingest", work / "dt_u16", "dt_u16", "--engine", "pool",
                   "--workers", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["engine"] == "pool" and json.loads(done.stdout)["id"] == ingested["dt_u16"].id


# -- hand-written files, as the writers lay them out ----------------------------------------------

def write_litdata(folder: Path, items: list[np.ndarray], per_chunk: int, data_format: str = "no_header_numpy:5",
                  **config) -> None:
    """`items` in chunks of `per_chunk`, laid out as LitData's BinaryWriter writes TokensLoader chunks."""
    folder.mkdir(parents=True)
    chunks = []
    for c in range(0, len(items), per_chunk):
        group = items[c:c + per_chunk]
        header = 4 * (len(group) + 2)
        offsets = header + np.concatenate([[0], np.cumsum([i.nbytes for i in group])])
        data = np.uint32(len(group)).tobytes() + offsets.astype("<u4").tobytes() + b"".join(i.tobytes() for i in group)
        name = f"chunk-0-{c // per_chunk}.bin"
        (folder / name).write_bytes(data)
        chunks.append({"chunk_bytes": len(data), "chunk_size": len(group), "dim": int(sum(len(i) for i in group)),
                       "filename": name})
    settings = {"chunk_bytes": None, "chunk_size": 4096, "compression": None, "data_format": [data_format],
                "encryption": None, "item_loader": "TokensLoader", **config}
    (folder / "index.json").write_text(json.dumps({"chunks": chunks, "config": settings}))


def write_datatrove(folder: Path, name: str, docs: list[np.ndarray], token_size: int = 2, loss: bool = False,
                    metadata: bool = True) -> Path:
    """`docs` as datatrove's TokenizedFile writes them: NAME.ds, NAME.ds.index (uint64 ends, in tokens),
    NAME.ds.loss (a byte per token: here 0 on each document's first token), NAME.ds.metadata."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tokens = np.concatenate(docs).astype("<u2" if token_size == 2 else "<u4") if docs else np.zeros(0, "<u2")
    path.write_bytes(tokens.tobytes())
    Path(f"{path}.index").write_bytes(np.cumsum([len(d) for d in docs], dtype=np.uint64).astype("<u8").tobytes())
    if loss:
        Path(f"{path}.loss").write_bytes(b"".join(bytes([0] + [1] * (len(d) - 1))[:len(d)] for d in docs))
    if metadata:
        Path(f"{path}.metadata").write_text(f"tok.json|{token_size}\n{len(tokens)}\n{len(tokens)} T")
    return path


def docs_of(seed: int, count: int, high: int = 60_000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, high, int(rng.integers(1, 50))) for _ in range(count)]


def read_all(url) -> tuple[list, pa.Table]:
    src = open_source(detect_source(str(url)))
    parts = src.parts()
    return parts, pa.Table.from_batches([b for p in parts for b in src.read(p)], schema=src.schema())


def test_hand_written_files_read_back_from_every_url_form(tmp_path):
    items = [d.astype(np.uint16) for d in docs_of(1, 7)] + [np.zeros(0, np.uint16)]  # an empty item, last
    write_litdata(tmp_path / "lit", items, per_chunk=3)
    parts, table = read_all(tmp_path / "lit")
    assert len(parts) == 3 and table.column("tokens").to_pylist() == [i.tolist() for i in items]
    assert table.column("id").to_pylist()[-2:] == ["chunk-0-2.bin:0", "chunk-0-2.bin:1"]

    docs = [d.astype(np.uint32) + 70_000 for d in docs_of(2, 5)] + [np.zeros(0, np.uint32)]
    write_datatrove(tmp_path / "dt" / "sub", "a.ds", docs, token_size=4, loss=True)
    write_datatrove(tmp_path / "dt", "b.ds", [np.array([5, 6], np.uint32)], token_size=4, loss=True)
    _, table = read_all(tmp_path / "dt")
    assert table.column("file").to_pylist() == ["b.ds"] + ["sub/a.ds"] * 6
    assert table.column("tokens").to_pylist()[1:] == [d.tolist() for d in docs]
    assert table.column("loss_mask").to_pylist()[0] == [False, True]
    for url in (tmp_path / "dt" / "sub" / "a.ds.index", tmp_path / "dt" / "sub" / "a.ds.loss",
                tmp_path / "dt" / "sub" / "a.ds", f"{tmp_path}/dt/sub/*.ds"):
        _, one = read_all(url)
        assert one.column("file").to_pylist() == ["a.ds"] * 6  # named from the URL's own directory
        assert one.drop_columns(["id", "file"]).equals(table.slice(1).drop_columns(["id", "file"]))


def test_over_fsspec_memory_as_over_a_folder(tmp_path):
    import fsspec

    write_litdata(tmp_path / "lit", [d.astype(np.uint16) for d in docs_of(6, 7)], per_chunk=3)
    write_datatrove(tmp_path / "dt", "a.ds", docs_of(7, 5), loss=True)
    memory, root = fsspec.filesystem("memory"), f"/litdata-datatrove-{os.getpid()}"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            memory.pipe(f"{root}/{path.relative_to(tmp_path)}", path.read_bytes())
    try:
        for name in ("lit", "dt", "dt/a.ds.index"):
            assert read_all(f"memory://{root}/{name}")[1].equals(read_all(tmp_path / name)[1])
    finally:
        memory.rm(root, recursive=True)


def test_a_large_ds_converts_in_parts_of_whole_documents(tmp_path, monkeypatch):
    docs = docs_of(3, 300)
    write_datatrove(tmp_path / "dt", "a.ds", docs, loss=True)
    _, whole = read_all(tmp_path / "dt")
    monkeypatch.setattr(datatrove_module, "PART_BYTES", 200)  # about 3 documents of 1-49 tokens
    monkeypatch.setattr(datatrove_module, "PART_DOCUMENTS", 4)
    monkeypatch.setattr(datatrove_module, "_CHUNK", 7)  # the index checked 7 entries at a time
    parts, table = read_all(tmp_path / "dt")
    ranges = [p.options["documents"] for p in parts]
    assert len(parts) >= 75 and ranges[0][0] == 0 and ranges[-1][1] == 300
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    ends = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    for (a, b), part in zip(ranges, parts):
        assert 1 <= b - a <= 4 and part.size == 2 * (ends[b] - ends[a]) and (b - a == 1 or part.size <= 200)
    assert table.equals(whole)


# -- hostile inputs: one line naming the file and the field, exit 2, no version --------------------

def lit_source(tmp_path: Path, **config) -> Path:
    write_litdata(tmp_path / "lit", [d.astype(np.uint16) for d in docs_of(4, 6)], per_chunk=3, **config)
    return tmp_path / "lit"


def index_of(folder: Path) -> dict:
    return json.loads((folder / "index.json").read_text())


def set_chunk(folder: Path, **entries) -> None:
    index = index_of(folder)
    index["chunks"][1].update(entries)
    (folder / "index.json").write_text(json.dumps(index))


def patch_header(path: Path, position: int, value: int) -> None:
    """Set the u32 at `position` of a chunk's header (0: the item count, 1 + i: item i's offset)."""
    data = bytearray(path.read_bytes())
    data[4 * position:4 * position + 4] = np.uint32(value).tobytes()
    path.write_bytes(bytes(data))


def test_litdata_truncated_chunk(tmp_path):
    lit = lit_source(tmp_path)
    (lit / "chunk-0-1.bin").write_bytes((lit / "chunk-0-1.bin").read_bytes()[:-3])
    refused(tmp_path, lit, "chunk-0-1.bin", "chunks[1]", "dim")


def test_litdata_declared_counts_of_2_to_the_60_allocate_nothing(tmp_path):
    lit = lit_source(tmp_path)
    entry = index_of(lit)["chunks"][1]
    set_chunk(lit, chunk_size=2 ** 60)
    refused(tmp_path, lit, "chunk-0-1.bin", "chunks[1].chunk_size", "1,152,921,504,606,846,976")
    set_chunk(lit, **{**entry, "dim": 2 ** 60})
    refused(tmp_path, lit, "chunk-0-1.bin", "chunks[1].dim", "1,152,921,504,606,846,976")
    set_chunk(lit, **entry)
    patch_header(lit / "chunk-0-1.bin", 0, 2 ** 32 - 1)  # the chunk's own count, unlike its index entry
    refused(tmp_path, lit, "chunk-0-1.bin", "header declares 4,294,967,295 items", "chunk_size 3")


@pytest.mark.parametrize("position, value, fragment", [
    (4, 10 ** 6, "end at token"),  # the last item's end past the end of the chunk
    (2, 2 ** 32 - 2, "decrease at document 1"),  # item 1's end past the end, then item 2's before it
    (3, 20, "decrease at document 1"),  # item 2 starting before item 1 does
    (2, 21, "is not on a uint16 token"),  # an odd byte for 2-byte tokens
])
def test_litdata_item_offsets_past_the_end_or_decreasing(tmp_path, position, value, fragment):
    lit = lit_source(tmp_path)
    patch_header(lit / "chunk-0-1.bin", position, value)
    refused(tmp_path, lit, "chunk-0-1.bin", fragment)


@pytest.mark.parametrize("config, fragment", [
    ({"data_format": "no_header_numpy:9"}, "holds float32 values, not integer tokens"),
    ({"data_format": "no_header_tensor:19"}, "holds bool values"),
    ({"data_format": "no_header_tensor:99"}, "names no dtype LitData has"),
    ({"data_format": "numpy:5"}, "names no dtype LitData has"),
    ({"compression": "zstd"}, "config.compression is 'zstd'"),
    ({"encryption": {"algorithm": "fernet"}}, "config.encryption"),
    ({"item_loader": "PyTreeLoader"}, "config.item_loader is 'PyTreeLoader'"),
])
def test_litdata_config_it_cannot_read(tmp_path, config, fragment):
    refused(tmp_path, lit_source(tmp_path, **config), "index.json", fragment)


def dt_source(tmp_path: Path, **kw) -> Path:
    write_datatrove(tmp_path / "dt", "00000_shuffled.ds", docs_of(5, 20), **kw)
    return tmp_path / "dt"


def put_end(path: Path, document: int, value: int) -> None:
    ends = np.fromfile(path, "<u8")
    ends[document] = value
    ends.tofile(path)


@pytest.mark.parametrize("metadata", [True, False])
def test_datatrove_truncated_ds(tmp_path, metadata):
    dt = dt_source(tmp_path, metadata=metadata)
    ds = dt / "00000_shuffled.ds"
    ds.write_bytes(ds.read_bytes()[:-6])  # three tokens short
    if metadata:
        refused(tmp_path, dt, "00000_shuffled.ds:", "its .ds.metadata says")
    else:  # the size over the last end is no token size: the index cannot be this file's
        refused(tmp_path, dt, "00000_shuffled.ds:", "bytes a token, where datatrove writes 2 or 4")


@pytest.mark.parametrize("document, value, fragment", [
    (19, 10 ** 9, "document 19 ends at token 1,000,000,000, past the"),
    (3, 2 ** 60, "document 3 ends at token 1,152,921,504,606,846,976, past the"),
    (3, 2 ** 64 - 1, "document 3 ends at token 18,446,744,073,709,551,615, past the"),
    (5, 1, "document 5 ends at token 1, before the one before it"),
])
def test_datatrove_index_past_the_end_or_decreasing(tmp_path, document, value, fragment):
    dt = dt_source(tmp_path)
    put_end(dt / "00000_shuffled.ds.index", document, value)
    refused(tmp_path, dt, "00000_shuffled.ds.index", fragment)


def test_datatrove_index_ending_early_or_cut_mid_entry(tmp_path):
    dt = dt_source(tmp_path)
    index = dt / "00000_shuffled.ds.index"
    whole = index.read_bytes()
    index.write_bytes(whole[:-8])  # the last document's end lost
    refused(tmp_path, dt, "00000_shuffled.ds.index", "the last document ends at token")
    index.write_bytes(whole[:-3])
    refused(tmp_path, dt, "00000_shuffled.ds.index", "not whole uint64 document ends")


def test_datatrove_token_size_that_does_not_exist(tmp_path):
    dt = dt_source(tmp_path)
    (dt / "00000_shuffled.ds.metadata").write_text("tok.json|3\n100\n100 T")
    refused(tmp_path, dt, "00000_shuffled.ds.metadata", "token size '3' (line 1")
    (dt / "00000_shuffled.ds.metadata").unlink()
    ds = dt / "00000_shuffled.ds"
    tokens = np.frombuffer(ds.read_bytes(), "<u2")
    ds.write_bytes(tokens.astype("<u4").tobytes()[:len(tokens) * 3])  # 3 bytes for each token the index ends at
    refused(tmp_path, dt, "00000_shuffled.ds:", "3 bytes a token")


def test_datatrove_loss_mask_of_the_wrong_length_or_not_0_or_1(tmp_path):
    dt = dt_source(tmp_path, loss=True)
    loss = dt / "00000_shuffled.ds.loss"
    whole = loss.read_bytes()
    loss.write_bytes(whole[:-1])
    refused(tmp_path, dt, "00000_shuffled.ds.loss", "one per token")
    loss.write_bytes(whole[:40] + b"\x07" + whole[41:])
    refused(tmp_path, dt, "00000_shuffled.ds.loss", "byte 40 is 7")


def test_datatrove_files_that_do_not_belong_together(tmp_path):
    dt = dt_source(tmp_path)
    (dt / "00000_shuffled.ds.index").rename(dt / "elsewhere.index")
    refused(tmp_path, dt, "00000_shuffled.ds:", "no 00000_shuffled.ds.index beside it")
    (dt / "elsewhere.index").rename(dt / "00000_shuffled.ds.index")
    write_datatrove(dt, "00001_shuffled.ds", [np.array([1, 2, 3])], token_size=4)
    refused(tmp_path, dt, "00000_shuffled.ds holds 2-byte tokens", "00001_shuffled.ds 4-byte")
    write_datatrove(dt, "00001_shuffled.ds", [np.array([1, 2, 3])], loss=True)
    refused(tmp_path, dt, "00000_shuffled.ds:", "no .ds.loss beside it")

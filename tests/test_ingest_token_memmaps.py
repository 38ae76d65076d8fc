"""OLMo-core's token memmaps and nanoGPT's `train.bin` (dsinspect/loaders/ingest/token_memmaps.py), each
written by its own writer: OLMo-core's `write_array_to_disk` and `write_document_indices` in a subprocess
(tests/olmo_memmap_worker.py, PYTHONPATH=$DSINSPECT_PEERS, as tests/test_peer_sequences.py runs it), and
nanoGPT's layout as its data/openwebtext and data/shakespeare prepare.py write it (numpy: nanoGPT is no
package). Each is ingested with no flags: the rows concatenated are the file (sha256) and every document
ends where the writer ended it; the export is the writer's own bytes, OLMo-core's readers read the same
documents from it, and its re-ingest is the same version id. Hostile inputs: one line, exit 2, no version."""

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from cli_inprocess import run_cli
from ingest_helpers import ingest_with_cli as ingest
from ingest_helpers import sha
from ingest_helpers import version_rows as rows
from peer_workers import PeerWorker, peers_dir

from dsinspect.demo.tokenizer import tokenizer_bytes
from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.ingest.source import SourceSpec
from dsinspect.loaders.ingest.token_memmaps import OlmoSource
from dsinspect.loaders.store.catalog import Catalog

EOT = 50256  # GPT-2's end of text: nanoGPT's openwebtext prepare.py appends it to each document
NEOX_EOS = 50279  # OLMo-core's TokenizerConfig.gpt_neox_olmo_dolma_v1_5(): uint16 files
DOLMA2_EOS = 100257  # TokenizerConfig.dolma2(): ids past 65,535, uint32 files
L = 64  # OLMo-core's NumpyFSLDataset sequence length in the read-back


def make_documents(seed: int, count: int, high: int) -> list[np.ndarray]:
    """`count` documents of 1-400 tokens (a tenth of length 1), ids below `high` (so no EOS inside)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 401, count)
    lengths[rng.permutation(count)[:count // 10]] = 1
    return [rng.integers(0, high, int(n)) for n in lengths]


def export(version, dest: Path, fmt: str) -> dict:
    done = run_cli("--catalog", version.catalog.url, "export", version.address, dest, "--format", fmt, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def by_file(version) -> dict[str, list[np.ndarray]]:
    """Each file's documents as the version holds them, in document order."""
    table = rows(version)
    out: dict[str, list[np.ndarray]] = {}
    for i, (name, document, tokens) in enumerate(zip(*(table.column(c).to_pylist()
                                                       for c in ("file", "document", "tokens")))):
        assert table.column("id")[i].as_py() == f"{name}:{document}"
        assert document == len(out.setdefault(name, []))
        out[name].append(np.array(tokens))
    return out


def bounds(documents: list[np.ndarray]) -> list[tuple[int, int]]:
    ends = np.cumsum([len(d) for d in documents])
    return list(zip([0, *ends[:-1].tolist()], ends.tolist()))


def assert_stream(version, files: dict[str, Path], dtype: str) -> dict[str, list[np.ndarray]]:
    """Each file's rows concatenated, as the stored type, are the file's bytes."""
    assert str(version.manifest.schema.field("tokens").type.value_type) == dtype
    docs = by_file(version)
    assert sorted(docs) == sorted(files)
    for name, path in files.items():
        assert sha(np.concatenate(docs[name]).astype(np.dtype(dtype).newbyteorder("<")).tobytes()) == \
            sha(path.read_bytes())
    return docs


# -- nanoGPT -----------------------------------------------------------------------------------

def write_openwebtext(path: Path, documents: list[np.ndarray]) -> None:
    """As data/openwebtext/prepare.py writes a split: each document's GPT-2 ids and EOT, into an np.memmap
    of uint16 filled in batches."""
    ids = [np.append(d, EOT) for d in documents]
    arr = np.memmap(path, dtype=np.uint16, mode="w+", shape=(np.sum([len(i) for i in ids], dtype=np.uint64),))
    idx = 0
    for batch in np.array_split(np.arange(len(ids)), 8):
        arr_batch = np.concatenate([ids[i] for i in batch])
        arr[idx:idx + len(arr_batch)] = arr_batch
        idx += len(arr_batch)
    arr.flush()
    del arr


@pytest.fixture(scope="module")
def nanogpt(tmp_path_factory):
    """openwebtext's train.bin and val.bin, shakespeare's (no EOT) train.bin and val.bin, each ingested
    with no flags (openwebtext also with --tokenizer), exported and re-ingested into another catalog."""
    root = tmp_path_factory.mktemp("nanogpt")
    (root / "tok.json").write_bytes(tokenizer_bytes())
    owt, shakespeare = root / "owt", root / "shakespeare"
    owt.mkdir()
    shakespeare.mkdir()
    docs = {"train.bin": make_documents(1, 400, EOT), "val.bin": make_documents(2, 30, EOT)}
    for name, documents in docs.items():
        write_openwebtext(owt / name, documents)
        np.array(np.concatenate(documents)[:5000], dtype=np.uint16).tofile(shakespeare / name)
    catalog = root / "catalog"
    out = {"root": root, "docs": docs, "owt": owt, "shakespeare": shakespeare,
           "versions": {"owt": ingest(catalog, owt, "owt"), "shakespeare": ingest(catalog, shakespeare, "shakespeare"),
                        "owt-tok": ingest(catalog, owt, "owt-tok", "--tokenizer", root / "tok.json")}}
    out["exports"] = {name: export(v, root / f"export-{name}", "nanogpt") for name, v in out["versions"].items()}
    out["again"] = {name: ingest(root / f"again-{name}", root / f"export-{name}", name) for name in out["versions"]}
    return out


def test_nanogpt_bins_ingest_with_no_flags_a_row_per_document_ending_at_its_eot(nanogpt):
    version = nanogpt["versions"]["owt"]
    docs = assert_stream(version, {n: nanogpt["owt"] / n for n in nanogpt["docs"]}, "uint16")
    for name, written in nanogpt["docs"].items():
        assert [d.tolist() for d in docs[name]] == [np.append(d, EOT).tolist() for d in written]
    assert version.manifest.key == "id"
    assert {f.name: f.role.value for f in version.fields}["tokens"] == "tokens"


def test_a_nanogpt_bin_without_eot_is_one_document(nanogpt):
    docs = assert_stream(nanogpt["versions"]["shakespeare"],
                         {n: nanogpt["shakespeare"] / n for n in nanogpt["docs"]}, "uint16")
    assert {name: len(d) for name, d in docs.items()} == {"train.bin": 1, "val.bin": 1}


def test_nanogpt_export_is_the_bytes_prepare_py_wrote_and_reingests_to_the_same_id(nanogpt):
    for name, summary in nanogpt["exports"].items():
        source = nanogpt["shakespeare" if name == "shakespeare" else "owt"]
        dest = nanogpt["root"] / f"export-{name}"
        for file in ("train.bin", "val.bin"):
            assert (dest / file).read_bytes() == (source / file).read_bytes(), (name, file)
        assert summary["sidecar"] and summary["dtype"] == "uint16"
        again, version = nanogpt["again"][name], nanogpt["versions"][name]
        assert again.id == version.id, name
    tokenizer = nanogpt["again"]["owt-tok"].manifest.field("tokens").options["tokenizer"]
    assert tokenizer == nanogpt["versions"]["owt-tok"].manifest.field("tokens").options["tokenizer"]
    assert "blob" in tokenizer


# -- OLMo-core ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def olmo(tmp_path_factory, nanogpt):
    """OLMo-core writes a uint16 corpus of two files (GPT-NeoX ids, EOS 50279; the first with 2,000
    documents, more than one batch of the export) and a uint32 one (dolma2 ids, EOS 100257), each with
    its metadata; dsinspect ingests them with no flags (the uint32 one with
    --tokenizer), exports them, nanoGPT's openwebtext and a JSON Lines version of int64 tokens without
    EOS as OLMo files; OLMo-core reads sources and exports back; the exports are re-ingested."""
    worker = PeerWorker("olmo_memmap_worker.py", peers_dir("olmo_core/__init__.py", "ai2-olmo-core"),
                        tmp_path_factory.mktemp("olmo-log") / "worker.log")
    root = tmp_path_factory.mktemp("olmo")
    (root / "tok.json").write_bytes(tokenizer_bytes())
    corpora = {"olmo16": ("uint16", NEOX_EOS, {"part-0-00000.npy": make_documents(3, 2000, NEOX_EOS),
                                                "part-0-00001.npy": make_documents(4, 200, NEOX_EOS)}),
               "olmo32": ("uint32", DOLMA2_EOS, {"part-0-00000.npy": make_documents(5, 300, DOLMA2_EOS)})}
    try:
        for corpus, (dtype, eos, files) in corpora.items():
            for name, documents in files.items():
                npz = root / f"{corpus}-{name}.npz"
                np.savez(npz, tokens=np.concatenate(documents), lengths=[len(d) for d in documents])
                worker.ask(op="write", documents=npz, path=root / corpus / name, dtype=dtype, eos=eos)
        with open(root / "input_ids.jsonl", "w") as f:
            for d in make_documents(6, 100, 60000):
                f.write(json.dumps({"input_ids": d.tolist()}) + "\n")
        catalog = root / "catalog"
        versions = {"olmo16": ingest(catalog, root / "olmo16", "olmo16"),
                    "olmo32": ingest(catalog, root / "olmo32", "olmo32", "--tokenizer", root / "tok.json"),
                    "owt": nanogpt["versions"]["owt"],
                    "jsonl": ingest(catalog, root / "input_ids.jsonl", "jsonl")}
        exports = {name: export(v, root / f"export-{name}", "olmo") for name, v in versions.items()}
        reads = {}
        for where, dtype, eos in [(root / "olmo16", "uint16", NEOX_EOS), (root / "olmo32", "uint32", DOLMA2_EOS),
                                  *((root / f"export-{n}", exports[n]["dtype"], None) for n in versions)]:
            for path in sorted(where.glob("*.npy")):
                out = root / "reads" / f"{where.name}-{path.stem}.npz"
                out.parent.mkdir(exist_ok=True)
                worker.ask(op="read", path=path, dtype=dtype, eos=eos, length=L, out=out)
                reads[where.name, path.name] = dict(np.load(out))
    finally:
        worker.close()
    again = {n: ingest(root / f"again-{n}", root / f"export-{n}", n) for n in ("olmo16", "olmo32")}
    return {"root": root, "corpora": corpora, "versions": versions, "exports": exports, "reads": reads,
            "again": again}


def test_olmo_core_files_ingest_with_no_flags_bit_for_bit_at_its_document_boundaries(olmo):
    for corpus, (dtype, eos, files) in olmo["corpora"].items():
        docs = assert_stream(olmo["versions"][corpus], {n: olmo["root"] / corpus / n for n in files}, dtype)
        for name, written in files.items():
            assert [d.tolist() for d in docs[name]] == [np.append(d, eos).tolist() for d in written]
            read = olmo["reads"][corpus, name]
            assert bounds(docs[name]) == [tuple(b) for b in read["metadata"].tolist()] == \
                [tuple(b) for b in read["array"].tolist()]


def test_olmo_export_is_olmo_cores_own_bytes(olmo):
    for corpus, (_, _, files) in olmo["corpora"].items():
        dest = olmo["root"] / f"export-{corpus}"
        sidecar = {"_dsinspect.export", "_blobs"} if corpus == "olmo32" else {"_dsinspect.export"}  # + tokenizer
        assert {p.name for p in dest.iterdir()} == sidecar | {n for name in files
                                                              for n in (name, name.replace(".npy", ".csv.gz"))}
        for name in files:
            assert (dest / name).read_bytes() == (olmo["root"] / corpus / name).read_bytes()
            ours = (dest / name.replace(".npy", ".csv.gz")).read_bytes()
            theirs = (olmo["root"] / corpus / name.replace(".npy", ".csv.gz")).read_bytes()
            assert ours[4:8] == bytes(4) and ours[:4] + ours[8:] == theirs[:4] + theirs[8:]  # all but gzip's time


def test_olmo_core_reads_each_export_as_the_versions_documents(olmo):
    """Its metadata path for every export (the JSON Lines documents hold no EOS: only the metadata can
    say where they end), its EOS path where the documents end in one, and NumpyFSLDataset's items."""
    for name, version in olmo["versions"].items():
        dest = olmo["root"] / f"export-{name}"
        if name == "jsonl":
            documents = {"part-00000.npy": [np.array(t) for t in rows(version).column("input_ids").to_pylist()]}
            assert olmo["exports"][name]["dtype"] == "uint16" and not olmo["exports"][name]["sidecar"]
            assert not (dest / "_dsinspect.export").exists()  # its fields are not what a re-ingest gives
        else:
            documents = {n.replace(".bin", ".npy"): d for n, d in by_file(version).items()}
            assert olmo["exports"][name]["sidecar"] == (name != "owt")  # train.bin became train.npy
        assert sorted(p.name for p in dest.glob("*.npy")) == sorted(documents)
        for file, docs in documents.items():
            read = olmo["reads"][dest.name, file]
            assert [tuple(b) for b in read["metadata"].tolist()] == bounds(docs)
            stream = np.concatenate(docs)
            assert read["items"].tolist() == stream[:len(stream) // L * L].reshape(-1, L).tolist()
            assert sha(stream.astype(olmo["exports"][name]["dtype"]).tobytes()) == sha((dest / file).read_bytes())


def test_olmo_export_reingests_to_the_same_version_id_with_its_tokenizer(olmo):
    for name in ("olmo16", "olmo32"):
        assert olmo["again"][name].id == olmo["versions"][name].id
    options = olmo["again"]["olmo32"].manifest.field("tokens").options
    assert options == olmo["versions"]["olmo32"].manifest.field("tokens").options and "blob" in options["tokenizer"]


# -- hostile inputs ----------------------------------------------------------------------------

def write_olmo(path: Path, documents: list[np.ndarray], dtype: str, eos: int, metadata: str | None = None):
    """An OLMo token file as OLMo-core's writer lays it out (raw tokens, EOS after each document: the
    layout the worker's tests pin), and its metadata: the documents' `start,end` lines unless `metadata`
    gives the text."""
    docs = [np.append(d, eos) for d in documents]
    np.concatenate(docs).astype(dtype).tofile(path)
    if metadata is None:
        metadata = "".join(f"{a},{b}\n" for a, b in bounds(docs))
    with gzip.open(path.with_suffix(".csv.gz"), "wt") as f:
        f.write(metadata)


def llmc_file(path: Path) -> None:
    """llm.c's data file: 256 int32 (magic, version 1, token count), then uint16 tokens."""
    tokens = np.array([EOT, 10, 11, EOT, 12], np.uint16)
    header = np.zeros(256, np.int32)
    header[:3] = 20240520, 1, len(tokens)
    path.write_bytes(header.tobytes() + tokens.tobytes())


TEN = [np.arange(10) + 1] * 10  # ten documents of 10 tokens, 11 with their EOS (0): 110 tokens


def ten(metadata: str | None = None, dtype: str = "uint16"):
    """A writer of the ten documents as an OLMo file, with the metadata text given (default: theirs)."""
    return lambda p: write_olmo(p, TEN, dtype, 0, metadata)


def olmo_then(then):
    """The ten documents and their metadata, then `then(path)` damages something."""
    return lambda p: (write_olmo(p, TEN, "uint16", 0), then(p))


HOSTILE = {  # file name, writer, what the error line says
    "nanogpt-half-token": ("train.bin", lambda p: p.write_bytes(bytes(1001)), "1,001 bytes are not whole uint16"),
    "nanogpt-empty": ("train.bin", lambda p: p.write_bytes(b""), "empty token file"),
    "llm.c": ("train.bin", llmc_file, "llm.c's token file"),
    "olmo-empty": ("a.npy", lambda p: p.write_bytes(b""), "empty token file"),
    "npy-header": ("a.npy", lambda p: np.save(p, np.arange(100, dtype=np.uint16)), "a NumPy .npy with a header"),
    "no-metadata": ("a.npy", lambda p: np.arange(100, dtype=np.uint16).tofile(p), "write_document_indices"),
    "olmo-half-token": ("a.npy", olmo_then(lambda p: p.write_bytes(p.read_bytes()[:-1])),
                        "end at token 110, which does not make"),
    "past-the-end": ("a.npy", ten("0,55\n55,150\n"), "end at token 150"),
    "past-2^60": ("a.npy", ten(f"0,{2 ** 60}\n"), "end at token 1,152,921,504,606,846,976"),
    "decreasing": ("a.npy", ten("0,55\n55,50\n50,110\n"), "line 2: document 55,50 ends before it starts"),
    "not-summing": ("a.npy", ten("0,50\n55,110\n"), "line 2: document 55,110 does not start where the last ended (50)"),
    "short": ("a.npy", ten("0,55\n55,100\n"), "end at token 100"),
    "not-gzip": ("a.npy", olmo_then(lambda p: p.with_suffix(".csv.gz").write_text("0,110\n")),
                 "not a Dolma/OLMo metadata file"),
    "not-numbers": ("a.npy", ten("0,start\n"), "not a Dolma/OLMo metadata file"),
    "no-documents": ("a.npy", ten(""), "lists no documents"),
    "mixed-widths": ("a.npy", olmo_then(lambda p: ten(dtype="uint32")(p.with_name("b.npy"))),
                     "hold uint16 and uint32 tokens"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_damaged_token_file_is_one_line_exit_2_and_no_version(case, tmp_path, cli):
    name, write, fragment = HOSTILE[case]
    source = tmp_path / "src"
    source.mkdir()
    write(source / name)
    code, out, err = cli("--catalog", tmp_path / "catalog", "ingest", source, "corpus")
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and fragment in err and str(source) in err, err
    assert Catalog(str(tmp_path / "catalog")).datasets() == []


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A uint32 version (OLMo's layout written in-test) whose document 3 is the first with a token past uint16."""
    root = tmp_path_factory.mktemp("wide")
    (root / "src").mkdir()
    docs = [np.arange(5) + 1 for _ in range(6)]
    docs[3] = docs[3] + 70_000
    docs[5] = docs[5] + 80_000
    write_olmo(root / "src" / "a.npy", docs, "uint32", 0)
    return ingest(root / "catalog", root / "src", "wide"), root


def test_a_token_too_wide_for_nanogpt_is_refused_naming_its_document_and_leaves_no_file(wide, cli):
    version, root = wide
    code, out, err = cli("--catalog", root / "catalog", "export", version.address, root / "out", "--format", "nanogpt")
    assert code == 2, (out, err)
    assert err.strip().splitlines() == [f"dsinspect: error: {version.address}:3: holds token 70001; nanoGPT's .bin "
                                        "stores uint16 (0..65,535)"]
    assert list((root / "out").iterdir()) == []
    assert version.row(3)["id"] == "a.npy:3"


def test_an_olmo_export_keeps_the_uint32_it_was_given(wide, tmp_path):
    version, _ = wide
    summary = export(version, tmp_path / "out", "olmo")
    assert summary["dtype"] == "uint32" and summary["sidecar"]
    assert (tmp_path / "out" / "a.npy").read_bytes() == (wide[1] / "src" / "a.npy").read_bytes()


def document_version(catalog: Catalog, runs: list[tuple[str, list[list[int]]]], numbers: list[int] | None = None,
                     ids: list[str] | None = None):
    """A version in the rows an ingest makes of each (file, documents) run, numbered 0.. in each file
    unless `numbers` (their `document`) or `ids` say otherwise."""
    files = [f for f, documents in runs for _ in documents]
    numbers = [n for _, documents in runs for n in range(len(documents))] if numbers is None else numbers
    fields = [Field("id", pa.string(), "scalar", nullable=False),
              Field("tokens", pa.list_(pa.uint16()), "tokens", nullable=False),
              Field("file", pa.string(), "scalar", nullable=False),
              Field("document", pa.int64(), "scalar", nullable=False)]
    table = pa.table({"id": ids or [f"{f}:{n}" for f, n in zip(files, numbers)],
                      "tokens": pa.array([d for _, documents in runs for d in documents], pa.list_(pa.uint16())),
                      "file": files, "document": numbers},
                     schema=pa.schema([pa.field(f.name, f.type, nullable=False) for f in fields]))
    return catalog.write_version("docs", table, fields, key="id")


SIDECAR_CASES = {  # documents, their `document` numbers and ids, whether a re-ingest gives them back: nanogpt, olmo
    "each ends with its EOT, the file's last need not": ([[1, EOT], [2, 3, EOT], [4]], None, None, True, True),
    "one without an EOT before another": ([[1], [2, EOT]], None, None, False, True),
    "an EOT inside a document": ([[1, EOT, 2, EOT], [3, EOT]], None, None, False, True),
    "an empty document": ([[1, EOT], [], [2, EOT]], None, None, False, True),
    "documents numbered otherwise": ([[1, EOT], [2, EOT]], [0, 2], ["x:0", "x:1"], False, False),
    "ids otherwise": ([[1, EOT], [2, EOT]], None, ["x:0", "x:9"], False, False),
}


@pytest.mark.parametrize("fmt", ["nanogpt", "olmo"])
@pytest.mark.parametrize("case", SIDECAR_CASES)
def test_the_sidecar_is_written_only_when_the_reingest_gives_every_row_back(case, fmt, tmp_path):
    """The export is the documents' tokens as stored, nothing added; its sidecar (fields, roles, key)
    only when re-ingesting the export gives back the same version; without one, the re-ingest's rows are
    what the format says (nanoGPT: split at each EOT)."""
    documents, numbers, ids, *exact = SIDECAR_CASES[case]
    name = "train.bin" if fmt == "nanogpt" else "train.npy"
    ids = ids and [i.replace("x", name) for i in ids]
    version = document_version(Catalog(str(tmp_path / "catalog")), [(name, documents)], numbers, ids)
    summary = export(version, tmp_path / "out", fmt)
    assert (tmp_path / "out" / name).read_bytes() == np.concatenate(documents).astype("<u2").tobytes()
    assert summary["sidecar"] == exact[fmt == "olmo"] == (tmp_path / "out" / "_dsinspect.export").exists()
    again = ingest(tmp_path / "again", tmp_path / "out", "docs")
    assert (again.id == version.id) == exact[fmt == "olmo"]
    if fmt == "nanogpt":
        stream = np.concatenate(documents).tolist()
        ends = [i + 1 for i, t in enumerate(stream) if t == EOT]
        cut = [0, *ends] + ([len(stream)] if ends[-1] != len(stream) else [])
        assert rows(again).column("tokens").to_pylist() == [stream[a:b] for a, b in zip(cut, cut[1:])]


def test_files_out_of_their_listing_order_export_without_a_sidecar(tmp_path):
    """A re-ingest lists the files sorted, so b.npy's rows before a.npy's come back after them."""
    runs = [("b.npy", [[5, 0], [6, 0]]), ("a.npy", [[7, 0]])]
    version = document_version(Catalog(str(tmp_path / "catalog")), runs)
    summary = export(version, tmp_path / "out", "olmo")
    assert not summary["sidecar"] and sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "a.csv.gz", "a.npy", "b.csv.gz", "b.npy"]
    assert rows(ingest(tmp_path / "again", tmp_path / "out", "docs")).column("id").to_pylist() == [
        "a.npy:0", "b.npy:0", "b.npy:1"]


def test_without_metadata_the_options_name_the_width_and_eos_and_a_width_given_is_checked(tmp_path, cli):
    """Options `dtype` and `eos` (`--option` from the shell) read a file without metadata by its EOS;
    with metadata, `dtype` settles a width the sizes alone would take for another (110 uint16 tokens
    whose metadata ends at 55 read as 55 uint32)."""
    (tmp_path / "bare").mkdir()
    write_olmo(tmp_path / "bare" / "a.npy", TEN, "uint16", 0)
    (tmp_path / "bare" / "a.csv.gz").unlink()
    catalog = Catalog(str(tmp_path / "catalog"))
    code, _, err = cli("ingest", tmp_path / "bare", "bare", "--catalog", catalog.url)
    assert code == 2 and "or pass --option dtype=... --option eos=..." in err, err
    code, out, err = cli("ingest", tmp_path / "bare", "bare", "--option", "dtype=uint16", "--option", "eos=0",
                         "--engine", "inline", "--json", "--catalog", catalog.url)
    assert code == 0, err
    version = catalog.resolve("bare")
    assert rows(version).column("tokens").to_pylist() == [[*d.tolist(), 0] for d in TEN]
    code, _, err = cli("ingest", tmp_path / "bare", "bare", "--option", "dtype", "--catalog", catalog.url)
    assert code == 2 and "--option 'dtype': expected KEY=VALUE" in err, err
    (tmp_path / "half").mkdir()
    write_olmo(tmp_path / "half" / "a.npy", TEN, "uint16", 0, "0,11\n11,55\n")
    assert str(version.manifest.schema.field("tokens").type.value_type) == "uint16"
    assert rows(ingest(tmp_path / "guessed", tmp_path / "half", "half")).column("tokens").type.value_type == pa.uint32()
    half = OlmoSource(SourceSpec("olmo", str(tmp_path / "half"), {"dtype": "uint16"}))
    with pytest.raises(UserError, match="end at token 55; the token file holds 110 uint16 tokens"):
        half.parts()  # the plan refuses it, before any part converts


def test_a_metadata_file_rewritten_after_the_plan_is_refused_by_the_part(tmp_path):
    write_olmo(tmp_path / "a.npy", TEN, "uint16", 0)
    source = OlmoSource(SourceSpec("olmo", str(tmp_path)))
    [part] = source.parts()
    with gzip.open(tmp_path / "a.csv.gz", "wt") as f:
        f.write("0,11\n11,55\n")
    with pytest.raises(UserError, match="end at token 55; the token file holds 110 uint16 tokens"):
        list(source.read(part))


@pytest.mark.parametrize("tokens, outcome", [([[1, 2], [200]], "uint8"), ([[1], [70_000, 3]], "uint32"),
                                             ([[1, 2], [5, -3]], "row 1: token -3 is negative")])
def test_signed_tokens_export_to_olmo_as_the_narrowest_type_holding_them(tokens, outcome, tmp_path, cli):
    (tmp_path / "ids.jsonl").write_text("".join(json.dumps({"input_ids": t}) + "\n" for t in tokens))
    version = ingest(tmp_path / "catalog", tmp_path / "ids.jsonl", "ids")
    assert str(version.manifest.schema.field("input_ids").type.value_type) == "int64"
    code, out, err = cli("--catalog", tmp_path / "catalog", "export", "ids", tmp_path / "out", "--format", "olmo",
                         "--json")
    if outcome.startswith("uint"):
        assert code == 0 and json.loads(out)["dtype"] == outcome, err
        assert (tmp_path / "out" / "part-00000.npy").read_bytes() == np.concatenate(tokens).astype(outcome).tobytes()
    else:
        assert code == 2 and err.strip().splitlines() == [
            f"dsinspect: error: {version.address}:1: token -3 is negative; OLMo stores unsigned tokens"]
        assert not (tmp_path / "out").exists()

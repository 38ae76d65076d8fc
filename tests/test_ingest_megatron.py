"""Megatron-core indexed datasets (dsinspect/loaders/ingest/megatron.py) against Megatron-core's own writer
and reader: `IndexedDatasetBuilder` and `IndexedDataset` in one subprocess (tests/megatron_worker.py,
PYTHONPATH=$DSINSPECT_PEERS, as tests/test_peer_sequences.py runs them). The builder writes uint16, int32
and multimodal uint8 corpora with every shape it makes (documents of one sequence, of several by
`add_item` + `end_document` or by one `add_document`, empty sequences, documents without a sequence);
each is ingested with no flags: the rows concatenated are the `.bin` (sha256), every sequence and
document boundary is the reader's; the export is the builder's bytes, the reader reads the same sequences
and documents from it, and its re-ingest is the same version id. Hostile indexes, written by hand: one
line naming the file and the field, exit 2, no version, nothing allocated for a declared 2^60."""

import json
import struct
import tracemalloc
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
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field
from dsinspect.loaders.ingest import megatron, run_ingest
from dsinspect.loaders.ingest.megatron import MegatronSource
from dsinspect.loaders.ingest.source import SourceSpec
from dsinspect.loaders.store.catalog import Catalog

MAGIC = b"MMIDIDX\x00\x00"


class MegatronWorker(PeerWorker):
    """tests/megatron_worker.py, started once."""

    def __init__(self, where: Path, log: Path):
        super().__init__("megatron_worker.py", where, log)

    def read(self, prefix: Path, out: Path, multimodal: bool = False) -> dict:
        self.ask(op="read", prefix=prefix, multimodal=multimodal, out=out)
        with np.load(out) as data:
            return {k: data[k] for k in data.files}


def make_corpus(seed: int, dtype: str, documents: int, multimodal: bool = False) -> dict:
    """Documents of every shape IndexedDatasetBuilder makes, as the worker's `build` takes them: an empty
    document first, then documents of one sequence (some empty), of three or four sequences by add_item +
    end_document (one of them empty), of two by one add_document, and one more empty document mid-way;
    tokens over the type's whole range, its least and greatest values included."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    shapes = [(True, [])]
    for d in range(documents):
        several = (True, [int(n) for n in rng.integers(1, 30, 3)] + [0])
        shapes.append({3: several, 5: (False, [17, 40]), 6: (False, [0]), 7: (False, [] if d == 15 else [1])}.get(
            d % 8, (False, [int(rng.integers(1, 300))])))
    lengths = [n for _, ns in shapes for n in ns]
    tokens = rng.integers(info.min, info.max, sum(lengths), endpoint=True, dtype=np.int64)
    tokens[:2] = info.min, info.max
    modes = rng.integers(0, 3, len(lengths)) if multimodal else np.zeros(len(lengths))
    return {"tokens": tokens, "lengths": np.array(lengths, np.int64), "modes": modes.astype(np.int8),
            "documents": np.array([len(ns) for _, ns in shapes]), "items": np.array([items for items, _ in shapes])}


def export(version, dest: Path) -> dict:
    done = run_cli("--catalog", version.catalog.url, "export", version.address, dest, "--format", "megatron", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The builder's corpora: u16/corpus (uint16), i32/a and i32/b (int32, a directory of two pairs), mm/mm
    (multimodal uint8), flat/built (int32, a sequence a document, the tokens a uint32 version holds);
    each ingested with no flags (u16 also with --tokenizer), exported, the exports read by Megatron and
    re-ingested into other catalogs."""
    worker = MegatronWorker(peers_dir("megatron/core/__init__.py", "megatron-core"),
                            tmp_path_factory.mktemp("megatron-log") / "worker.log")
    root = tmp_path_factory.mktemp("megatron")
    (root / "tok.json").write_bytes(tokenizer_bytes())
    corpora = {"u16/corpus": ("uint16", make_corpus(1, "uint16", 60)), "i32/a": ("int32", make_corpus(2, "int32", 40)),
               "i32/b": ("int32", make_corpus(3, "int32", 9)), "mm/mm": ("uint8", make_corpus(4, "uint8", 30, True))}
    flat = {"tokens": np.arange(1, 301) * 7_000_000, "lengths": np.array([100, 0, 150, 50]),
            "documents": np.ones(4, np.int64), "items": np.zeros(4, bool), "modes": np.zeros(4, np.int8)}
    corpora["flat/built"] = ("int32", flat)
    try:
        for prefix, (dtype, corpus) in corpora.items():
            (root / prefix).parent.mkdir(exist_ok=True)
            np.savez(root / f"{prefix}.npz", **corpus)
            worker.ask(op="build", corpus=root / f"{prefix}.npz", prefix=root / prefix, dtype=dtype,
                       multimodal=prefix == "mm/mm")
        read = {p: worker.read(root / p, root / f"{p}.read.npz", p == "mm/mm") for p in corpora}
        catalog = root / "catalog"
        versions = {"u16": ingest(catalog, root / "u16", "u16"), "i32": ingest(catalog, root / "i32", "i32"),
                    "mm": ingest(catalog, root / "mm" / "mm.idx", "mm"),
                    "u16-tok": ingest(catalog, root / "u16", "u16-tok", "--tokenizer", root / "tok.json")}
        exports = {name: export(v, root / f"export-{name}") for name, v in versions.items()}
        reread = {p: worker.read(root / f"export-{p.split('/')[0]}" / p.split("/")[1], root / f"{p}.export.npz",
                                 p == "mm/mm") for p in corpora if p != "flat/built"}
        again = {name: ingest(root / f"again-{name}", root / f"export-{name}", name) for name in versions}
        yield {"root": root, "corpora": corpora, "read": read, "versions": versions, "exports": exports,
               "reread": reread, "again": again}
    finally:
        worker.close()


def files_of(version) -> dict[str, pa.Table]:
    table = rows(version)
    names = table.column("file").to_pylist()
    return {n: table.filter(pa.array([m == n for m in names])) for n in dict.fromkeys(names)}


def document_indices(starts: list[int]) -> list[int]:
    """Megatron's document_indices from each sequence's megatron_starts."""
    return [i for i, s in enumerate(starts) for _ in range(s)] + [len(starts)]


@pytest.mark.parametrize("name, prefixes", [("u16", ["u16/corpus"]), ("i32", ["i32/a", "i32/b"]), ("mm", ["mm/mm"])])
def test_a_row_per_sequence_bit_exact_with_the_bin_and_every_boundary_the_readers(built, name, prefixes):
    version = built["versions"][name]
    assert version.manifest.key == "id"
    dtype = built["corpora"][prefixes[0]][0]
    assert str(version.manifest.schema.field("tokens").type.value_type) == dtype
    assert [f.name for f in version.fields] == ["id", "tokens", "file", "document", "megatron_starts",
                                                *(["megatron_mode"] if name == "mm" else [])]
    assert {f.name: f.role.value for f in version.fields}["tokens"] == "tokens"
    tables = files_of(version)
    assert list(tables) == [p.split("/")[1] + ".bin" for p in prefixes]  # pairs in sorted order
    for prefix, (file, table) in zip(prefixes, tables.items()):
        read, bin_bytes = built["read"][prefix], (built["root"] / f"{prefix}.bin").read_bytes()
        tokens = table.column("tokens")
        assert sha(tokens.combine_chunks().flatten().to_numpy().astype(np.dtype(dtype).newbyteorder("<")).tobytes()) \
            == sha(bin_bytes) == sha(read["tokens"].astype(np.dtype(dtype).newbyteorder("<")).tobytes())
        lengths = [len(t) for t in tokens.to_pylist()]
        assert lengths == read["lengths"].tolist() and 0 in lengths
        assert (np.cumsum([0, *lengths[:-1]]) * np.dtype(dtype).itemsize).tolist() == read["pointers"].tolist()
        assert table.column("document").to_pylist() == list(range(len(lengths)))
        assert table.column("id").to_pylist() == [f"{file}:{i}" for i in range(len(lengths))]
        starts = table.column("megatron_starts").to_pylist()
        assert document_indices(starts) == read["document_indices"].tolist()
        assert {0, 1, 2} <= set(starts)  # continued documents, and documents without a sequence before one
        if name == "mm":
            assert table.column("megatron_mode").to_pylist() == read["modes"].tolist()


def test_the_export_is_the_builders_bytes_and_megatron_reads_the_same_sequences_and_documents(built):
    root = built["root"]
    for prefix, read in built["reread"].items():
        corpus, stem = prefix.split("/")
        for ending in (".bin", ".idx"):
            assert (root / f"export-{corpus}" / (stem + ending)).read_bytes() == \
                (root / (prefix + ending)).read_bytes(), (prefix, ending)
        for key, value in built["read"][prefix].items():
            np.testing.assert_array_equal(read[key], value, err_msg=f"{prefix} {key}")
    assert built["exports"]["i32"]["dtype"] == "int32" and built["exports"]["i32"]["sidecar"]


def test_the_exports_reingest_to_the_same_version_id_with_the_tokenizer(built):
    for name, version in built["versions"].items():
        assert built["again"][name].id == version.id, name
        assert built["exports"][name]["sidecar"]
    tokenizer = built["again"]["u16-tok"].manifest.field("tokens").options["tokenizer"]
    assert tokenizer == built["versions"]["u16-tok"].manifest.field("tokens").options["tokenizer"]
    assert "blob" in tokenizer


def test_a_bin_or_a_glob_names_the_same_rows_as_their_directory(built, tmp_path):
    root = built["root"]
    for source, name in ((root / "u16" / "corpus.bin", "u16"), (f"{root}/i32/*.idx", "i32")):
        again = run_ingest(Catalog(str(tmp_path / name)), str(source), name, engine="inline").version
        assert again.id == built["versions"][name].id, source


def test_parts_cut_a_pair_anywhere_and_give_the_same_rows_inline_and_in_the_pool(built, tmp_path, monkeypatch):
    """Parts of at most 7 sequences or 300 bytes, an index read 5, 3, then 2 entries at a time (not in the pool):
    parts begin inside documents and between documents without a sequence; every row is as one part
    makes it, and pool workers (which read with the default chunk) give the version inline gives."""
    monkeypatch.setattr(megatron, "PART_SEQUENCES", 7)
    monkeypatch.setattr(megatron, "PART_BYTES", 300)
    monkeypatch.setattr(megatron, "_CHUNK", 5)
    source = built["root"] / "u16"
    parts = MegatronSource(SourceSpec("megatron", str(source))).parts()
    assert len(parts) > 10 and all(b - a <= 7 for a, b in (p.options["sequences"] for p in parts))
    for chunk in (3, 1 << 20, 2):  # the cuts do not depend on how the index is read
        monkeypatch.setattr(megatron, "_CHUNK", chunk)
        assert MegatronSource(SourceSpec("megatron", str(source))).parts() == parts
    assert max(p.size for p in parts) > 300  # a longer sequence alone
    inline = run_ingest(Catalog(str(tmp_path / "inline")), str(source), "u16", engine="inline").version
    pool = run_ingest(Catalog(str(tmp_path / "pool")), str(source), "u16", engine="pool", workers=2).version
    assert pool.id == inline.id
    assert len(inline.manifest.shards) == len(parts)
    assert rows(inline).drop_columns([HASH_COLUMN]).equals(rows(built["versions"]["u16"]).drop_columns([HASH_COLUMN]))


def test_unsigned_32_bit_tokens_export_as_the_int32_megatron_writes_for_a_large_vocabulary(built, tmp_path):
    """A version of uint32 tokens, a row a sequence, no file column: data.bin/.idx as IndexedDatasetBuilder
    (dtype=int32) writes them, one document a sequence; no sidecar (a re-ingest gives int32 tokens)."""
    corpus = built["corpora"]["flat/built"][1]
    catalog = Catalog(str(tmp_path / "c"))
    tokens = np.split(corpus["tokens"], np.cumsum(corpus["lengths"])[:-1])
    fields = [Field("tokens", pa.list_(pa.uint32()), "tokens")]
    version = catalog.write_version("u32", [{"tokens": t.tolist()} for t in tokens], fields)
    summary = export(version, tmp_path / "out")
    assert summary["dtype"] == "int32" and not summary["sidecar"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["data.bin", "data.idx"]
    for ending in (".bin", ".idx"):
        assert (tmp_path / "out" / f"data{ending}").read_bytes() == \
            (built["root"] / f"flat/built{ending}").read_bytes()
    catalog.write_version("over", [{"tokens": [1, 2]}, {"tokens": [3, 2**31]}], fields)
    one_line_error(run_cli("--catalog", catalog.url, "export", "over", tmp_path / "o2", "--format", "megatron"),
                   "over@", ":1", "2,147,483,647", "int32")


def test_the_sidecar_only_when_a_reingest_gives_every_row_back(tmp_path):
    """Megatron's fields, but rows a re-ingest would name otherwise (a file not named `.bin`, files out of
    their sorted order, documents not numbered from 0): the export is written, without the sidecar. (A
    version written by `write_version` has other shards than an ingest: its rows come back, not its id.)"""
    catalog = Catalog(str(tmp_path / "c"))
    fields = [Field("id", pa.string(), "scalar", False), Field("tokens", pa.list_(pa.uint16()), "tokens", False),
              Field("file", pa.string(), "scalar", False), Field("document", pa.int64(), "scalar", False),
              Field("megatron_starts", pa.int64(), "scalar", False)]
    cases = {"exact": [("a.bin", 0), ("a.bin", 1), ("b.bin", 0)], "renamed": [("a.npy", 0), ("a.npy", 1)],
             "unsorted": [("b.bin", 0), ("a.bin", 0)], "renumbered": [("a.bin", 0), ("a.bin", 2)]}
    for name, files in cases.items():
        catalog.write_version(name, [{"id": f"{f}:{d}", "tokens": [d, 7], "file": f, "document": d,
                                      "megatron_starts": 1} for f, d in files], fields)
        summary = export(catalog.resolve(name), tmp_path / name)
        assert summary["sidecar"] == (name == "exact"), name
    again = run_ingest(Catalog(str(tmp_path / "again")), str(tmp_path / "exact"), "exact", engine="inline").version
    assert rows(again).equals(rows(catalog.resolve("exact")))


def test_exports_megatron_cannot_write_are_one_line(tmp_path):
    catalog = Catalog(str(tmp_path / "c"))
    two = [Field("a", pa.list_(pa.int32()), "tokens"), Field("b", pa.list_(pa.int32()), "tokens")]
    catalog.write_version("two", [{"a": [1], "b": [2]}], two)
    mixed = [Field("tokens", pa.list_(pa.uint16()), "tokens"), Field("file", pa.string(), "scalar")]
    catalog.write_version("mixed", [{"tokens": [1], "file": f} for f in ("a.bin", "b.bin", "a.bin")], mixed)
    starts = [Field("tokens", pa.list_(pa.uint16()), "tokens"), Field("megatron_starts", pa.int64(), "scalar")]
    catalog.write_version("starts", [{"tokens": [1], "megatron_starts": 0}], starts)
    for name, fragments in (("two", ["one tokens field", "a, b"]),
                            ("mixed", ["mixed@", ":2", "'a.bin'", "consecutive"]),
                            ("starts", ["megatron_starts is 0", "row 0"])):
        one_line_error(run_cli("--catalog", catalog.url, "export", name, tmp_path / f"out-{name}", "--format",
                               "megatron"), *fragments)


# -- hostile indexes, written by hand ------------------------------------------------------------

def write_pair(prefix: Path, lengths=(3, 0, 5, 2), code=8, pointers=None, documents=None, n=None, d=None,
               magic=MAGIC, version=1, keep=None, tail=b"", bin_size=20) -> Path:
    """A .bin/.idx pair laid out as _IndexWriter writes it (uint16 tokens: 20 bytes of .bin), with any
    field replaced, the .idx cut to `keep` bytes or `tail` added; the .idx's path."""
    lengths = list(lengths)
    pointers = list(np.cumsum([0, *lengths[:-1]]) * 2) if pointers is None else pointers
    documents = list(range(len(lengths) + 1)) if documents is None else documents
    index = struct.pack("<9sQBQQ", magic, version, code, len(lengths) if n is None else n,
                        len(documents) if d is None else d)
    for values, dtype in ((lengths, "<i4"), (pointers, "<i8"), (documents, "<i8")):
        index += np.array(values, dtype).tobytes()
    prefix.with_suffix(".idx").write_bytes(index[:keep] + tail)
    prefix.with_suffix(".bin").write_bytes(bytes(range(bin_size)))
    return prefix.with_suffix(".idx")


def one_line_error(done, *fragments) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


HOSTILE = {  # name: (write_pair arguments, what the line names besides the file)
    "a truncated index": ({"keep": 117}, ["x.idx", "document count (document_indices) declares 5 entries"]),
    "bytes after the index": ({"tail": b"\0"}, ["x.idx", "123 bytes, but its counts (4 sequences, 5 document"]),
    "truncated header": ({"keep": 20}, ["x.idx", "truncated: 20 bytes"]),
    "a declared 2^60 sequences": ({"n": 2**60}, ["x.idx", "sequence count", "1,152,921,504,606,846,976"]),
    "a declared 2^60 documents": ({"d": 2**60}, ["x.idx", "document count", "1,152,921,504,606,846,976"]),
    "a pointer past the end": ({"pointers": [0, 6, 10**9, 16]}, ["x.idx", "sequence_pointers[2] = 1,000,000,000",
                                                                 "past the end of", "x.bin"]),
    "a pointer out of step": ({"pointers": [0, 6, 8, 16]}, ["x.idx", "sequence_pointers[2] = 8", "expected 6"]),
    "a negative length": ({"lengths": [3, -2, 5, 2]}, ["x.idx", "sequence_lengths[1] = -2 is negative"]),
    "an overflowing length": ({"lengths": [3, 0, 5, 2**31 - 1], "pointers": [0, 6, 6, 16]},  # the .bin: 20 bytes
                              ["x.idx", "sequence_lengths run past the end of", "x.bin", "at sequence 3"]),
    "a dtype code that does not exist": ({"code": 9}, ["x.idx", "dtype code 9 does not exist"]),
    "a float dtype": ({"code": 7}, ["x.idx", "dtype code 7 (float32)"]),
    "a .bin longer than the lengths": ({"bin_size": 22}, ["x.bin", "22 bytes", "sequence_lengths", "20 bytes"]),
    "document indices that decrease": ({"documents": [0, 3, 2, 4]}, ["x.idx", "document_indices decrease at [2]"]),
    "document indices short of the end": ({"documents": [0, 1, 3]}, ["x.idx", "document_indices end at 3"]),
    "a document after the last sequence": ({"documents": [0, 2, 4, 4]}, ["x.idx", "without a sequence after"]),
    "another magic": ({"magic": b"MMIDIDX\x00\x01"}, ["x.idx", "not a Megatron index"]),
    "another version": ({"version": 2}, ["x.idx", "version 2"]),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_index_is_one_line_naming_file_and_field_exit_2_no_version(case, tmp_path):
    arguments, fragments = HOSTILE[case]
    (tmp_path / "src").mkdir()
    write_pair(tmp_path / "src" / "x", **arguments)
    catalog = tmp_path / "c"
    one_line_error(run_cli("--catalog", catalog, "ingest", tmp_path / "src", "x", "--engine", "inline"), *fragments)
    assert not (catalog / "datasets" / "x" / "versions").exists()


def test_an_index_without_its_bin_is_one_line(tmp_path):
    idx = write_pair(tmp_path / "x")
    (tmp_path / "x.bin").unlink()
    one_line_error(run_cli("--catalog", tmp_path / "c", "ingest", idx, "x"), "x.idx", "has no x.bin beside it")


def test_pairs_of_different_token_types_are_one_line(tmp_path):
    write_pair(tmp_path / "a")
    write_pair(tmp_path / "b", code=4, lengths=(5,), bin_size=20)
    one_line_error(run_cli("--catalog", tmp_path / "c", "ingest", tmp_path, "x"), "b.idx", "int32", "a.idx", "uint16",
                   "separately")


def test_a_declared_2_to_the_60_allocates_nothing(tmp_path):
    for i, arguments in enumerate(({"n": 2**60}, {"d": 2**60}, {"n": 2**60 - 1, "d": 2**60 - 1})):
        idx = write_pair(tmp_path / f"x{i}", **arguments)
        tracemalloc.start()
        with pytest.raises(UserError, match="declares"):
            MegatronSource(SourceSpec("megatron", str(idx))).parts()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 256 << 10, peak

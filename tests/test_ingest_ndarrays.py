"""NumPy arrays from other writers ingest bit-exact as arrays: MDS `ndarray` columns written by
mosaicml-streaming's own `MDSWriter`, WebDataset `.npy` members written by webdataset's `TarWriter`.
The `--role F=tokens` refusals run the command in this process (tests/cli_inprocess.py), one of them in a
real process (exit 2 as a shell sees it)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from cli_inprocess import run_cli
from ingest_fixtures import mds_writer_class

from dsinspect.errors import UserError
from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.export import export_version
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.writer import WriteOptions

REPO = Path(__file__).resolve().parents[1]

# An RL episode per sample: observations of varying length (plain `ndarray`: dtype and shape in the
# bytes), actions and rewards (`ndarray:DTYPE`: shape in the bytes), a fixed-shape state, odd values.
EPISODE_COLUMNS = {"episode": "int", "obs": "ndarray", "action": "ndarray:int64", "reward": "ndarray:float32",
                   "state": "ndarray:float32:4,3", "mask": "ndarray:float16", "big": "ndarray",
                   "frame": "ndarray:uint8:2,3,3"}
ODD = np.array([0.1, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4e38, -1.5], np.float32)


def episodes(n: int) -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        steps = i % 9 + 1
        out.append({
            "episode": i,
            "obs": rng.standard_normal((steps, 5)).astype(np.float32) * (10.0 ** (i % 7 - 3)),
            "action": rng.integers(-(2**62), 2**62, steps, dtype=np.int64),
            "reward": np.resize(ODD, steps) if i % 2 else rng.standard_normal(steps).astype(np.float32),
            "state": np.resize(ODD, (4, 3)) + np.float32(i),
            "mask": rng.standard_normal((2, steps + 300 * (i == 5))).astype(np.float16),  # 300+: a wider shape header
            "big": np.array([2**64 - 1 - i, 0, i], np.uint64),
            "frame": rng.integers(0, 256, (2, 3, 3), dtype=np.uint8),
        })
    return out


def write_mds(out: Path, samples: list[dict], columns=EPISODE_COLUMNS, compression=None) -> None:
    with mds_writer_class()(out=str(out), columns=columns, size_limit=1 << 13, compression=compression) as writer:
        for s in samples:
            writer.write(s)


def stored_arrays(version, name: str) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """A column of the stored version: every leaf value (as Arrow holds it) and each row's shape."""
    column = pa.concat_tables([t for _, t in version.iter_tables([name])]).column(name).combine_chunks()
    leaves = column
    while pa.types.is_list(leaves.type) or pa.types.is_fixed_size_list(leaves.type):
        leaves = leaves.flatten()
    return leaves.to_numpy(zero_copy_only=False), [np.shape(v) for v in column.to_pylist()]


def assert_bit_exact(version, name: str, arrays: list[np.ndarray]) -> None:
    leaves, shapes = stored_arrays(version, name)
    want = np.concatenate([a.reshape(-1) for a in arrays])
    assert leaves.dtype == want.dtype, (name, leaves.dtype, want.dtype)
    assert leaves.tobytes() == want.tobytes(), name  # every element, bit for bit (NaN, -0.0, subnormals)
    assert shapes == [a.shape for a in arrays], name


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_mds_ndarray_columns_ingest_bit_exact_as_arrays(tmp_path, compression):
    samples = episodes(60)
    write_mds(tmp_path / "mds", samples, compression=compression)
    result = run_ingest(Catalog(str(tmp_path / "cat")), str(tmp_path / "mds"), "rl", engine="inline")
    version = result.version
    assert result.parts > 1 and version.num_rows == 60
    fields = {f.name: (f.role.value, str(f.type)) for f in version.fields}
    assert fields == {
        "action": ("array", "list<item: int64>"),
        "big": ("array", "list<item: uint64>"),
        "episode": ("scalar", "int64"),
        "frame": ("array", "fixed_size_list<item: fixed_size_list<item: fixed_size_list<item: uint8>[3]>[3]>[2]"),
        "mask": ("array", "list<item: list<item: halffloat>>"),
        "obs": ("array", "list<item: list<item: float>>"),
        "reward": ("array", "list<item: float>"),
        "state": ("array", "fixed_size_list<item: fixed_size_list<item: float>[3]>[4]"),
    }
    for name in EPISODE_COLUMNS:
        if name != "episode":
            assert_bit_exact(version, name, [s[name] for s in samples])


@pytest.mark.slow
def test_mds_ndarray_ingest_gives_one_version_id_on_every_engine(tmp_path):
    """Workers decide a plain `ndarray` column's type from the same first value the plan read."""
    write_mds(tmp_path / "mds", episodes(30), compression="zstd")
    ids = {run_ingest(Catalog(str(tmp_path / f"c-{engine}")), str(tmp_path / "mds"), "rl", engine=engine,
                      workers=workers).version.id for engine, workers in [("inline", None), ("pool", 2)]}
    assert len(ids) == 1


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "webdataset"])
def test_an_mds_ndarray_version_round_trips_through_export(tmp_path, fmt):
    # without `big`: the JSONL reader refuses integers above 2**63 - 1, uint64 or not (reported, not ours)
    columns = {k: v for k, v in EPISODE_COLUMNS.items() if k != "big"}
    write_mds(tmp_path / "mds", [{k: s[k] for k in columns} for s in episodes(40)], columns=columns)
    original = run_ingest(Catalog(str(tmp_path / "c1")), str(tmp_path / "mds"), "rl", engine="inline",
                          write=WriteOptions(shard_rows=16)).version
    export_version(original, fmt, str(tmp_path / "export"))
    again = run_ingest(Catalog(str(tmp_path / "c2")), str(tmp_path / "export"), "rl", engine="inline").version
    assert again.id == original.id


def test_mds_ndarray_values_of_other_dtypes_or_dimensions_are_kept_as_npy_files(tmp_path):
    """Once refused after converting the shards before (the first value decided the column's type)."""
    from dsinspect.loaders.format.npy import read_npy

    cases = {"dtype": ("ndarray", [np.zeros(3, np.float32)] * 3 + [np.zeros(3, np.float64)]),
             "ndim": ("ndarray:int32", [np.zeros(3, np.int32), np.zeros((1, 3), np.int32)])}
    for name, (encoding, values) in cases.items():
        write_mds(tmp_path / name, [{"x": v} for v in values], columns={"x": encoding})
        version = run_ingest(Catalog(str(tmp_path / "c")), str(tmp_path / name), name, engine="inline").version
        assert str(version.manifest.field("x").type) == "binary"
        stored = [read_npy(version.row(i)["x"], "x") for i in range(version.num_rows)]
        assert [(a.dtype, a.shape) for a in stored] == [(v.dtype, v.shape) for v in values]


def test_mds_pickle_stays_refused_next_to_ndarrays(tmp_path):
    # `x` comes first: an ndarray column read (no longer refused), then the pickle refused
    write_mds(tmp_path / "mds", [{"x": np.zeros(2, np.float32), "z": {"a": 1}}], columns={"x": "ndarray", "z": "pkl"})
    with pytest.raises(UserError, match=r"column 'z' uses the 'pkl' encoding"):
        run_ingest(Catalog(str(tmp_path / "c")), str(tmp_path / "mds"), "x", engine="inline")


def craft_mds(out: Path, values: list[bytes]) -> None:
    """An MDS directory with one plain `ndarray` column holding exactly `values` (damage included)."""
    import json
    import struct

    samples = [struct.pack("<I", len(v)) + v for v in values]
    offsets = [4 * (len(samples) + 2)]
    for sample in samples:
        offsets.append(offsets[-1] + len(sample))
    shard = struct.pack(f"<{len(offsets) + 1}I", len(samples), *offsets) + b"".join(samples)
    out.mkdir()
    (out / "shard.00000.mds").write_bytes(shard)
    (out / "index.json").write_text(json.dumps({"version": 2, "shards": [{
        "format": "mds", "version": 2, "column_names": ["x"], "column_encodings": ["ndarray"], "column_sizes": [None],
        "compression": None, "hashes": [], "samples": len(samples), "size_limit": 1 << 26, "zip_data": None,
        "raw_data": {"basename": "shard.00000.mds", "bytes": len(shard), "hashes": {}}}]}))


F32 = bytes([34])  # the MDS dtype code of float32


@pytest.mark.parametrize("value, message", [
    (F32 + bytes([3 << 2 | 3]) + np.array([2**40] * 3, "<u8").tobytes() + bytes(16), r"needs \d+ bytes of values"),
    (F32 + bytes([2 << 2 | 3]) + np.array([0, 2**62], "<u8").tobytes(), r"every axis holds at least one value"),
    (bytes([200, 1 << 2, 1]) + bytes(4), r"not an MDS ndarray value \(bad dtype or shape header\)"),
    (F32 + bytes([1 << 2, 5]) + bytes(4),
     r"shape \(5,\) and dtype float32 needs 20 bytes of values, the sample holds 4"),
])
def test_a_damaged_mds_ndarray_value_is_one_line_naming_shard_and_sample(tmp_path, value, message):
    good = F32 + bytes([1 << 2, 1]) + np.float32(1).tobytes()
    craft_mds(tmp_path / "mds", [good, value])
    with pytest.raises(UserError, match=r"shard\.00000\.mds: column 'x' sample 1: .*" + message):
        run_ingest(Catalog(str(tmp_path / "c")), str(tmp_path / "mds"), "x", engine="inline")


def npy_header(descr: str, shape: tuple, version: bytes = b"\x01\x00") -> bytes:
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode() + b" \n"
    return b"\x93NUMPY" + version + len(header).to_bytes(2 if version == b"\x01\x00" else 4, "little") + header


@pytest.mark.parametrize("member, message", [
    (npy_header("<f8", (10**12,)) + bytes(8), r"shape \(1000000000000,\) and dtype float64 needs 8000000000000 bytes"),
    (npy_header("<f8", (0, 2**62)), r"shape \(0, 4611686018427387904\)"),
    (npy_header("<f8", (1,), b"\x03\x00") + bytes(8), r"is not a \.npy array \(format version 3\.0"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f8',\n" + bytes(8), r"is not a \.npy array"),
    (npy_header("<c16", (1,)) + bytes(16), r"arrays of dtype complex128 cannot be ingested"),
    (b"PK\x03\x04" + bytes(40), r"is not a \.npy array"),  # an .npz (a zip) under a .npy name
])
def test_a_damaged_or_hostile_npy_member_is_one_line_without_allocating_its_claim(tmp_path, member, message):
    import io

    (tmp_path / "wds").mkdir()
    with tarfile.open(tmp_path / "wds" / "a.tar", "w") as tar:
        for name, data in [("k0.x.npy", npy_header("<f8", (1,)) + bytes(8)), ("k1.x.npy", member)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(UserError, match=r"a\.tar: sample 'k1' part 'x\.npy'.*" + message):
        run_ingest(Catalog(str(tmp_path / "c")), str(tmp_path / "wds"), "wds", engine="inline")


# -- WebDataset .npy ---------------------------------------------------------------------------

def write_tar(path: Path, samples: list[dict]) -> None:
    import webdataset

    with open(path, "wb") as f:
        writer = webdataset.TarWriter(f, mtime=0)
        for s in samples:
            writer.write(s)
        writer.close()


def npy_samples(n: int) -> list[dict]:
    rng = np.random.default_rng(3)
    return [{"__key__": f"e{i:04d}",
             "obs.npy": rng.standard_normal((i % 4 + 1, 3)).astype(">f8"),  # big-endian, as some writers leave it
             "input_ids.npy": rng.integers(0, 50_000, i % 6 + 1).astype(np.int32),
             "action.npy": rng.integers(0, 4, i % 5 + 1).astype(np.int64),
             "half.npy": np.resize(ODD, (2, 2)).astype(np.float16),
             "done.npy": np.array([i % 2 == 0, True]),
             "ret.npy": np.float32(i / 3),  # 0-D: a scalar
             "txt": f"episode {i}"} for i in range(n)]


def test_webdataset_npy_members_ingest_bit_exact_as_arrays(tmp_path):
    samples = npy_samples(50)
    (tmp_path / "wds").mkdir()
    write_tar(tmp_path / "wds" / "a.tar", samples[:30])
    write_tar(tmp_path / "wds" / "b.tar", samples[30:])
    with tarfile.open(tmp_path / "wds" / "a.tar") as tar:  # TarWriter's own .npy encoding, big-endian kept
        stored = io.BytesIO(tar.extractfile("e0000.obs.npy").read())
        assert np.load(stored, allow_pickle=False).dtype == np.dtype(">f8")
    version = run_ingest(Catalog(str(tmp_path / "cat")), str(tmp_path / "wds"), "wds", engine="inline").version
    fields = {f.name: (f.role.value, str(f.type)) for f in version.fields}
    assert {k: v for k, v in fields.items() if k.endswith(".npy")} == {
        "action.npy": ("array", "list<item: int64>"),
        "done.npy": ("array", "list<item: bool>"),
        "half.npy": ("array", "list<item: list<item: halffloat>>"),
        "input_ids.npy": ("tokens", "list<item: int32>"),  # named like token ids
        "obs.npy": ("array", "list<item: list<item: double>>"),
        "ret.npy": ("scalar", "float"),
    }
    for name in ("action.npy", "done.npy", "half.npy", "input_ids.npy", "ret.npy"):
        assert_bit_exact(version, name, [np.asarray(s[name]) for s in samples])
    assert_bit_exact(version, "obs.npy", [s["obs.npy"].astype("=f8") for s in samples])  # same values, native order


def test_webdataset_npy_is_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (tmp_path / "wds").mkdir()
    write_tar(tmp_path / "wds" / "a.tar", [{"__key__": "k0", "x.npy": np.zeros(2)},
                                           {"__key__": "k1", "x.npy": np.array([Trap()], dtype=object)}])
    with tarfile.open(tmp_path / "wds" / "a.tar") as tar:
        data = tar.extractfile("k1.x.npy").read()
    assert b"'descr': '|O'" in data and b"unpickled" in data  # an object array: the trap, pickled
    with pytest.raises(UserError, match=r"a\.tar: sample 'k1' part 'x\.npy': arrays of dtype object cannot be "
                                        r"ingested"):
        run_ingest(Catalog(str(tmp_path / "cat")), str(tmp_path / "wds"), "wds", engine="inline")
    assert not marker.exists()


# -- --role F=tokens ---------------------------------------------------------------------------

def cli(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS`, run in this process with no DSINSPECT_CATALOG: a CompletedProcess."""
    return run_cli("--catalog", catalog, *args)


def cli_process(*args, catalog):
    """`dsinspect --catalog CATALOG ARGS` in a real process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSINSPECT_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(catalog), *args], capture_output=True,
                          text=True, env=env, timeout=180)


def test_tokens_role_takes_one_dimensional_integer_arrays_from_any_source(tmp_path):
    write_mds(tmp_path / "mds", episodes(12))
    version = run_ingest(Catalog(str(tmp_path / "c")), str(tmp_path / "mds"), "rl", engine="inline",
                         roles={"action": "tokens"}).version
    assert version.manifest.field("action").role.value == "tokens"
    (tmp_path / "wds").mkdir()
    write_tar(tmp_path / "wds" / "a.tar", npy_samples(8))
    version = run_ingest(Catalog(str(tmp_path / "c")), str(tmp_path / "wds"), "wds", engine="inline",
                         roles={"action.npy": "tokens", "input_ids.npy": "array"}).version
    roles = {f.name: f.role.value for f in version.fields}
    assert roles["action.npy"] == "tokens" and roles["input_ids.npy"] == "array"


@pytest.mark.slow
@pytest.mark.parametrize("field, kind", [("obs", "list<item: list<item: float>>"), ("reward", "list<item: float>"),
                                         ("frame", "fixed_size_list")])
def test_tokens_role_refuses_float_and_multidimensional_arrays_in_one_line(tmp_path, field, kind):
    write_mds(tmp_path / "mds", episodes(3))
    run = cli_process if field == "obs" else cli  # one from a real process: exit 2 as a shell sees it
    done = run("ingest", str(tmp_path / "mds"), "rl", "--engine", "inline", "--role", f"{field}=tokens",
               catalog=tmp_path / "c")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"field {field!r} has role 'tokens', which needs a list of integers" in lines[0], lines
    assert kind in lines[0]

"""Array columns whose values differ in dtype or number of dimensions from row to row (and from part
to part) ingest exactly with no flag: RL episodes whose actions are int64 (T,) for a discrete
environment and float32 (T, 1) for a continuous one, written by webdataset's own TarWriter and by
mosaicml-streaming's own MDSWriter. They are stored as .npy files (docs/FORMAT.md, "Arrays"), decided
over the whole source before any part converts; whatever the survey refuses writes no shard."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from ingest_fixtures import mds_writer_class

from dsinspect.errors import UserError
from dsinspect.inspect import open_sample
from dsinspect.loaders.diff.compare import diff
from dsinspect.loaders.format.npy import read_npy, to_npy
from dsinspect.loaders.ingest import export_version, run_ingest
from dsinspect.loaders.store.catalog import Catalog

REPO = Path(__file__).resolve().parents[1]


def actions(episode: int, continuous: bool) -> np.ndarray:
    steps = episode % 4 + 2
    rng = np.random.default_rng(episode)
    if continuous:
        return rng.standard_normal((steps, 1)).astype(np.float32)
    return rng.integers(-(2**40), 2**40, steps, dtype=np.int64)


def episodes(kinds: str, start: int = 0) -> list[dict]:
    """One episode per letter: d (discrete: int64 (T,)) or c (continuous: float32 (T, 1))."""
    return [{"__key__": f"ep{start + i:04d}", "actions.npy": actions(start + i, k == "c"),
             "obs.npy": np.full((3, 2), start + i, np.float32), "id": str(start + i)}
            for i, k in enumerate(kinds)]


# Three parts: all discrete, all continuous, then mixed: the first value of each part differs.
PARTS = ["ddd", "ccc", "cdcd"]


def write_tar(path: Path, samples: list[dict]) -> None:
    import webdataset

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        writer = webdataset.TarWriter(f, mtime=0)
        for s in samples:
            writer.write(s)
        writer.close()


def write_wds(root: Path, parts=PARTS) -> list[dict]:
    samples, start = [], 0
    for p, kinds in enumerate(parts):
        write_tar(root / f"part-{p}.tar", episodes(kinds, start))
        samples += episodes(kinds, start)
        start += len(kinds)
    return samples


def members(root: Path, ext: str) -> list[bytes]:
    """The member bytes of every sample's `ext`, in source order."""
    out = []
    for tar_path in sorted(root.glob("*.tar")):
        with tarfile.open(tar_path) as tar:
            out += [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith("." + ext)]
    return out


def column(version, name: str) -> list:
    return [version.row(i)[name] for i in range(version.num_rows)]


def assert_exact(stored: list[bytes], arrays: list[np.ndarray]) -> None:
    assert len(stored) == len(arrays)
    for i, (data, want) in enumerate(zip(stored, arrays)):
        got = np.load(io.BytesIO(data), allow_pickle=False)
        assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes()), i


def test_webdataset_actions_varying_in_dtype_and_dimensions_ingest_exactly_with_no_flag(tmp_path):
    samples = write_wds(tmp_path / "wds")
    result = run_ingest(Catalog(str(tmp_path / "cat")), str(tmp_path / "wds"), "rl", engine="inline")
    version = result.version
    assert result.parts == 3 and version.num_rows == 10
    fields = {f.name: (f.role.value, str(f.type)) for f in version.fields}
    assert fields["actions.npy"] == ("array", "binary")  # .npy files: each row's dtype and shape
    assert fields["obs.npy"] == ("array", "list<item: list<item: float>>")  # one dtype and ndim: nested lists
    stored = column(version, "actions.npy")
    assert stored == members(tmp_path / "wds", "actions.npy")  # the members' own bytes
    assert_exact(stored, [s["actions.npy"] for s in samples])
    # the array view decodes them, so `show`, the TUI and the web app display them
    for i in (0, 3):
        view = open_sample(version, i).view("actions.npy")
        assert view.kind == "json" and view.value == samples[i]["actions.npy"].tolist()
        want = "int64, shape 2" if i == 0 else "float32, shape 5 × 1"
        assert view.findings[0].message.startswith(want), view.findings[0].message


def test_mds_actions_varying_in_dtype_and_dimensions_ingest_exactly_with_no_flag(tmp_path):
    samples = [{"episode": i, "actions": actions(i, k == "c")} for i, k in enumerate("".join(PARTS))]
    with mds_writer_class()(out=str(tmp_path / "mds"), columns={"episode": "int", "actions": "ndarray"},
                            size_limit=300) as writer:  # 1-3 episodes per shard: parts differ too
        for s in samples:
            writer.write(s)
    result = run_ingest(Catalog(str(tmp_path / "cat")), str(tmp_path / "mds"), "rl", engine="inline")
    assert result.parts >= 3, result.parts
    version = result.version
    assert version.manifest.field("actions").role.value == "array"
    stored = column(version, "actions")
    assert_exact(stored, [s["actions"] for s in samples])
    assert stored == [to_npy(s["actions"]) for s in samples]  # dsinspect's canonical .npy bytes


def test_to_npy_is_the_documented_canonical_form_numpy_reads():
    for a in [np.arange(3, dtype=">i8"), np.ones((2, 1), np.float32), np.array(True), np.zeros((0, 4), np.uint16),
              np.arange(6, dtype=np.float16).reshape(2, 3).T]:
        data = to_npy(a)
        assert data.startswith(b"\x93NUMPY\x01\x00") and data[:data.index(b"\n") + 1].__len__() % 64 == 0
        back = np.load(io.BytesIO(data), allow_pickle=False)
        assert back.dtype == a.dtype.newbyteorder("<") and back.shape == a.shape and np.array_equal(back, a)
        assert read_npy(data, "x").tobytes() == np.ascontiguousarray(a, a.dtype.newbyteorder("=")).tobytes()
    header = b"{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }" + b" " * 60 + b"\n"  # 128 bytes in all
    assert to_npy(np.array([1, 2], np.int64)) == b"\x93NUMPY\x01\x00" + bytes([len(header), 0]) + header + \
        np.array([1, 2], "<i8").tobytes()


def object_npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buf.getvalue()


@pytest.mark.parametrize("damage, message", [
    (lambda s: {**s, "actions.npy": object_npy()},
     r"sample 'ep0007' part 'actions\.npy': arrays of dtype object cannot be ingested"),
    (lambda s: {k: v for k, v in s.items() if k != "obs.npy"}, r"sample 'ep0007' has no 'obs\.npy' part"),
])
def test_a_source_the_survey_refuses_writes_no_shard(tmp_path, damage, message):
    """Its last part is the bad one: it used to stop the ingest after the parts before it had converted."""
    write_wds(tmp_path / "wds", ["ddd", "ddd"])  # one dtype and ndim: the old reader converted these first
    bad = episodes("dd", 6)
    write_tar(tmp_path / "wds" / "part-2.tar", [bad[0], damage(bad[1])])
    with pytest.raises(UserError, match=r"part-2\.tar: " + message):
        run_ingest(Catalog(str(tmp_path / "cat")), str(tmp_path / "wds"), "rl", engine="inline")
    assert not (tmp_path / "cat").exists() or not list((tmp_path / "cat").rglob("*.parquet")), "no part converted"


def cli(*args, catalog):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSINSPECT_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(catalog), *args], capture_output=True,
                          text=True, env=env, timeout=180)


def test_role_bytes_keeps_the_npy_members_raw_bytes(tmp_path):
    write_wds(tmp_path / "wds")
    done = cli("ingest", str(tmp_path / "wds"), "rl", "--engine", "inline", "--role", "actions.npy=bytes",
               "--role", "obs.npy=bytes", "--json", catalog=tmp_path / "cat")
    assert done.returncode == 0, done.stderr
    version = Catalog(str(tmp_path / "cat")).resolve("rl")
    fields = {f.name: (f.role.value, str(f.type)) for f in version.fields}
    assert fields["actions.npy"] == fields["obs.npy"] == ("bytes", "binary")
    for name in ("actions.npy", "obs.npy"):
        assert column(version, name) == members(tmp_path / "wds", name)


@pytest.mark.parametrize("roles", [{}, {"actions.npy": "bytes"}])
def test_webdataset_export_gives_back_the_npy_members_and_the_same_version(tmp_path, roles):
    write_wds(tmp_path / "wds")
    original = run_ingest(Catalog(str(tmp_path / "c1")), str(tmp_path / "wds"), "rl", engine="inline",
                          roles=roles).version
    export_version(original, "webdataset", str(tmp_path / "export"))
    assert members(tmp_path / "export", "actions.npy") == members(tmp_path / "wds", "actions.npy")
    again = run_ingest(Catalog(str(tmp_path / "c2")), str(tmp_path / "export"), "rl", engine="inline").version
    assert again.id == original.id


def test_diff_of_an_episode_whose_actions_changed_dtype_names_the_array_change(tmp_path):
    catalog = Catalog(str(tmp_path / "cat"))
    write_wds(tmp_path / "v1")
    run_ingest(catalog, str(tmp_path / "v1"), "rl", engine="inline", tags=["v1"])
    write_wds(tmp_path / "v2", [PARTS[0], PARTS[1], "cdcc"])  # ep0009: discrete → continuous
    v2 = run_ingest(catalog, str(tmp_path / "v2"), "rl", engine="inline").version
    assert v2.manifest.key == "id"  # the `.id` members: inferred on v1, kept by v2
    rows = diff(catalog.resolve("rl@v1"), v2, catalog).rows
    assert rows.matched_by == "key" and (rows.counts["changed"], rows.counts["added"]) == (1, 0)
    change = rows.changed[0]
    assert change["key"] == 9 and change["fields"] == ["actions.npy"]
    assert change["details"]["actions.npy"]["dtype"] == "int64 → float32"
    assert change["details"]["actions.npy"]["shape"] == [[3], [3, 1]]


@pytest.mark.slow
def test_the_layout_never_depends_on_the_engine_or_which_part_converts_first(tmp_path):
    write_wds(tmp_path / "wds")
    ids = {run_ingest(Catalog(str(tmp_path / f"c-{engine}")), str(tmp_path / "wds"), "rl", engine=engine,
                      workers=workers).version.id for engine, workers in [("inline", None), ("pool", 2)]}
    assert len(ids) == 1
    (tmp_path / "wds" / "part-0.tar").rename(tmp_path / "wds" / "part-9.tar")  # now a continuous part comes first
    moved = run_ingest(Catalog(str(tmp_path / "c-moved")), str(tmp_path / "wds"), "rl", engine="pool", workers=2)
    assert str(moved.version.manifest.field("actions.npy").type) == "binary" and moved.rows == 10

"""A folder of media files ingests as one row per file: its relative name, its bytes, a role from magic bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import fsspec
import pytest
from ingest_fixtures import image_bytes, mp4_bytes, webm_bytes

from dsinspect.errors import UserError
from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.ingest.source import SourceSpec
from dsinspect.loaders.ingest.sources import detect_source
from dsinspect.loaders.store.catalog import Catalog

REPO = Path(__file__).resolve().parents[1]
OPENER = "test_ingest_files:open_failing"


def images() -> dict[str, bytes]:
    """Pillow-written pictures in nested folders, with a camera-style `_` name and an upper-case ending."""
    return {"cats/a/001.jpg": image_bytes("JPEG", 1), "cats/a/002.png": image_bytes("PNG", 2),
            "cats/b/003.webp": image_bytes("WEBP", 3), "dogs/004.gif": image_bytes("GIF", 4),
            "_DSC0005.JPG": image_bytes("JPEG", 5), "z/deep/er/006.PNG": image_bytes("PNG", 6)}


def clips() -> dict[str, bytes]:
    """PyAV-written clips."""
    return {"clips/x.mp4": mp4_bytes(), "clips/y.webm": webm_bytes(), "more/z.mp4": mp4_bytes()}


def write(root: str, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        with fsspec.open(f"{root}/{name}", "wb", auto_mkdir=True) as f:
            f.write(data)


def rows(version) -> list[tuple[str, bytes]]:
    return [(r["name"], r["data"]) for r in (version.row(i) for i in range(version.num_rows))]


@pytest.mark.parametrize("files, role", [(images, "image"), (clips, "video")])
def test_a_folder_of_media_files_is_one_row_per_file_in_path_order(tmp_path, files, role):
    write(str(tmp_path / "media"), files())
    (tmp_path / "media" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")  # hidden: skipped by detection and listing
    assert detect_source(str(tmp_path / "media")).kind == "files"
    version = run_ingest(Catalog(str(tmp_path / "cat")), str(tmp_path / "media"), "media", engine="inline").version
    assert rows(version) == sorted(files().items())  # relative names, exact bytes, sorted paths
    assert {f.name: f.role.value for f in version.fields} == {"name": "scalar", "data": role}


def test_a_mixed_folder_stores_bytes_and_a_glob_or_one_file_work_too(tmp_path):
    root = str(tmp_path / "media")
    write(root, {**images(), **clips()})
    version = run_ingest(Catalog(str(tmp_path / "cat")), root, "mixed", engine="inline").version
    assert rows(version) == sorted({**images(), **clips()}.items())
    assert version.manifest.field("data").role.value == "bytes"  # no one viewer fits images and clips
    spec = detect_source(f"{root}/cats/*/*.jpg")
    assert spec.kind == "files"
    version = run_ingest(Catalog(str(tmp_path / "cat")), spec, "glob", engine="inline").version
    assert rows(version) == [("a/001.jpg", image_bytes("JPEG", 1))]  # relative to the glob's directory
    version = run_ingest(Catalog(str(tmp_path / "cat")), f"{root}/dogs/004.gif", "one", engine="inline").version
    assert rows(version) == [("004.gif", image_bytes("GIF", 4))]


def test_files_over_an_fsspec_url(tmp_path):
    root = f"memory://media-{uuid.uuid4().hex}"
    write(root, images())
    try:
        result = run_ingest(Catalog(str(tmp_path / "cat")), root, "mem", engine="inline", options={"part_files": 4})
        assert result.parts == 2 and rows(result.version) == sorted(images().items())
    finally:
        fsspec.filesystem("memory").rm(root, recursive=True)


@pytest.mark.slow
def test_the_version_id_depends_on_the_files_not_the_engine_or_workers(tmp_path):
    write(str(tmp_path / "media"), {**images(), **clips()})
    ids = set()
    for engine, workers in [("inline", None), ("pool", 1), ("pool", 2)]:
        result = run_ingest(Catalog(str(tmp_path / f"cat-{engine}-{workers}")), str(tmp_path / "media"), "m",
                            engine=engine, workers=workers, options={"part_files": 2, "part_bytes": 1 << 20})
        assert result.parts == 5 and result.version.num_rows == 9
        ids.add(result.version.id)
    assert len(ids) == 1


class _Failing:
    """The files reader, failing once at the part named in `spec.options["fail"]`."""

    def __init__(self, spec: SourceSpec):
        from dsinspect.loaders.ingest.files import FilesSource

        self.inner, self.spec = FilesSource(spec), spec
        self._mark = Path(spec.options["marks"]) / f"failed-{spec.options['fail']}"

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read(self, part):
        if part.index == self.spec.options["fail"] and not self._mark.exists():
            self._mark.touch()
            raise OSError(f"injected failure reading {part.url}")
        yield from self.inner.read(part)


def open_failing(spec: SourceSpec) -> _Failing:
    return _Failing(spec)


def test_an_interrupted_files_ingest_resumes_and_a_rewritten_file_is_read_again(tmp_path):
    media = tmp_path / "media"
    write(str(media), images())
    (tmp_path / "marks").mkdir()
    catalog = Catalog(str(tmp_path / "cat"))
    spec = SourceSpec("files", str(media), {"part_files": 2, "fail": 2, "marks": str(tmp_path / "marks")})
    with pytest.raises(UserError, match="part 2"):
        run_ingest(catalog, spec, "m", engine="inline", opener=OPENER, retries=0)
    result = run_ingest(catalog, spec, "m", engine="inline", opener=OPENER, retries=0)
    assert (result.parts, result.parts_skipped, result.parts_converted) == (3, 2, 1)
    assert rows(result.version) == sorted(images().items())
    # a file rewritten at the same size: its part's stamp, so the job id, changes
    before = os.stat(media / "cats/a/001.jpg").st_mtime_ns
    data = image_bytes("JPEG", 1)
    (media / "cats/a/001.jpg").write_bytes(data[:200] + bytes([data[200] ^ 1]) + data[201:])
    os.utime(media / "cats/a/001.jpg", ns=(before + 10**9, before + 10**9))
    again = run_ingest(catalog, spec, "m", engine="inline", opener=OPENER, retries=0)
    assert again.parts_skipped == 0 and again.version.id != result.version.id


def test_a_folder_with_other_files_needs_the_kind_named(tmp_path):
    write(str(tmp_path / "media"), images())
    (tmp_path / "media" / "notes.txt").write_text("shot in May")
    with pytest.raises(UserError, match=r"media: no JSONL, Parquet, Arrow, tar, MDS or token files, nor only images "
                                        r"and videos, found; pass the kind \(.*files.*\)"):
        detect_source(str(tmp_path / "media"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DSINSPECT_CATALOG", None)
    done = subprocess.run([sys.executable, "-m", "dsinspect", "--catalog", str(tmp_path / "cat"), "ingest",
                           str(tmp_path / "media"), "m", "--kind", "files", "--engine", "inline", "--key", "name",
                           "--json"], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    version = Catalog(str(tmp_path / "cat")).version("m", json.loads(done.stdout)["id"])
    assert [n for n, _ in rows(version)] == sorted([*images(), "notes.txt"])
    assert version.manifest.key == "name"

"""Read throughput, time to first batch, resume and memory: dsinspect against the common peers, on
the same data and machine, in one run. Not a timed test: it prints a table and writes
`benchmarks/results/read-<date>.json` and `benchmarks/results/latest.md` (see benchmarks/README.md).

  python benchmarks/bench_read.py            # ~10-15 min on 2 cores (the first run also writes the data)
  python benchmarks/bench_read.py --quick    # 10x less data: a smoke run (writes *-quick files)
  python benchmarks/bench_read.py --cold     # cold-cache mode (read_cold.py): read-cold-<date>.json

Workloads: `tokens` (N samples x 1,024 int32, fixed length) and `images` (M 64x64 RGB JPEGs decoded
with Pillow to uint8 arrays), batch 32, global shuffle (or each peer's closest equivalent). Every
(reader, workload, num_workers) configuration runs in its own subprocess, one at a time, so its peak
RSS is its own. Generated data is kept under /tmp/dsinspect-bench between runs ($DSINSPECT_BENCH_DIR).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
from result_file import new_result

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # this checkout's dsinspect, not whichever one is installed
RESULTS = HERE / "results"
ROOT = Path(os.environ.get("DSINSPECT_BENCH_DIR", "/tmp/dsinspect-bench"))

SEQ = 1024          # tokens per sample
SIDE = 64           # image side
BATCH = 32
SEED = 7            # the shuffle seed every reader gets
DATA_SEED = 20250101
VOCAB = 50_257
SIZES = {"full": {"tokens": 100_000, "images": 20_000}, "quick": {"tokens": 10_000, "images": 2_000},
         "large": {"tokens": 1_000_000, "images": 20_000}}  # large: 4 GB of tokens (--cold --large)
WARMUP_BATCHES = {"full": 20, "quick": 8, "large": 20}
SEGMENTS = 3        # throughput: median of this many consecutive timed segments of one pass
TTFB_REPEATS = 3
CHILD_TIMEOUT = 300

# Readers measured for the headline ratios, and extra variants recorded for context.
PEERS = ("torch-arrow", "torchdata-stateful", "hf-datasets", "mosaic-streaming", "litdata")
CONFIGS = [  # (reader, workload, num_workers)
    *[(r, w, nw) for w in ("tokens", "images") for r in ("dsinspect", *PEERS) for nw in (0, 2)],
    ("dsinspect-torchloader", "tokens", 0),   # the TorchLoader adapter without workers (extra)
    ("dsinspect-prefetch2", "tokens", 0),     # Loader(prefetch=2): a read-ahead thread (extra)
    ("dsinspect-prefetch2", "images", 0),
    ("torch-arrow-rows", "tokens", 0),        # per-row __getitem__ + default collate (extra)
    ("torch-arrow-rows", "tokens", 2),
    ("hf-datasets-arrow", "tokens", 0),       # HF with_format("arrow") instead of numpy (extra)
    ("hf-datasets-arrow", "tokens", 2),
    # TorchLoader(batches_per_transfer=1): one DataLoader item per batch (extra)
    ("dsinspect-run1", "tokens", 2),
    ("dsinspect-run1", "images", 2),
    # the framework adapters (issue #19) against each framework's own usual loader (extras)
    ("dsinspect-jax", "tokens", 0),           # JaxBatches: global jax.Arrays (fixed-shape columns only)
    *[(r, w, nw) for r in ("dsinspect-grain", "grain") for w in ("tokens", "images") for nw in (0, 2)],
    ("dsinspect-hf", "tokens", 0),            # as_iterable rows, batched by datasets' own iter()
    ("dsinspect-hf", "images", 0),
]
EXTRA = {"dsinspect-torchloader", "dsinspect-prefetch2", "torch-arrow-rows", "hf-datasets-arrow", "dsinspect-run1"}


# ==================================================================================================
# data: generated once per size into ROOT, reused by later runs
# ==================================================================================================

def data_dir(mode: str) -> Path:
    n = SIZES[mode]
    return ROOT / f"data-t{n['tokens']}x{SEQ}-i{n['images']}x{SIDE}-s{DATA_SEED}"


def _dsinspect_writer_key() -> str:
    """The dsinspect catalog is rewritten when the writing code changes (its files' hash)."""
    h = hashlib.sha256()
    for name in ("store/writer.py", "format/manifest.py", "format/canonical.py", "store/catalog.py",
                 "format/arrow_types.py", "store/version.py"):
        h.update((REPO / "dsinspect" / "loaders" / name).read_bytes())
    return h.hexdigest()[:12]


def paths(mode: str) -> dict[str, Path]:
    d = data_dir(mode)
    key = os.environ.get("DSINSPECT_BENCH_CATALOG_KEY") or _dsinspect_writer_key()
    return {"dir": d, "tokens_arrow": d / "tokens.arrow", "images_arrow": d / "images.arrow",
            "catalog": d / f"dsinspect-catalog-{key}", "hf_tokens": d / "hf-tokens",
            "hf_images": d / "hf-images", "mds_tokens": d / "mds-tokens", "mds_images": d / "mds-images",
            "lit_tokens": d / "litdata-tokens", "lit_images": d / "litdata-images"}


def _done(p: Path) -> bool:
    return (p / ".complete").exists() if p.is_dir() else p.exists()


def _mark(p: Path) -> None:
    (p / ".complete").write_text("ok\n")


def _fresh(p: Path) -> Path:
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    return p


def _write_arrow(path: Path, table: pa.Table) -> None:
    tmp = path.with_suffix(".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=table.num_rows)  # one record batch: contiguous columns
    os.replace(tmp, path)


def _tokens_array(path: Path) -> np.ndarray:
    """The (N, SEQ) int32 token matrix, a zero-copy view of the memory-mapped Arrow file."""
    rb = pa.ipc.open_file(pa.memory_map(str(path))).get_batch(0)
    col = rb.column(0)
    return col.values.to_numpy(zero_copy_only=True)[col.offset * SEQ:(col.offset + len(col)) * SEQ].reshape(-1, SEQ)


def _image_bytes(path: Path) -> pa.Array:
    return pa.ipc.open_file(pa.memory_map(str(path))).get_batch(0).column(0)


def make_image(i: int) -> bytes:
    """A 64x64 RGB JPEG drawn from seed DATA_SEED + i: a gradient, three shapes, light noise."""
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(DATA_SEED + i)
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32) / SIDE
    c0, c1 = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = (x * rng.random() + y * (1 - rng.random()))[..., None] / 2
    pix = c0 * (1 - t) + c1 * t + rng.normal(0, 6, (SIDE, SIDE, 3))
    img = Image.fromarray(np.clip(pix, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(3):
        a, b = rng.integers(0, SIDE, 2), rng.integers(0, SIDE, 2)
        box = [int(min(a[0], b[0])), int(min(a[1], b[1])), int(max(a[0], b[0])) + 1, int(max(a[1], b[1])) + 1]
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90)
    return out.getvalue()


def _lit_tokens(args):  # litdata.optimize workers (module level: picklable)
    path, start, stop = args
    arr = _tokens_array(Path(path))
    for i in range(start, stop):
        yield {"tokens": np.array(arr[i])}


def _lit_images(args):
    path, start, stop = args
    col = _image_bytes(Path(path))
    for i in range(start, stop):
        yield {"image": col[i].as_py()}


# which reader needs which written format (the Arrow sources are always written: the others come from them)
_FORMAT_OF = {"hf_": "hf-datasets", "mds_": "mosaic-streaming", "lit_": "litdata", "catalog": "dsinspect"}


def prepare(mode: str, log, readers: set[str] | None = None) -> dict[str, float]:
    """Write every format that is not there yet (only those `readers` need, when given); seconds
    spent per format."""
    n = SIZES[mode]
    p = paths(mode)
    p["dir"].mkdir(parents=True, exist_ok=True)
    spent: dict[str, float] = {}
    needed = None if readers is None else {r.split("-")[0] if r.startswith("dsinspect") else r for r in readers}

    def step(name, path, fn):
        if _done(path):
            return
        key = next((k for k, v in p.items() if v == path), "")
        owner = next((r for prefix, r in _FORMAT_OF.items() if key.startswith(prefix)), None)
        if needed is not None and owner is not None and owner not in needed:
            return
        log(f"  writing {name} ...")
        t0 = time.perf_counter()
        fn()
        spent[name] = round(time.perf_counter() - t0, 1)
        log(f"  {name}: {spent[name]} s")

    def tokens_source():
        rng = np.random.default_rng(DATA_SEED)
        tok = rng.integers(0, VOCAB, size=(n["tokens"], SEQ), dtype=np.int32)
        _write_arrow(p["tokens_arrow"],
                     pa.table({"tokens": pa.FixedSizeListArray.from_arrays(pa.array(tok.ravel()), SEQ)}))

    def images_source():
        _write_arrow(p["images_arrow"],
                     pa.table({"image": pa.array([make_image(i) for i in range(n["images"])], pa.binary())}))

    step("tokens.arrow (source, also the torch/torchdata file)", p["tokens_arrow"], tokens_source)
    step("images.arrow (source, also the torch/torchdata file)", p["images_arrow"], images_source)

    def dsinspect_catalog():
        from dsinspect.loaders import Catalog, Field
        for old in p["dir"].glob("dsinspect-catalog-*"):  # written by older writer code
            shutil.rmtree(old, ignore_errors=True)
        cat = Catalog(str(_fresh(p["catalog"])))
        tok = _tokens_array(p["tokens_arrow"])

        def token_batches(chunk=10_000):
            for s in range(0, len(tok), chunk):
                part = tok[s:s + chunk]
                offsets = pa.array(np.arange(0, part.size + 1, SEQ, dtype=np.int32))
                yield pa.record_batch({"id": pa.array(np.arange(s, s + len(part)), pa.int64()),
                                       "tokens": pa.ListArray.from_arrays(offsets, pa.array(part.ravel()))})
        vt = cat.write_version("tokens", token_batches(), [Field("id", pa.int64(), "scalar", nullable=False),
                                                           Field("tokens", pa.list_(pa.int32()), "tokens")],
                               key="id", created_at="2025-01-01T00:00:00+00:00")
        img = _image_bytes(p["images_arrow"])
        table = pa.table({"id": pa.array(np.arange(len(img)), pa.int64()), "image": img})
        vi = cat.write_version("images", table, [Field("id", pa.int64(), "scalar", nullable=False),
                                                 Field("image", pa.binary(), "image")],
                               key="id", created_at="2025-01-01T00:00:00+00:00")
        (p["catalog"] / "bench.json").write_text(json.dumps({"tokens": vt.id, "images": vi.id}))
        _mark(p["catalog"])

    step("dsinspect catalog (write_version)", p["catalog"], dsinspect_catalog)

    def hf(kind):
        import datasets
        datasets.disable_progress_bars()
        if kind == "tokens":
            rb = pa.ipc.open_file(pa.memory_map(str(p["tokens_arrow"]))).get_batch(0)
            ds = datasets.Dataset.from_dict({"tokens": rb.column(0)})  # FixedSizeListArray: the fast path
        else:
            ds = datasets.Dataset.from_dict({"image": _image_bytes(p["images_arrow"])})
        out = _fresh(p[f"hf_{kind}"])
        ds.save_to_disk(str(out / "ds"))
        _mark(out)

    step("HF datasets tokens (save_to_disk)", p["hf_tokens"], lambda: hf("tokens"))
    step("HF datasets images (save_to_disk)", p["hf_images"], lambda: hf("images"))

    def mds(kind):
        install_streaming_stubs()
        from streaming import MDSWriter
        out = _fresh(p[f"mds_{kind}"])
        if kind == "tokens":
            tok = _tokens_array(p["tokens_arrow"])
            with MDSWriter(out=str(out / "ds"), columns={"tokens": f"ndarray:int32:{SEQ}"}, compression=None) as w:
                for row in tok:
                    w.write({"tokens": row})
        else:
            col = _image_bytes(p["images_arrow"])
            with MDSWriter(out=str(out / "ds"), columns={"image": "bytes"}, compression=None) as w:
                for b in col.to_pylist():
                    w.write({"image": b})
        _mark(out)

    step("MDS tokens (MDSWriter)", p["mds_tokens"], lambda: mds("tokens"))
    step("MDS images (MDSWriter)", p["mds_images"], lambda: mds("images"))

    def lit(kind):
        import litdata
        out = _fresh(p[f"lit_{kind}"])
        total, src = (n["tokens"], p["tokens_arrow"]) if kind == "tokens" else (n["images"], p["images_arrow"])
        step_rows = max(1, total // 20)
        inputs = [(str(src), s, min(total, s + step_rows)) for s in range(0, total, step_rows)]
        litdata.optimize(fn=_lit_tokens if kind == "tokens" else _lit_images, inputs=inputs,
                         output_dir=str(out / "ds"), chunk_bytes="64MB", num_workers=os.cpu_count() or 1,
                         verbose=False, start_method="fork")
        _mark(out)

    step("litdata tokens (optimize)", p["lit_tokens"], lambda: lit("tokens"))
    step("litdata images (optimize)", p["lit_images"], lambda: lit("images"))
    return spent


def warm_page_cache(mode: str) -> tuple[int, float]:
    """Read every data file once (so all readers start from a warm page cache): bytes, seconds."""
    total, t0 = 0, time.perf_counter()
    buf = bytearray(8 << 20)
    for dirpath, _, files in os.walk(data_dir(mode)):
        for f in files:
            with open(os.path.join(dirpath, f), "rb", buffering=0) as fh:
                while (k := fh.readinto(buf)):
                    total += k
    return total, time.perf_counter() - t0


def warm_shard_cache(mode: str, cache: str) -> float:
    """Fill the (temp) dsinspect shard cache with every shard of both versions: seconds."""
    os.environ["DSINSPECT_CACHE"] = cache
    from dsinspect.loaders import Catalog
    from dsinspect.loaders.read.cache import ShardCache
    p = paths(mode)
    ids = json.loads((p["catalog"] / "bench.json").read_text())
    cat, sc = Catalog(str(p["catalog"])), ShardCache()
    t0 = time.perf_counter()
    for name, vid in ids.items():
        v = cat.version(name, vid)
        for k in range(len(v.manifest.shards)):
            sc.open(v, k).release()
    return time.perf_counter() - t0


# ==================================================================================================
# shared pieces the readers use
# ==================================================================================================

def decode_many(blobs) -> np.ndarray:
    """JPEG bytes -> (n, 64, 64, 3) uint8 with Pillow: the decode every image reader uses."""
    from PIL import Image
    out = np.empty((len(blobs), SIDE, SIDE, 3), np.uint8)
    for i, b in enumerate(blobs):
        out[i] = np.asarray(Image.open(io.BytesIO(b)))
    return out


def install_streaming_stubs() -> None:
    """mosaicml-streaming imports torchvision (its vision datasets) and transformers (an isinstance
    check in its DataLoader) at `import streaming`. torchvision's PyPI wheel cannot load beside the
    CPU torch here and transformers<5 would downgrade tokenizers, so both are replaced by empty
    modules; the MDS read path used here touches neither."""
    if any(isinstance(f, _StubFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _StubFinder())


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    roots = ("transformers", "torchvision")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def missing(attr, _name=spec.name):
            if attr.startswith("__"):
                raise AttributeError(attr)
            def fail(*a, **k):
                raise ImportError(f"{_name}.{attr} is a benchmark stub (not installed here)")
            return type(attr, (), {"__init__": fail})
        module.__getattr__ = missing
        return module

    def exec_module(self, module):
        pass


class SlicedPermutation:
    """A seeded torch.randperm, optionally from an offset: RandomSampler's order, resumable (the
    closest equivalent of a saved position for loaders without state)."""

    def __init__(self, n: int, seed: int, start: int = 0):
        self.n, self.seed, self.start = n, seed, start

    def __iter__(self):
        import torch
        g = torch.Generator().manual_seed(self.seed)
        return iter(torch.randperm(self.n, generator=g)[self.start:].tolist())

    def __len__(self):
        return self.n - self.start


def _identity(x):
    return x


def _collate_images(samples):
    import torch
    return torch.from_numpy(decode_many([s["image"] for s in samples]))


class ArrowRows:
    """Map-style dataset over a memory-mapped Arrow IPC file. `__getitems__` makes torch's fetcher
    read the 32 sampled rows at once (one numpy gather, or 32 decodes); `batched=False` leaves
    only `__getitem__` (one row at a time + default collate)."""

    def __init__(self, path: str, workload: str, batched: bool = True):
        self.workload = workload
        if workload == "tokens":
            self.arr = _tokens_array(Path(path))
            self.n = len(self.arr)
        else:
            col = _image_bytes(Path(path))
            self.offsets = np.frombuffer(col.buffers()[1], np.int32)[col.offset:col.offset + len(col) + 1]
            self.data = memoryview(col.buffers()[2])
            self.n = len(col)
        if not batched:
            self.__getitems__ = None

    def __len__(self):
        return self.n

    def _blob(self, i):
        return self.data[self.offsets[i]:self.offsets[i + 1]]

    def __getitem__(self, i):
        import torch
        if self.workload == "tokens":
            return torch.from_numpy(np.array(self.arr[i]))
        return torch.from_numpy(decode_many([self._blob(i)])[0])

    def __getitems__(self, idx):
        import torch
        if self.workload == "tokens":
            return torch.from_numpy(self.arr[np.asarray(idx)])
        return torch.from_numpy(decode_many([self._blob(i) for i in idx]))


def batch_digest(arr) -> str:
    import xxhash
    a = arr.numpy() if hasattr(arr, "numpy") else np.asarray(arr)
    return xxhash.xxh3_64_hexdigest(np.ascontiguousarray(a).tobytes()) + f"/{tuple(a.shape)}/{a.dtype}"


# ==================================================================================================
# readers: open(resume) -> loader (iterable of batches); state(loader, batches) -> saved state;
# array(batch) -> the batch's tokens or decoded images
# ==================================================================================================

class Reader:
    stateful = True   # False: resume = a sliced seeded permutation (no loader state exists)

    def __init__(self, mode, workload, nw):
        self.mode, self.workload, self.nw = mode, workload, nw
        self.p = paths(mode)
        self.n = SIZES[mode][workload]

    def close(self, loader):
        pass


class DsinspectReader(Reader):
    variant = "loader"
    torch_loader_options: dict = {}

    def setup(self):
        from dsinspect.loaders import Catalog, Loader, RunSpec  # noqa: F401
        if self.nw > 0 or self.variant == "torch":
            import dsinspect.loaders.pytorch  # noqa: F401
        self.ids = json.loads((self.p["catalog"] / "bench.json").read_text())

    def _spec(self):
        from dsinspect.loaders import Catalog, RunSpec
        cat = Catalog(str(self.p["catalog"]))
        spec = RunSpec.create(cat, f"{self.workload}@{self.ids[self.workload][:16]}", seed=SEED, batch_size=BATCH,
                              shuffle="global")
        return cat, spec

    def open(self, resume=None):
        cat, spec = self._spec()
        if self.nw == 0 and self.variant != "torch":
            from dsinspect.loaders import Loader
            transform = ((lambda b: decode_many(b.table.column("image").to_pylist()))
                         if self.workload == "images" else None)
            options = {"prefetch": 2} if self.variant == "prefetch2" else {}  # else the library's default
            loader = Loader(spec, 0, cat, columns=[self._column()], transform=transform, **options)
        else:
            from dsinspect.loaders.pytorch import TorchBatches, TorchLoader
            if self.workload == "images":
                ds = TorchBatches(spec, cat, columns=["image"], transform=_torch_decode_transform)
            else:
                ds = TorchBatches(spec, cat, columns=["tokens"], dense=["tokens"])
            loader = TorchLoader(ds, num_workers=self.nw, **self.torch_loader_options)
        if resume is not None:
            loader.load_state_dict(resume)
        return loader

    def _column(self):
        return "tokens" if self.workload == "tokens" else "image"

    def state(self, loader, batches):
        return loader.state_dict()

    def array(self, batch):
        if isinstance(batch, dict):
            return batch["tokens"] if self.workload == "tokens" else batch["transformed"]
        return batch.to_numpy()["tokens"] if self.workload == "tokens" else batch.transformed

    def close(self, loader):
        loader.close()


def _torch_decode_transform(batch):
    import torch
    return torch.from_numpy(decode_many(batch.table.column("image").to_pylist()))


class DsinspectTorchReader(DsinspectReader):
    variant = "torch"


class DsinspectPrefetchReader(DsinspectReader):
    variant = "prefetch2"


class DsinspectRun1Reader(DsinspectReader):
    torch_loader_options = {"batches_per_transfer": 1}


class TorchArrowReader(Reader):
    stateful = False
    batched = True

    def setup(self):
        import torch  # noqa: F401

    def open(self, resume=None):
        from torch.utils.data import DataLoader
        ds = ArrowRows(str(self.p[f"{self.workload}_arrow"]), self.workload, self.batched)
        sampler = SlicedPermutation(len(ds), SEED, resume or 0)
        return DataLoader(ds, batch_size=BATCH, sampler=sampler, drop_last=True, num_workers=self.nw,
                          collate_fn=_identity if self.batched else None)

    def state(self, loader, batches):
        return batches * BATCH

    def array(self, batch):
        return batch


class TorchArrowRowsReader(TorchArrowReader):
    batched = False


class StatefulReader(Reader):
    def setup(self):
        from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: F401

    def open(self, resume=None):
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader
        ds = ArrowRows(str(self.p[f"{self.workload}_arrow"]), self.workload)
        loader = StatefulDataLoader(ds, batch_size=BATCH, shuffle=True, drop_last=True, num_workers=self.nw,
                                    collate_fn=_identity, generator=torch.Generator().manual_seed(SEED))
        if resume is not None:
            loader.load_state_dict(resume)
        return loader

    def state(self, loader, batches):
        return loader.state_dict()

    def array(self, batch):
        return batch


class HFReader(Reader):
    stateful = False
    fmt = "numpy"

    def setup(self):
        import datasets
        datasets.disable_progress_bars()
        import torch  # noqa: F401

    def open(self, resume=None):
        import datasets
        from torch.utils.data import BatchSampler, DataLoader
        ds = datasets.load_from_disk(str(self.p[f"hf_{self.workload}"] / "ds"))  # memory-mapped Arrow
        if self.workload == "images":
            ds.set_transform(_hf_decode)
        else:
            ds = ds.with_format(self.fmt)
        sampler = BatchSampler(SlicedPermutation(len(ds), SEED, resume or 0), BATCH, drop_last=True)
        # batch_size=None: each fetch is ds[list of 32 indices] (one Arrow take), then default_convert
        return DataLoader(ds, sampler=sampler, batch_size=None, num_workers=self.nw,
                          collate_fn=_hf_arrow_collate if self.fmt == "arrow" else None)

    def state(self, loader, batches):
        return batches * BATCH

    def array(self, batch):
        return batch["tokens"] if self.workload == "tokens" else batch["image"]


def _hf_decode(batch):
    return {"image": decode_many(batch["image"])}


def _hf_arrow_collate(table):
    import torch
    col = table.column("tokens").combine_chunks()
    return {"tokens": torch.from_numpy(col.flatten().to_numpy().reshape(len(col), SEQ))}


class HFArrowReader(HFReader):
    fmt = "arrow"


class MosaicReader(Reader):
    def setup(self):
        install_streaming_stubs()
        import streaming
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
        self._streaming = streaming

    def open(self, resume=None):
        from streaming import StreamingDataLoader, StreamingDataset
        ds = StreamingDataset(local=str(self.p[f"mds_{self.workload}"] / "ds"), shuffle=True, shuffle_seed=SEED,
                              shuffle_algo="naive", batch_size=BATCH)
        if resume is not None:
            ds.load_state_dict(resume)
        return StreamingDataLoader(ds, batch_size=BATCH, num_workers=self.nw, drop_last=True,
                                   collate_fn=_collate_images if self.workload == "images" else None)

    def state(self, loader, batches):
        return loader.state_dict()

    def array(self, batch):
        return batch["tokens"] if self.workload == "tokens" else batch

    def close(self, loader):
        del loader
        gc.collect()  # releases the dataset's shared memory, so another can open the same directory


class LitReader(Reader):
    def setup(self):
        import litdata  # noqa: F401

    def open(self, resume=None):
        import litdata
        ds = litdata.StreamingDataset(str(self.p[f"lit_{self.workload}"] / "ds"), shuffle=True, seed=SEED,
                                      drop_last=True)
        loader = litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=self.nw, drop_last=True,
                                             collate_fn=_collate_images if self.workload == "images" else None)
        if resume is not None:
            loader.load_state_dict(resume)
        return loader

    def state(self, loader, batches):
        return loader.state_dict()

    def array(self, batch):
        return batch["tokens"] if self.workload == "tokens" else batch


class DsinspectJaxReader(DsinspectReader):
    """dsinspect's JaxBatches (one process, one device): global jax.Arrays. Tokens only: it takes
    fixed-shape columns (images are bytes until decoded)."""

    def setup(self):
        super().setup()
        if self.workload != "tokens" or self.nw:
            raise SystemExit("dsinspect-jax: tokens at 0 workers only")
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        self.sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))

    def open(self, resume=None):
        from dsinspect.loaders.jax import JaxBatches
        cat, spec = self._spec()
        batches = JaxBatches(spec, cat, self.sharding, columns=["tokens"], prefetch=0)
        if resume is not None:
            batches.load_state_dict(resume)
        return batches

    def array(self, batch):
        return np.asarray(batch["tokens"])


class _GrainTokens:
    """Grain's own usual path: a random-access source of rows (here the memory-mapped token matrix,
    as an ArrayRecord file would be) that Grain shuffles and batches itself."""

    def __init__(self, path):
        self.path, self.arr = str(path), None

    def __len__(self):
        return len(self._rows())

    def __getitem__(self, i):
        return self._rows()[i]

    def _rows(self):
        if self.arr is None:
            self.arr = _tokens_array(Path(self.path))
        return self.arr

    def __getstate__(self):
        return {"path": self.path, "arr": None}


class _GrainImages(_GrainTokens):
    def _rows(self):
        if self.arr is None:
            self.arr = _image_bytes(Path(self.path))
        return self.arr

    def __getitem__(self, i):
        return self._rows()[i].as_py()


def _decode_one(blob):  # Grain worker processes: module level
    return decode_many([blob])[0]


def _decode_column(element):
    return {**element, "image": decode_many(list(element["image"]))}


class _GrainReader(Reader):
    def setup(self):
        import grain  # noqa: F401
        from absl import flags
        flags.FLAGS.mark_as_parsed()  # Grain's worker processes read its flags

    def _iterate(self, dataset, resume):
        import grain
        if self.nw:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=self.nw))
        it = iter(dataset)
        if resume is not None:
            it.set_state(resume)
        return it

    def state(self, loader, batches):
        return loader.get_state()

    def close(self, loader):
        close = getattr(loader, "close", None)
        if close is not None:
            close()


class GrainNativeReader(_GrainReader):
    """Grain alone: its shuffle and batching over a random-access source of rows."""

    def open(self, resume=None):
        import grain
        if self.workload == "tokens":
            ds = grain.MapDataset.source(_GrainTokens(self.p["tokens_arrow"])).shuffle(seed=SEED).batch(BATCH)
        else:
            ds = grain.MapDataset.source(_GrainImages(self.p["images_arrow"])).shuffle(seed=SEED).map(
                _decode_one).batch(BATCH)
        return self._iterate(ds.to_iter_dataset(), resume)

    def array(self, batch):
        return batch


class DsinspectGrainReader(_GrainReader, DsinspectReader):
    """dsinspect's order under Grain: StepSource (a rank's batches), Grain's workers and state."""

    def setup(self):
        DsinspectReader.setup(self)
        _GrainReader.setup(self)

    def open(self, resume=None):
        import grain

        from dsinspect.loaders.grain import StepSource
        cat, spec = self._spec()
        ds = grain.MapDataset.source(StepSource(spec, cat, columns=[self._column()]))
        if self.workload == "images":
            ds = ds.map(_decode_column)
        return self._iterate(ds.to_iter_dataset(), resume)

    def array(self, batch):
        return batch[self._column()]


class DsinspectHFReader(DsinspectReader):
    """dsinspect's order as a Hugging Face IterableDataset (rows), batched by datasets' own `iter`."""

    def setup(self):
        super().setup()
        if self.nw:
            raise SystemExit("dsinspect-hf: 0 workers only (datasets iterates in this process)")
        import datasets  # noqa: F401

    def open(self, resume=None):
        from dsinspect.loaders.hf import as_iterable
        cat, spec = self._spec()
        self._spec_now = spec
        rows = as_iterable(spec, cat, columns=[self._column()], start_state=resume)
        return rows.with_format("numpy").iter(batch_size=BATCH)

    def state(self, loader, batches):
        from dsinspect.loaders import LoaderState
        return LoaderState.at(self._spec_now, batches, 0).to_json()

    def array(self, batch):
        return batch["tokens"] if self.workload == "tokens" else decode_many(list(batch["image"]))

    def close(self, loader):
        pass


READERS = {"dsinspect": DsinspectReader, "dsinspect-torchloader": DsinspectTorchReader,
           "dsinspect-prefetch2": DsinspectPrefetchReader, "torch-arrow": TorchArrowReader,
           "torch-arrow-rows": TorchArrowRowsReader, "torchdata-stateful": StatefulReader,
           "hf-datasets": HFReader, "hf-datasets-arrow": HFArrowReader, "mosaic-streaming": MosaicReader,
           "litdata": LitReader, "dsinspect-run1": DsinspectRun1Reader, "dsinspect-jax": DsinspectJaxReader,
           "dsinspect-grain": DsinspectGrainReader, "grain": GrainNativeReader, "dsinspect-hf": DsinspectHFReader}

DESCRIBE = {
    "dsinspect": "nw=0: Loader(spec) with the default prefetch -> batch.to_numpy(); nw=2: TorchLoader(TorchBatches"
                 "(dense=['tokens'])); images: transform= Pillow decode of the batch's bytes. Catalog of zstd Parquet "
                 "shards, read through the node-local shard cache (Arrow IPC, memory-mapped), global shuffle",
    "dsinspect-torchloader": "TorchLoader(TorchBatches) with num_workers=0 (the torch adapter's own cost)",
    "dsinspect-prefetch2": "Loader(prefetch=2): batches assembled ahead in a thread",
    "dsinspect-run1": "as dsinspect at nw=2 with TorchLoader(batches_per_transfer=1): each batch one DataLoader item "
                      "(the shared-memory ring without runs of batches)",
    "torch-arrow": "torch DataLoader, map-style dataset over a memory-mapped Arrow IPC file, seeded randperm "
                   "sampler (RandomSampler's order), batch_size=32 with __getitems__: one numpy gather (or 32 decodes) "
                   "per batch, identity collate. Resume: the permutation sliced at the saved offset (no loader state)",
    "torch-arrow-rows": "as torch-arrow but one __getitem__ per sample + default collate",
    "torchdata-stateful": "torchdata StatefulDataLoader(shuffle=True) over the torch-arrow dataset; resume with its "
                          "state_dict/load_state_dict",
    "hf-datasets": "datasets.load_from_disk (memory-mapped) .with_format('numpy') (tokens come back int64); images: "
                   "set_transform(Pillow decode); DataLoader(batch_size=None, sampler=BatchSampler(seeded randperm)), "
                   "i.e. ds[32 indices] per batch. Resume: the permutation sliced at the offset",
    "hf-datasets-arrow": "as hf-datasets with .with_format('arrow') and a collate to an int32 tensor",
    "mosaic-streaming": "MDSWriter (ndarray:int32:1024 / bytes, no compression); StreamingDataset(local, shuffle=True, "
                        "shuffle_algo='naive' = global) + StreamingDataLoader; resume via its state_dict",
    "litdata": "litdata.optimize (64 MB chunks); StreamingDataset(shuffle=True: chunk order + in-chunk shuffle) + "
               "StreamingDataLoader; resume via its state_dict",
    "dsinspect-jax": "JaxBatches(spec, sharding over the one CPU device, columns=['tokens']) -> np.asarray of the "
                     "global jax.Array; resume via its state_dict",
    "dsinspect-grain": "grain.MapDataset.source(StepSource(spec)) (+ .map(Pillow decode) for images), "
                       "to_iter_dataset(), mp_prefetch(num_workers) at 2 workers; resume via Grain's iterator state",
    "grain": "Grain alone: MapDataset.source(rows of the memory-mapped Arrow file, as an ArrayRecord source would "
             "give them).shuffle(seed).batch(32) (images: .map(decode) first), mp_prefetch at 2 workers; resume via "
             "Grain's iterator state",
    "dsinspect-hf": "as_iterable(spec) rows .with_format('numpy').iter(batch_size=32) (images: Pillow decode of the "
                    "batch); resume: as_iterable(start_state=LoaderState at the step)",
}


# ==================================================================================================
# measuring one configuration (child process)
# ==================================================================================================

def _status(pid) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "RssAnon:", "RssFile:", "RssShmem:")):
                    k, v = line.split(":", 1)
                    out[k + ":"] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def _children(pid) -> list[int]:
    kids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


class RssSampler(threading.Thread):
    """Samples the RSS of this process and its workers every 10 ms: peaks of the sum (VmRSS, which
    counts touched pages of memory-mapped files) and of private anonymous memory (RssAnon)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_total = self.peak_anon = self.peak_self = 0
        self.peak_workers = 0
        self._halt = threading.Event()

    def sample(self) -> dict[str, int]:
        me = os.getpid()
        pids = [me]
        frontier = [me]
        while frontier:
            kids = [k for p in frontier for k in _children(p)]
            pids += kids
            frontier = kids
        rows = {pid: _status(pid) for pid in pids}
        total = sum(r.get("VmRSS:", 0) for r in rows.values())
        anon = sum(r.get("RssAnon:", 0) for r in rows.values())
        mine = rows[me].get("VmRSS:", 0)
        self.peak_total, self.peak_anon = max(self.peak_total, total), max(self.peak_anon, anon)
        self.peak_self, self.peak_workers = max(self.peak_self, mine), max(self.peak_workers, len(pids) - 1)
        return {"total": total, "anon": anon, "self": mine}

    def run(self):
        while not self._halt.wait(0.01):
            self.sample()

    def stop(self):
        self._halt.set()
        self.join()


def _code_state() -> str:
    """The dsinspect commit this configuration ran, with a hash of uncommitted changes to the package
    (other engineers change it while a run goes on)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        diff = subprocess.run(["git", "-C", str(REPO), "diff", "HEAD", "--", "dsinspect"], capture_output=True).stdout
        return head + (f"+dirty:{hashlib.sha256(diff).hexdigest()[:8]}" if diff else "")
    except OSError:
        return "?"


def child(cfg: dict) -> dict:
    mode, name, workload, nw = cfg["mode"], cfg["reader"], cfg["workload"], cfg["nw"]
    rss = RssSampler()
    reader = READERS[name](mode, workload, nw)
    t0 = time.perf_counter()
    reader.setup()
    import torch
    torch.set_num_threads(1)
    import_s = time.perf_counter() - t0
    gc.collect()
    base = rss.sample()
    rss.start()
    epoch_batches = reader.n // BATCH
    warm = WARMUP_BATCHES[mode]
    seg = (epoch_batches - warm - 2) // SEGMENTS
    half = epoch_batches // 2
    result: dict = {"reader": name, "workload": workload, "num_workers": nw, "import_s": round(import_s, 3),
                    "dsinspect_code": _code_state(),
                    "epoch_batches": epoch_batches, "warmup_batches": warm, "segment_batches": seg}

    # 1. one pass: first batch (a fresh process's first), warm-up, SEGMENTS timed segments; the state is
    #    saved after `half` batches (outside the timing), and the batch after it remembered
    t = time.perf_counter()
    loader = reader.open()
    it = iter(loader)
    first = next(it)
    reader.array(first)
    result["first_ttfb_ms_in_process"] = round((time.perf_counter() - t) * 1e3, 2)
    if hasattr(loader, "_prefetch"):
        result["loader_prefetch"] = loader._prefetch
    consumed, state, expected = 1, None, None
    for _ in range(warm):
        next(it)
        consumed += 1
    times = []
    for _ in range(SEGMENTS):
        excluded = 0.0
        t = time.perf_counter()
        for _ in range(seg):
            batch = next(it)
            arr = reader.array(batch)
            consumed += 1
            if consumed == half + 1 and expected is None and state is not None:
                te = time.perf_counter()
                expected = batch_digest(arr)
                excluded += time.perf_counter() - te
            if consumed == half and state is None:
                te = time.perf_counter()
                state = reader.state(loader, consumed)
                excluded += time.perf_counter() - te
        times.append(time.perf_counter() - t - excluded)
    if state is None:
        raise RuntimeError(f"pass too short to reach the 50% state ({consumed} < {half})")
    result["batch_shape"] = list(np.asarray(arr).shape) if not hasattr(arr, "shape") else list(arr.shape)
    result["batch_dtype"] = str(arr.dtype)
    del it, batch, first, arr
    reader.close(loader)
    del loader
    gc.collect()
    rates = [seg * BATCH / s for s in times]
    result["samples_per_s"] = round(statistics.median(rates), 1)
    result["samples_per_s_all"] = [round(r, 1) for r in rates]

    # 2. time to first batch, warm: construct + first batch in hand
    def first_batch(resume=None):
        t = time.perf_counter()
        loader = reader.open(resume)
        it = iter(loader)
        b = next(it)
        a = reader.array(b)
        elapsed = time.perf_counter() - t
        digest = batch_digest(a) if resume is not None else None
        del it, b, a
        reader.close(loader)
        del loader
        gc.collect()
        return elapsed, digest

    ttfb = [first_batch()[0] for _ in range(TTFB_REPEATS)]
    result["ttfb_ms"] = round(statistics.median(ttfb) * 1e3, 2)
    result["ttfb_ms_all"] = [round(x * 1e3, 2) for x in ttfb]

    # 3. resume: construct + load the state saved at 50% + first batch (and is it the right batch?)
    res, digests = [], set()
    for _ in range(TTFB_REPEATS):
        s, d = first_batch(state)
        res.append(s)
        digests.add(d)
    result["resume_ttfb_ms"] = round(statistics.median(res) * 1e3, 2)
    result["resume_ttfb_ms_all"] = [round(x * 1e3, 2) for x in res]
    result["resume_exact"] = digests == {expected}
    result["resume_state_bytes"] = len(json.dumps(state, default=str)) if not isinstance(state, int) else 0

    rss.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    MB = 1 << 20
    result["rss"] = {
        "base_mb": round(base["total"] / MB, 1), "base_anon_mb": round(base["anon"] / MB, 1),
        "peak_mb": round(rss.peak_total / MB, 1), "peak_anon_mb": round(rss.peak_anon / MB, 1),
        "growth_mb": round((rss.peak_total - base["total"]) / MB, 1),
        "growth_anon_mb": round((rss.peak_anon - base["anon"]) / MB, 1),
        "ru_maxrss_mb": round(usage.ru_maxrss / 1024, 1), "ru_maxrss_children_mb": round(kids.ru_maxrss / 1024, 1),
        "max_worker_processes": rss.peak_workers}
    return result


# ==================================================================================================
# baselines (child process)
# ==================================================================================================

class _TransferOnly:
    """An IterableDataset whose batches cost nothing to make (a fresh tensor of the batch's shape):
    what a DataLoader's worker -> main transfer alone allows."""

    def __init__(self, shape, dtype, batches):
        self.shape, self.dtype, self.batches = shape, dtype, batches

    def __iter__(self):
        import torch
        from torch.utils.data import get_worker_info
        info = get_worker_info()
        for _ in range(self.batches // (info.num_workers if info else 1)):
            yield torch.empty(self.shape, dtype=getattr(torch, self.dtype))


def transfer_ceiling(shape, dtype, batches: int, workers: int = 2) -> float:
    import torch
    from torch.utils.data import DataLoader, IterableDataset
    ds = type("TransferOnly", (_TransferOnly, IterableDataset), {})(shape, dtype, batches)
    rates = []
    for _ in range(3):
        it = iter(DataLoader(ds, batch_size=None, num_workers=workers))
        for _ in range(10):
            next(it)
        t, n = time.perf_counter(), 0
        for _ in it:
            n += 1
        rates.append(n * shape[0] / (time.perf_counter() - t))
        del it
    torch.set_num_threads(1)
    return statistics.median(rates)


def _decode_share(args):
    blobs, barrier_wait = args
    t = time.perf_counter()
    for b in blobs:
        decode_many([b])
    return time.perf_counter() - t


def baselines(cfg: dict) -> dict:
    mode = cfg["mode"]
    p = paths(mode)
    out: dict = {}
    # page-cache limit: memory-mapped token file, read sequentially (memcpy of 16 MiB chunks)
    buf = pa.memory_map(str(p["tokens_arrow"])).read_buffer()
    src = np.frombuffer(buf, np.uint8)
    dst = np.empty(16 << 20, np.uint8)
    rates = []
    for _ in range(3):
        t = time.perf_counter()
        for s in range(0, len(src), len(dst)):
            chunk = src[s:s + len(dst)]
            np.copyto(dst[:len(chunk)], chunk)
        rates.append(len(src) / (time.perf_counter() - t))
    out["page_cache_bytes_per_s"] = round(statistics.median(rates))
    out["page_cache_samples_per_s"] = round(statistics.median(rates) / (SEQ * 4), 1)
    out["page_cache_file_bytes"] = len(src)
    # gather ceiling: 32 shuffled rows per batch from the memory-mapped matrix, one numpy gather
    tok = _tokens_array(p["tokens_arrow"])
    rng = np.random.default_rng(0)
    batches = len(tok) // BATCH
    perm = rng.permutation(len(tok))[:batches * BATCH].reshape(batches, BATCH)
    for name, fn in (("gather_sorted", lambda i: tok[np.sort(i)]), ("gather_in_order", lambda i: tok[i])):
        rates = []
        for _ in range(3):
            t = time.perf_counter()
            for i in perm:
                fn(i)
            rates.append(batches * BATCH / (time.perf_counter() - t))
        out[f"{name}_samples_per_s"] = round(statistics.median(rates), 1)
    # Pillow: bare decode rate, one process, then two processes at once
    blobs = _image_bytes(p["images_arrow"]).to_pylist()
    n = min(len(blobs), 6400 if mode == "full" else 1000)
    rates = []
    for _ in range(3):
        t = time.perf_counter()
        for b in blobs[:n]:
            decode_many([b])
        rates.append(n / (time.perf_counter() - t))
    out["pillow_1proc_images_per_s"] = round(statistics.median(rates), 1)
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    rates = []
    with ctx.Pool(2) as pool:
        pool.map(_decode_share, [(blobs[:50], 0), (blobs[50:100], 0)])  # start both workers
        for _ in range(3):
            t = time.perf_counter()
            pool.map(_decode_share, [(blobs[:n], 0), (blobs[n:2 * n] or blobs[:n], 0)], chunksize=1)
            rates.append(2 * n / (time.perf_counter() - t))
    out["pillow_2proc_images_per_s"] = round(statistics.median(rates), 1)
    out["pillow_images_decoded_per_repeat"] = n
    # the DataLoader transfer ceiling with 2 workers: batches that cost nothing to make, one tensor each
    batches = 1500 if mode == "full" else 400
    out["transfer_2w_tokens_samples_per_s"] = round(transfer_ceiling((BATCH, SEQ), "int32", batches), 1)
    out["transfer_2w_images_samples_per_s"] = round(transfer_ceiling((BATCH, SIDE, SIDE, 3), "uint8", batches), 1)
    return out


# ==================================================================================================
# the parent: machine, load, running the children, tables
# ==================================================================================================

def _cpu_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / hz, sum(v[:8]) / hz


def busy_cores(seconds: float = 1.0) -> float:
    b0, _ = _cpu_busy()
    time.sleep(seconds)
    return (_cpu_busy()[0] - b0) / seconds


def wait_quiet(max_wait: float, log, threshold: float = 0.15) -> dict:
    """Wait (at most max_wait s) until the machine's CPU use stays under `threshold` cores for 3 s."""
    t0 = time.monotonic()
    quiet = 0
    while True:
        b = busy_cores(1.0)
        quiet = quiet + 1 if b < threshold else 0
        if quiet >= 3:
            return {"waited_s": round(time.monotonic() - t0, 1), "quiet": True, "busy_cores": round(b, 2)}
        if time.monotonic() - t0 > max_wait:
            log(f"    (machine still busy: {b:.2f} cores in use by others after {max_wait:.0f} s; measuring anyway)")
            return {"waited_s": round(time.monotonic() - t0, 1), "quiet": False, "busy_cores": round(b, 2)}


def run_child(kind: str, cfg: dict, env: dict, script: Path | None = None) -> tuple[dict, dict]:
    """Run one configuration in a fresh interpreter (`script --kind cfg`, this file by default);
    (its result or error, contention record)."""
    la0 = os.getloadavg()
    busy0, _ = _cpu_busy()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [sys.executable, str(script or Path(__file__).resolve()), f"--{kind}", json.dumps(cfg)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode == 0 and lines:
            res = json.loads(lines[-1][7:])
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
            res = {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    except subprocess.TimeoutExpired:
        res = {"error": f"timed out after {CHILD_TIMEOUT} s"}
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    foreign = max(0.0, (_cpu_busy()[0] - busy0) - own)
    contention = {"wall_s": round(wall, 1), "cpu_s": round(own, 1), "foreign_cpu_cores": round(foreign / wall, 2),
                  "loadavg_before": [round(x, 2) for x in la0], "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    return res, contention


def machine_info() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
            "cores": os.cpu_count(), "numpy": np.__version__, "pyarrow": pa.__version__}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
        with open("/proc/meminfo") as f:
            info["mem_gb"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version
    for pkg in ("torch", "torchdata", "datasets", "litdata", "mosaicml-streaming", "pillow", "dsinspect"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            info[pkg] = None
    try:
        info["dsinspect_git"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                               capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "dsinspect"],
                               capture_output=True, text=True).stdout.strip()
        info["dsinspect_git_dirty"] = bool(dirty)
    except OSError:
        pass
    return info


def _fmt_rate(x):
    if x is None:
        return "—"
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k" if x >= 1e4 else f"{x:,.0f}"


def _fmt_ms(x):
    return "—" if x is None else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def summarise(results: dict, base: dict) -> dict:
    """The ratios and targets, from the per-configuration results."""
    def get(reader, workload, nw, key):
        r = results.get(f"{reader}|{workload}|{nw}") or {}
        return r.get(key) if "error" not in r else None

    s: dict = {}
    for nw in (0, 2):
        peers = {p: get(p, "tokens", nw, "samples_per_s") for p in PEERS}
        peers = {k: v for k, v in peers.items() if v}
        best = max(peers, key=peers.get) if peers else None
        mine = get("dsinspect", "tokens", nw, "samples_per_s")
        s[f"tokens_nw{nw}"] = {"dsinspect": mine, "best_peer": best, "best_peer_samples_per_s": peers.get(best),
                               "ratio": round(mine / peers[best], 2) if mine and best else None,
                               "target": 3.0 if nw == 0 else 5.0,
                               "fraction_of_page_cache": round(mine / base["page_cache_samples_per_s"], 3)
                               if mine and base.get("page_cache_samples_per_s") else None,
                               "fraction_of_gather_ceiling": round(mine / base["gather_sorted_samples_per_s"], 3)
                               if mine and base.get("gather_sorted_samples_per_s") else None}
        pil = base.get("pillow_1proc_images_per_s" if nw == 0 else "pillow_2proc_images_per_s")
        mine = get("dsinspect", "images", nw, "samples_per_s")
        s[f"images_nw{nw}"] = {"dsinspect": mine, "pillow": pil,
                               "ratio": round(mine / pil, 3) if mine and pil else None,
                               "target": 0.95 if nw == 0 else 0.85}
    for w in ("tokens", "images"):
        s[f"ttfb_{w}_nw0_ms"] = get("dsinspect", w, 0, "ttfb_ms")
        s[f"resume_ttfb_{w}_nw0_ms"] = get("dsinspect", w, 0, "resume_ttfb_ms")
    return s


def targets_rows(s: dict, results: dict) -> list[tuple[str, str, str, str]]:
    rows = []

    def ok(cond):
        return "—" if cond is None else ("met" if cond else "**missed**")
    for nw in (0, 2):
        t = s[f"tokens_nw{nw}"]
        r = t["ratio"]
        rows.append((f"tokens, {nw} workers: dsinspect / best peer", f"≥ {t['target']:.0f}×",
                     f"{r:.2f}× ({_fmt_rate(t['dsinspect'])}/s vs {t['best_peer']} "
                     f"{_fmt_rate(t['best_peer_samples_per_s'])}/s)"
                     if r else "—", ok(r >= t["target"] if r else None)))
    for nw in (0, 2):
        t = s[f"images_nw{nw}"]
        r = t["ratio"]
        what = "Pillow, 1 process" if nw == 0 else "Pillow, 2 processes"
        rows.append((f"images, {nw} workers: dsinspect / {what}", f"≥ {t['target']:.0%}",
                     f"{r:.0%} ({_fmt_rate(t['dsinspect'])}/s vs {_fmt_rate(t['pillow'])}/s)" if r else "—",
                     ok(r >= t["target"] if r else None)))
    for w in ("tokens", "images"):
        a, b = s[f"ttfb_{w}_nw0_ms"], s[f"resume_ttfb_{w}_nw0_ms"]
        rows.append((f"{w}: time to first batch, 0 workers, warm", "≤ 10 ms", f"{_fmt_ms(a)} ms" if a else "—",
                     ok(a <= 10 if a else None)))
        rows.append((f"{w}: resume (50%) to first batch, 0 workers, warm", "≤ 10 ms", f"{_fmt_ms(b)} ms" if b else "—",
                     ok(b <= 10 if b else None)))
    for w in ("tokens", "images"):
        r0, r2 = (results.get(f"dsinspect|{w}|{nw}") or {} for nw in (0, 2))
        p0, p2 = (results.get(f"torch-arrow|{w}|{nw}") or {} for nw in (0, 2))
        if "rss" in r0 and "rss" in r2:
            peer = (f"; torch-arrow +{p0['rss']['growth_anon_mb']:.0f} / +{p2['rss']['growth_anon_mb']:.0f} and "
                    f"+{p0['rss']['growth_mb']:.0f} / +{p2['rss']['growth_mb']:.0f}"
                    if "rss" in p0 and "rss" in p2 else "")
            rows.append((f"{w}: peak RSS bounded by prefetch window + cache bound, not dataset size",
                         "bounded",
                         "growth over the process after imports, 0 / 2 workers: "
                         f"private (anon) +{r0['rss']['growth_anon_mb']:.0f} / +{r2['rss']['growth_anon_mb']:.0f} MB, "
                         f"with mapped file pages +{r0['rss']['growth_mb']:.0f} / "
                         f"+{r2['rss']['growth_mb']:.0f} MB{peer}",
                         "private memory: met (at 2 w it is the two worker processes themselves); mapped pages grow "
                         "with the data touched, as for every memory-mapping reader"))
    return rows


def render(results: dict, base: dict, summary: dict, meta: dict) -> str:
    lines = []
    sizes = SIZES[meta["mode"]]
    lines.append(f"Read benchmark, {meta['date']} — {meta['machine'].get('cores')} cores "
                 f"({meta['machine'].get('cpu', '?')}), {meta['machine'].get('mem_gb')} GB RAM, Python "
                 f"{meta['machine']['python']}, torch {meta['machine'].get('torch')}; load average at start "
                 f"{meta['loadavg_start'][0]:.2f}, at end {meta['loadavg_end'][0]:.2f}. "
                 f"tokens: {sizes['tokens']:,} × {SEQ} int32; images: {sizes['images']:,} JPEG {SIDE}×{SIDE} RGB; "
                 f"batch {BATCH}; global shuffle (or closest); warm page cache; samples/s = median of {SEGMENTS} "
                 f"segments of one pass; TTFB/resume = median of {TTFB_REPEATS}.")
    lines.append("")
    lines.append("| workload | reader | samples/s, 0 workers | samples/s, 2 workers | TTFB ms (0 / 2 w) | "
                 "resume→first batch ms (0 / 2 w) | resume exact | peak RSS MB, 0 w: total (anon) | "
                 "peak RSS MB, 2 w: total (anon) |")
    lines.append("|---|---|---:|---:|---:|---:|:-:|---:|---:|")
    names = ["dsinspect", *PEERS, *sorted(EXTRA)]
    for w in ("tokens", "images"):
        for name in names:
            r0, r2 = results.get(f"{name}|{w}|0"), results.get(f"{name}|{w}|2")
            if r0 is None and r2 is None:
                continue

            def cell(r, key, fmt):
                if r is None:
                    return "—"
                if "error" in r:
                    return "error"
                return fmt(r.get(key)) + (" †" if r.get("contended") and key == "samples_per_s" else "")

            def rss(r):
                if r is None or "error" in r:
                    return "—"
                return f"{r['rss']['peak_mb']:.0f} ({r['rss']['peak_anon_mb']:.0f})"

            def exact(r):
                return "—" if r is None or "error" in r else ("yes" if r["resume_exact"] else "no")
            label = f"{name}" + (" *(extra)*" if name in EXTRA else "")
            lines.append(f"| {w} | {label} | "
                         f"{cell(r0, 'samples_per_s', _fmt_rate)} | {cell(r2, 'samples_per_s', _fmt_rate)} | "
                         f"{cell(r0, 'ttfb_ms', _fmt_ms)} / {cell(r2, 'ttfb_ms', _fmt_ms)} | "
                         f"{cell(r0, 'resume_ttfb_ms', _fmt_ms)} / {cell(r2, 'resume_ttfb_ms', _fmt_ms)} | "
                         f"{exact(r0)} / {exact(r2)} | {rss(r0)} | {rss(r2)} |")
    lines.append("")
    lines.append("Baselines (same run): "
                 "page-cache read of the memory-mapped token file "
                 f"{base.get('page_cache_bytes_per_s', 0) / 1e9:.1f} GB/s "
                 f"= {_fmt_rate(base.get('page_cache_samples_per_s'))} samples/s; numpy gather of 32 shuffled rows "
                 f"from it {_fmt_rate(base.get('gather_sorted_samples_per_s'))} samples/s; Pillow decode "
                 f"{_fmt_rate(base.get('pillow_1proc_images_per_s'))} images/s (1 process), "
                 f"{_fmt_rate(base.get('pillow_2proc_images_per_s'))} images/s (2 processes); "
                 "torch DataLoader transfer ceiling with 2 workers (a batch that costs nothing to make, one tensor) "
                 f"{_fmt_rate(base.get('transfer_2w_tokens_samples_per_s'))} samples/s for token batches, "
                 f"{_fmt_rate(base.get('transfer_2w_images_samples_per_s'))} for image batches.")
    lines.append("")
    codes = sorted({r.get("dsinspect_code") for k, r in results.items()
                    if k.startswith("dsinspect") and "error" not in r})
    if len(codes) > 1:
        lines.append(f"Note: dsinspect's code changed during this run ({', '.join(map(str, codes))}); "
                     "each configuration's `dsinspect_code` is in the JSON.")
        lines.append("")
    lines.append("| target (the issue's) | wanted | measured | |")
    lines.append("|---|---|---|---|")
    for row in targets_rows(summary, results):
        lines.append("| " + " | ".join(row) + " |")
    errors = {k: v["error"] for k, v in results.items() if "error" in v}
    if errors:
        lines.append("")
        lines.append("Configurations that did not run: " + "; ".join(f"`{k}`: {v[-200:]}" for k, v in errors.items()))
    lines.append("")
    if any(r.get("contended") for r in results.values()):
        lines.append("† other processes used ≥ 0.25 of a core on average while this configuration ran (measured twice; "
                     "the number is from the second try): treat it as a lower bound.")
        lines.append("")
    lines.append("RSS is the sum over the main process and its DataLoader workers, sampled every 10 ms; it counts the "
                 "touched pages of memory-mapped files (shared, reclaimable page cache), so a reader that maps its "
                 "data grows with the data it has touched; anon = private (anonymous) memory only. "
                 "See benchmarks/README.md.")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10x less data: a smoke run")
    ap.add_argument("--only", default="", help="comma-separated readers to run (default: all)")
    ap.add_argument("--workloads", default="tokens,images")
    ap.add_argument("--max-wait", type=float, default=300.0,
                    help="seconds to wait for other processes' CPU use to settle before measuring (default 300)")
    ap.add_argument("--large", action="store_true",
                    help="with --cold: 1,000,000 token rows (4 GB); pass --only and --workloads tokens to limit "
                         "what is written and run")
    ap.add_argument("--cold", action="store_true",
                    help="cold-cache mode (benchmarks/read_cold.py): a fresh process and empty reader caches per "
                         "configuration; time to first batch, resume, a jump to 3/4, peak private memory, throughput")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child or args.baseline:
        cfg = json.loads(args.child or args.baseline)
        res = child(cfg) if args.child else baselines(cfg)
        sys.stdout.write("RESULT " + json.dumps(res) + "\n")
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown (peers' atexit hooks and threads)

    if args.cold:
        import read_cold
        return read_cold.main(args)

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # so the temp cache is removed
    mode = "quick" if args.quick else "full"
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    workloads = {x.strip() for x in args.workloads.split(",") if x.strip()}
    configs = [c for c in CONFIGS if (not only or c[0] in only) and c[1] in workloads]
    started = time.perf_counter()

    def log(msg):
        print(msg, flush=True)

    log(f"dsinspect read benchmark ({mode}): data under {data_dir(mode)}")
    os.environ["DSINSPECT_BENCH_CATALOG_KEY"] = _dsinspect_writer_key()  # fixed for the run, children too
    spent = prepare(mode, log)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=ROOT))
    cache = str(run_dir / "cache")
    env = {**os.environ, "DSINSPECT_CACHE": cache, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(run_dir / "hf-cache")}
    try:
        warm_s = warm_shard_cache(mode, cache)
        log(f"dsinspect shard cache (temp {cache}) warmed in {warm_s:.1f} s")
        nbytes, secs = warm_page_cache(mode)
        log(f"page cache warmed: {nbytes / 1e9:.2f} GB read in {secs:.1f} s")
        quiet = wait_quiet(args.max_wait, log)
        log(f"machine load: {os.getloadavg()[0]:.2f} (1 min), others' CPU {quiet['busy_cores']:.2f} cores; "
            f"waited {quiet['waited_s']:.0f} s")
        loadavg_start = list(os.getloadavg())
        base, contention = run_child("baseline", {"mode": mode}, env)
        if "error" in base:
            log(f"baselines failed: {base['error']}")
            base = {"error": base["error"]}
        else:
            log(f"baselines: page cache {base['page_cache_bytes_per_s'] / 1e9:.1f} GB/s = "
                f"{_fmt_rate(base['page_cache_samples_per_s'])} samples/s; "
                f"gather {_fmt_rate(base['gather_sorted_samples_per_s'])}"
                f"/s; Pillow {_fmt_rate(base['pillow_1proc_images_per_s'])}/s (1 proc), "
                f"{_fmt_rate(base['pillow_2proc_images_per_s'])}/s (2 procs)")
        base["contention"] = contention
        results: dict[str, dict] = {}
        for name, workload, nw in configs:
            key = f"{name}|{workload}|{nw}"
            cfg = {"mode": mode, "reader": name, "workload": workload, "nw": nw}
            for attempt in range(2):
                res, contention = run_child("child", cfg, env)
                res["contention"] = contention
                if contention["foreign_cpu_cores"] < 0.25 or attempt == 1 or "error" in res or args.max_wait <= 10:
                    break
                log(f"  {key}: others used {contention['foreign_cpu_cores']:.2f} cores meanwhile; measuring again")
                wait_quiet(min(30.0, args.max_wait), log)
            res["contended"] = contention["foreign_cpu_cores"] >= 0.25
            results[key] = res
            if "error" in res:
                log(f"  {key:<38} ERROR {res['error'][:400]}")
            else:
                log(f"  {key:<38} {_fmt_rate(res['samples_per_s']):>9}/s  ttfb {_fmt_ms(res['ttfb_ms']):>6} ms  "
                    f"resume {_fmt_ms(res['resume_ttfb_ms']):>6} ms "
                    f"({'exact' if res['resume_exact'] else 'NOT exact'})  "
                    f"rss {res['rss']['peak_mb']:.0f} MB (anon {res['rss']['peak_anon_mb']:.0f})  "
                    f"[{contention['wall_s']:.0f} s{', contended' if res['contended'] else ''}]")
        loadavg_end = list(os.getloadavg())
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    date = dt.date.today().isoformat()
    summary = summarise(results, base) if "error" not in base else {}
    meta = {"date": date, "mode": mode, "machine": machine_info(), "loadavg_start": loadavg_start,
            "loadavg_end": loadavg_end, "quiet_check": quiet, "sizes": SIZES[mode], "seq": SEQ, "image_side": SIDE,
            "batch": BATCH, "seed": SEED, "segments": SEGMENTS, "ttfb_repeats": TTFB_REPEATS,
            "data_write_seconds": spent, "shard_cache_warm_s": round(warm_s, 1),
            "total_s": round(time.perf_counter() - started, 1), "readers": DESCRIBE}
    table = render(results, base, summary, meta) if summary else "baselines failed\n"
    print()
    print(table)
    RESULTS.mkdir(exist_ok=True)
    suffix = "" if mode == "full" else "-quick"
    out = new_result("read", suffix)
    out.write_text(json.dumps({"meta": meta, "baselines": base, "summary": summary, "results": results},
                              indent=1) + "\n")
    (RESULTS / f"latest{suffix}.md").write_text(table)
    print(f"wrote {out.relative_to(REPO)} and {(RESULTS / f'latest{suffix}.md').relative_to(REPO)}; "
          f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Packed pretraining reads against the peers, in one run (issue #32): tokens/s at L = 2,048, batch 8,
0 and 2 DataLoader workers, every reader's own seeded shuffle on, each over the SAME documents written
by its own writer, against the limit of the work: a numpy gather of shuffled windows of the same
width from one memory-mapped token stream, measured in the same run.

Readers (each a row of the table; the peers' packing conventions differ, see "tok/seq" below):
- `dsinspect`: `PackedLoader` (0 workers; `labels=True`: L + 1 tokens every L, documents and sequences
  shuffled, EOS 0 after each document), alone and, as `dsinspect-torch`, with `packed_to_torch` (the
  tensors a torch step takes); `dsinspect-ptl`: `PackedTorchLoader` at 0 and 2 workers when
  `dsinspect.loaders.pytorch` has it (skipped, with a note, when it does not).
- `megatron`: Megatron-core `GPTDataset` (`add_extra_token_to_sequence`: L + 1 tokens every L; its index
  shuffles documents and samples) over `.bin/.idx` from `IndexedDatasetBuilder`, torch `DataLoader`
  (Megatron's pretraining sampler reads its shuffled indices in order).
- `olmo-fsl`: OLMo-core `NumpyFSLDataset` (L tokens every L) over a flat token file written by OLMo's
  `write_array_to_disk` (EOS after each document), `NumpyDataLoaderBase.wrap_numpy_dataset(...)` (its
  seeded global shuffle; at 0 workers it reads with 4 threads of its own). `olmo-padded`
  (`NumpyPaddedFSLDataset`, one document per sequence, its first L tokens) and `olmo-packed`
  (`NumpyPackedFSLDataset`, OBFD packing) are other packing modes, reported apart beside
  `dsinspect-pad` and `dsinspect-best-fit` (PackedLoader, 0 workers, `packing="pad"` / `"best_fit"`:
  L + 1 tokens a sequence, a longer document in pieces, nothing dropped) and not counted as "best peer".
- `litdata`: LitData `StreamingDataset(item_loader=TokensLoader(L + 1), shuffle=True, seed=...)` over
  `optimize(..., item_loader=TokensLoader())` output, `StreamingDataLoader`.
- `datatrove`: `DatatroveFolderDataset(seq_len=L)` (L + 1 tokens every L + 1) over `.ds` + `.ds.index`
  written by datatrove's `TokenizedFile` as `DocumentTokenizer` writes them (documents shuffled by
  `TokenizedFile.copy`), torch `DataLoader` with a seeded `RandomSampler` (datatrove has no sequence
  shuffle of its own).
- `nanogpt`: nanoGPT-style random offsets (`torch.randint`, seeded) into a raw `train.bin` (np.memmap),
  L + 1 tokens a sample, through a torch `DataLoader`; samples overlap anywhere, there is no epoch.
- `gather`: the limit, L + 1 tokens at shuffled multiples of L from the memory-mapped stream into a
  preallocated batch (no checks, no conversion).

Tokens are uint32 ids in [1, 100,000) (a 100k vocabulary: Megatron stores int32, everyone else uint32),
EOS = 0 after every document; document lengths log-normal (median ~400 tokens, a few over 10k).

Figures, each from a FRESH process per (reader, workers, repeat) that imports its libraries before its
clocks start (import and index-build times are reported apart):
- cold (--cold-repeat, default 1): the reader's caches and indices removed first (Megatron's index
  cache, OLMo's work dir, the dsinspect node cache); import s, build s (the dataset/index and loader
  objects), first batch ms (from creating the iterator, worker start included), then the same BATCHES
  batches; peak RSS and USS (private memory) summed over the process and its workers, sampled every
  50 ms by this parent over the process's whole life; the first and last 8 tokens of every sequence,
  to tell whether the batches at 0 and 2 workers are the same.
- warm (--repeat, default 3): caches as the cold run left them; tokens/s over batches 2..BATCHES (the
  first batch, and worker start-up, off the clock). tokens/s counts the elements of the token block each
  reader hands over per sequence ("tok/seq": L + 1 for PackedLoader, LitData, datatrove, nanoGPT and the
  gather; L for Megatron's `tokens`, OLMo's and packed_to_torch's `input_ids`, whose labels come from
  the same L + 1 window, or, for OLMo, from the same L tokens shifted).
All data files are in the page cache (just written), each process maps them anew. Figures are medians.
Peer processes run with OMP_NUM_THREADS=1 and torch.set_num_threads(1), as DataLoader workers do.
The dsinspect code measured is the working tree's (its commit and uncommitted files are printed).

Peers are not installed into the main environment (their pins would move the versions the test suite
uses); install them into directories of their own and name those with --peers (os.pathsep-separated,
default $DSINSPECT_PEERS), which become PYTHONPATH of the peer subprocesses (torch and numpy come from
the main environment):

    python3 -m pip install --target /tmp/peers ai2-olmo-core==3.0.0 megatron-core==0.16.1  # as .ci/run does
    python3 -m pip install --no-deps --target /tmp/bench_peers litdata==0.2.76 datatrove==0.10.1 \\
        tokenizers humanize loguru lightning-utilities tifffile obstore
    python3 benchmarks/bench_packed_peers.py --peers /tmp/peers:/tmp/bench_peers [--docs 20000]
        [--batches 400] [--repeat 3] [--cold-repeat 1] [--only dsinspect,megatron,...] [--json FILE]

~8 minutes at the defaults on a 2-core machine under a load of ~2 (mostly the ~80 processes' imports).
(`--no-deps` because litdata requires torchvision, whose PyPI wheel pulls a CUDA torch; the other names
are what litdata and datatrove import to read local data.) A peer that cannot be imported or run is a row
saying so, not a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

L = 2048
BATCH = 8
EOS = 0
VOCAB = 100_000
SEED = 7

SETUP = r"""
import sys, numpy as np, pyarrow as pa
from dsinspect.loaders import Catalog, Field, WriteOptions
root, docs = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
lengths = np.minimum(np.maximum(1, rng.lognormal(6.0, 1.0, docs).astype(np.int64)), 30_000)
tokens = rng.integers(1, 100_000, int(lengths.sum()), dtype=np.uint32)
cuts = np.concatenate([[0], np.cumsum(lengths)])
tokens.tofile(root + "/docs_tokens.bin")          # the documents, for the peers' writers
np.save(root + "/docs_lengths.npy", lengths)
catalog = Catalog(root + "/cat")
def rows():
    for i in range(docs):
        yield {"tokens": tokens[cuts[i]:cuts[i + 1]]}
fields = [Field("tokens", pa.list_(pa.uint32()), "tokens", False)]
catalog.write_version("corpus", rows(), fields, options=WriteOptions(shard_rows=2_000))
# nanoGPT's prepare.py: one np.memmap written in batches, the end-of-text id after every document
stream = np.insert(tokens, cuts[1:], 0)
out = np.memmap(root + "/train.bin", dtype=np.uint32, mode="w+", shape=(stream.size,))
for i in range(0, stream.size, 1 << 20):
    out[i:i + (1 << 20)] = stream[i:i + (1 << 20)]
out.flush()
print(int(lengths.sum()))
"""

# Each peer's own writer, run under the peers' PYTHONPATH. argv: root, peer. Prints seconds taken.
WRITE = r"""
import sys, time, warnings
from pathlib import Path
import numpy as np
warnings.filterwarnings("ignore")
root, peer = Path(sys.argv[1]), sys.argv[2]
tokens = np.fromfile(root / "docs_tokens.bin", np.uint32)
lengths = np.load(root / "docs_lengths.npy")
docs = np.split(tokens, np.cumsum(lengths)[:-1])
EOS = 0
if peer == "megatron":
    import torch
    sys.modules["transformers"] = None  # see tests/peer_sequences_worker.py
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
elif peer == "olmo":
    from olmo_core.data.utils import write_array_to_disk
elif peer == "litdata":
    import torch
    from litdata import TokensLoader, optimize
elif peer == "datatrove":
    from datatrove.pipeline.tokens.tokenizer import TokenizedFile
t = time.perf_counter()  # the writing, its imports done
if peer == "megatron":
    out = root / "megatron"
    out.mkdir(exist_ok=True)
    prefix = str(out / "corpus_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(100_001))  # int32 at this vocab
    for doc in docs:  # tools/preprocess_data.py --append-eod
        builder.add_document(torch.from_numpy(np.append(doc, EOS).astype(np.int64)), [doc.size + 1])
    builder.finalize(prefix + ".idx")
elif peer == "olmo":
    out = root / "olmo"
    out.mkdir(exist_ok=True)
    stream = np.insert(tokens, np.cumsum(lengths), EOS)  # EOS after every document, as Dolma's tokenizer
    write_array_to_disk(stream, out / "part-0-00000.npy")
elif peer == "litdata":
    def tokenize(span):  # litgpt's prepare scripts: one tensor of token ids per document, EOS appended
        for doc in docs[span[0]:span[1]]:
            yield torch.from_numpy(np.append(doc, EOS).astype(np.int32))
    step = 1000
    spans = [(i, min(i + step, len(docs))) for i in range(0, len(docs), step)]
    optimize(fn=tokenize, inputs=spans, output_dir=str(root / "litdata"), chunk_size=2049 * 1024,
             item_loader=TokensLoader(), num_workers=2, verbose=False, start_method="fork")
elif peer == "datatrove":
    out = str(root / "datatrove")
    unshuffled = TokenizedFile(out, "corpus_00000_unshuffled.ds", save_index=True, token_size=4)
    for doc in docs:  # DocumentTokenizer.write_unshuffled: the encoding's ids, EOS appended by the post-processor
        unshuffled.write(np.append(doc, EOS).tolist(), None)
    unshuffled.close()
    # DocumentTokenizer.run with shuffle_documents=True: documents copied in a seeded permutation
    shuffled = unshuffled.copy("corpus", np.random.default_rng(0).permutation(len(unshuffled.doc_ends)), out,
                               rank=0, sub_filename="doc_shuffled", save_index=True)
    unshuffled.cleanup()
print(time.perf_counter() - t)
"""

# One measurement. argv: root, reader, workers, batches, mode (cold|warm). Prints one JSON line.
CHILD = r"""
import json, os, sys, time, warnings
warnings.filterwarnings("ignore")
root, reader, workers, batches, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
L, B, EOS, SEED = 2048, 8, 0, 7
work = os.path.join(root, "work", reader)
out = {"reader": reader, "workers": workers, "mode": mode}

t = time.perf_counter()
import numpy as np
if reader != "gather":
    import torch
    torch.set_num_threads(1)
if reader.startswith("dsinspect"):
    from dsinspect.loaders import Catalog, PackedLoader, RunSpec, SequenceSpec
    if reader == "dsinspect-torch":
        from dsinspect.loaders.pytorch import packed_to_torch
    if reader == "dsinspect-ptl":
        try:
            from dsinspect.loaders.pytorch import PackedTorchLoader
        except ImportError as e:
            print(json.dumps({**out, "skipped": f"PackedTorchLoader not importable ({e})"}))
            sys.exit(0)
elif reader == "megatron":
    sys.modules["transformers"] = None  # see tests/peer_sequences_worker.py
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers import MegatronTokenizer
elif reader.startswith("olmo"):
    from olmo_core.data import DataCollator, NumpyDatasetDType, TokenizerConfig
    from olmo_core.data.data_loader import NumpyDataLoaderBase
    from olmo_core.data.numpy_dataset import (NumpyFSLDatasetConfig, NumpyPackedFSLDatasetConfig,
                                              NumpyPaddedFSLDatasetConfig)
elif reader == "litdata":
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader
elif reader == "datatrove":
    from datatrove.utils.dataset import DatatroveFolderDataset
if reader in ("megatron", "datatrove", "nanogpt"):
    from torch.utils.data import DataLoader, Dataset, RandomSampler
out["import_s"] = time.perf_counter() - t

PACKINGS = {"dsinspect": "concat", "dsinspect-pad": "pad", "dsinspect-best-fit": "best_fit"}  # PackedLoader alone

def tokens_of(batch):  # the [B, W] token block of one batch, as a numpy view
    if reader in PACKINGS:
        return batch.tokens
    if reader.startswith("dsinspect"):
        return batch["input_ids"].numpy()
    if reader == "megatron":
        return batch["tokens"].numpy()
    if reader.startswith("olmo") or reader == "datatrove":
        return batch["input_ids"].numpy()
    if reader == "litdata" and batch.dtype == torch.uint32:
        return batch.view(torch.int32).numpy().view(np.uint32)
    return np.asarray(batch)

t = time.perf_counter()
width = L + 1
if reader.startswith("dsinspect"):
    catalog = Catalog(root + "/cat")
    spec = RunSpec.create(catalog, "corpus", seed=SEED, batch_size=B, world_size=1, shuffle="global",
                          sequences=SequenceSpec(length=L, labels=True, eos=EOS, shuffle_documents=True,
                                                 packing=PACKINGS.get(reader, "concat")))
    epoch = spec.epoch_length // B
    if reader == "dsinspect-ptl":
        loader = PackedTorchLoader(spec, catalog, rank=0, num_workers=workers)
    else:
        loader = PackedLoader(spec, 0, catalog)
    source = loader
    if reader == "dsinspect-torch":
        source = (packed_to_torch(b) for b in loader)
    if reader not in PACKINGS:
        width = L  # input_ids: the first L of the L + 1 tokens (labels the last L)
elif reader == "megatron":
    tokenizer = MegatronTokenizer.from_pretrained(metadata_path={"library": "null"}, vocab_size=EOS)
    prefix = root + "/megatron/corpus_text_document"
    config = GPTDatasetConfig(random_seed=SEED, sequence_length=L, blend=([prefix], None), split="1,0,0",
                              path_to_cache=work, tokenizer=tokenizer, reset_position_ids=False,
                              reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False,
                              add_extra_token_to_sequence=True)
    train = BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None], lambda: True, config).build()[0]
    epoch = len(train) // B
    width = L  # "tokens": the first L of the L + 1 (labels the last L)
    source = DataLoader(train, batch_size=B, shuffle=False, num_workers=workers, drop_last=True)
elif reader.startswith("olmo"):
    tok = TokenizerConfig(vocab_size=100_001, eos_token_id=EOS, pad_token_id=100_000)
    kind = {"olmo-fsl": NumpyFSLDatasetConfig, "olmo-padded": NumpyPaddedFSLDatasetConfig,
            "olmo-packed": NumpyPackedFSLDatasetConfig}[reader]
    dataset = kind(tokenizer=tok, paths=[root + "/olmo/part-0-00000.npy"], sequence_length=L,
                   dtype=NumpyDatasetDType.uint32, work_dir=work).build()
    dataset.prepare()
    loader = NumpyDataLoaderBase.wrap_numpy_dataset(dataset, global_batch_size=B * L,
                                                    collator=DataCollator(pad_token_id=tok.pad_token_id),
                                                    work_dir=work, seed=SEED, num_workers=workers, shuffle=True)
    loader.reshuffle(epoch=1)
    epoch = loader.total_batches
    width = L
    source = loader
elif reader == "litdata":
    dataset = StreamingDataset(root + "/litdata", item_loader=TokensLoader(block_size=L + 1), shuffle=True,
                               seed=SEED, drop_last=True)
    epoch = len(dataset) // B
    source = StreamingDataLoader(dataset, batch_size=B, num_workers=workers, drop_last=True)
elif reader == "datatrove":
    dataset = DatatroveFolderDataset(root + "/datatrove", seq_len=L, token_size=4, shuffle=False, seed=SEED)
    epoch = len(dataset) // B
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED))
    source = DataLoader(dataset, batch_size=B, sampler=sampler, num_workers=workers, drop_last=True)
elif reader == "nanogpt":
    class RandomWindows(Dataset):  # nanoGPT's get_batch, one sample an item so workers can share it
        def __init__(self, path, n):
            self.path = path
            size = os.path.getsize(path) // 4
            self.ix = torch.randint(size - (L + 1), (n,), generator=torch.Generator().manual_seed(SEED))
            self.data = None
        def __len__(self):
            return len(self.ix)
        def __getitem__(self, k):
            if self.data is None:  # nanoGPT maps the file anew every batch; here once per process
                self.data = np.memmap(self.path, dtype=np.uint32, mode="r")
            i = int(self.ix[k])
            return torch.from_numpy(self.data[i:i + L + 1].astype(np.int64))
    dataset = RandomWindows(root + "/train.bin", batches * B)
    epoch = None
    source = DataLoader(dataset, batch_size=B, shuffle=False, num_workers=workers, drop_last=True)
elif reader == "gather":
    stream = np.memmap(root + "/train.bin", np.uint32, "r")
    count = (stream.size - 1) // L
    order = np.random.default_rng(SEED).permutation(count)[:min(batches, count // B) * B].reshape(-1, B)
    epoch = count // B
    def gather():
        for idx in order.tolist():
            block = np.empty((B, L + 1), np.uint32)
            for i, j in enumerate(idx):
                block[i] = stream[j * L:j * L + L + 1]
            yield block
    source = gather()
out["build_s"] = time.perf_counter() - t
out["epoch_batches"] = epoch
if epoch is not None and epoch < batches:
    print(json.dumps({**out, "error": f"an epoch has only {epoch} batches, fewer than --batches {batches}"}))
    sys.exit(0)

def tree_cpu():  # CPU seconds of this process (all threads, exact) and of its workers (clock ticks)
    total, todo, tick = time.process_time(), [], os.sysconf("SC_CLK_TCK")
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            todo.extend(f.read().split())
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(f.read().split())
        except OSError:
            pass
    return total

t = time.perf_counter()
it = iter(source)
first = next(it)
t1 = time.perf_counter()
cpu1 = tree_cpu()
out["first_batch_s"] = t1 - t
edges = []  # the first and last 8 tokens of every sequence: equal batches at 0 and 2 workers or not
shapes = set()
real = [0, 0]  # document tokens (not padding) of the tokens handed over, counted apart from the clock
def keep(batch):
    block = tokens_of(batch)
    shapes.add(block.shape)
    edges.append(np.concatenate([block[:, :8], block[:, -8:]], axis=1).astype(np.int64))
    if reader in PACKINGS:
        real.append(int(batch.held.sum()))
    elif reader.startswith("olmo") and "label_mask" in batch:
        real.append(int(batch["label_mask"].sum()))
    else:
        real.append(block.size)
    real[1] += block.size
    return block.shape[0] * block.shape[1]
n = 0
keep(first)
for _ in range(batches - 1):
    n += keep(next(it))
out["real_fraction"] = sum(real[2:]) / real[1]
took = time.perf_counter() - t1
out["tokens_per_cpu_s"] = n / max(tree_cpu() - cpu1, 1e-9)
out["tokens_per_s"] = n / took
out["shapes"] = sorted(shapes)
out["batches"] = len(edges)
out["width"] = width
if sorted(shapes) != [(B, width)]:
    out["error"] = f"batch shapes {sorted(shapes)}, expected {(B, width)}"
if mode == "cold":
    out["edges"] = np.stack(edges).tolist()
    if reader.startswith("dsinspect"):
        for _ in it:  # the rest of the epoch, so the node cache is whole for the warm runs
            pass
del it
print(json.dumps(out))
os._exit(0)  # workers and prefetch threads are not part of the measurement
"""

READERS = ["gather", "dsinspect", "dsinspect-torch", "dsinspect-ptl", "megatron", "olmo-fsl", "litdata",
           "datatrove", "nanogpt", "olmo-padded", "dsinspect-pad", "olmo-packed", "dsinspect-best-fit"]
PEERS = {"megatron", "olmo-fsl", "olmo-padded", "olmo-packed", "litdata", "datatrove"}
BEST_PEER_CANDIDATES = {"megatron", "olmo-fsl", "litdata", "datatrove", "nanogpt"}
WRITER = {"megatron": "megatron", "olmo-fsl": "olmo", "olmo-padded": "olmo", "olmo-packed": "olmo",
          "litdata": "litdata", "datatrove": "datatrove"}
PAIRS = {"dsinspect-torch": ("dsinspect-torch", "dsinspect-ptl")}  # PackedLoader at 0 against PackedTorchLoader at 2
WORKERS = {"gather": [0], "dsinspect": [0], "dsinspect-torch": [0], "dsinspect-pad": [0], "dsinspect-best-fit": [0]}


def tree_memory(pid: int) -> tuple[int, int]:
    """RSS and USS (Private_Clean + Private_Dirty) in bytes, summed over pid and its descendants."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    rss = uss = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key == "Rss":
                        rss += int(rest.split()[0]) * 1024
                    elif key in ("Private_Clean", "Private_Dirty"):
                        uss += int(rest.split()[0]) * 1024
        except (OSError, ValueError):
            pass
    return rss, uss


def run_child(code: str, args: list[str], env: dict[str, str], sample_memory: bool = False,
              timeout: float = 600) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            rss, uss = tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], uss)

    sampler = threading.Thread(target=sample, daemon=True) if sample_memory else None
    if sampler:
        sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        stderr += f"\n(killed after {timeout} s)"
    done.set()
    if sampler:
        sampler.join()
    lines = [line for line in stdout.strip().splitlines() if line.startswith("{")]
    if not lines:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        return {"error": f"exit {proc.returncode}: {tail[-400:]}"}
    result = json.loads(lines[-1])
    if sample_memory:
        result["peak_rss"], result["peak_uss"] = peak
    return result


def edges_verdict(a: list, b: list) -> str:
    if a == b:
        return "same"
    rows = lambda x: sorted(map(tuple, (r for batch in x for r in batch)))  # noqa: E731
    if rows(a) == rows(b):
        return "same seqs, other order"
    return "DIFFERENT"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=20_000, help="documents in the corpus (default 20,000)")
    parser.add_argument("--batches", type=int, default=400, help="batches each reader reads (default 400)")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per reader (tokens/s), default 3")
    parser.add_argument("--cold-repeat", type=int, default=1,
                        help="cold runs per reader (first batch, import, build, memory), default 1")
    parser.add_argument("--peers", default=os.environ.get("DSINSPECT_PEERS", ""),
                        help="PYTHONPATH for the peer subprocesses (os.pathsep-separated; default $DSINSPECT_PEERS)")
    parser.add_argument("--only", default="", help="comma-separated readers (default all): " + ",".join(READERS))
    parser.add_argument("--json", default="", help="also write every figure to this file")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    readers = [r for r in READERS if not args.only or r in args.only.split(",")]
    start_load = os.getloadavg()
    print(f"load average at start: {start_load[0]:.2f} {start_load[1]:.2f} {start_load[2]:.2f} "
          f"({os.cpu_count()} cores)", flush=True)

    repo = Path(__file__).resolve().parent.parent
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    code = {"commit": git("rev-parse", "--short", "HEAD"),
            "uncommitted": [line.split(None, 1)[1]
                            for line in git("status", "--porcelain", "--", "dsinspect").splitlines()]}
    print(f"dsinspect at {code['commit']}" + (f" with uncommitted changes to {', '.join(code['uncommitted'])}"
                                               if code["uncommitted"] else ""), flush=True)
    root = tempfile.mkdtemp(prefix="bench-packed-peers-")
    # bytecode cached as .ci/run does (PYTHONDONTWRITEBYTECODE is set on these machines): import times
    # are then those of a second start, not of compiling every module
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    base_env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", DSINSPECT_CACHE=root + "/dscache")
    peer_env = dict(base_env, PYTHONPATH=args.peers) if args.peers else dict(base_env)
    t = time.perf_counter()
    tokens = int(subprocess.run([sys.executable, "-c", SETUP, root, str(args.docs)], capture_output=True,
                                text=True, check=True, env=base_env).stdout.strip())
    print(f"corpus: {args.docs:,} documents, {tokens:,} tokens (+{args.docs:,} EOS), dsinspect catalog and "
          f"nanoGPT train.bin written in {time.perf_counter() - t:.1f} s; {root}", flush=True)

    writes: dict[str, float | str] = {}
    for peer in sorted({WRITER[r] for r in readers if r in WRITER}):
        done = subprocess.run([sys.executable, "-c", WRITE, root, peer], capture_output=True, text=True,
                              env=peer_env)
        if done.returncode == 0:
            writes[peer] = float(done.stdout.strip().splitlines()[-1])
            print(f"  {peer} writer: {writes[peer]:.1f} s", flush=True)
        else:
            writes[peer] = " | ".join(done.stderr.strip().splitlines()[-2:])[-300:]
            print(f"  {peer} writer FAILED: {writes[peer]}", flush=True)

    configs = [(r, w) for r in readers for w in WORKERS.get(r, [0, 2])]
    runs: dict[tuple[str, int], dict[str, list]] = {c: {"cold": [], "warm": []} for c in configs}
    for rep in range(max(args.repeat, args.cold_repeat)):
        for reader, workers in configs:
            writer = WRITER.get(reader)
            if writer and not isinstance(writes.get(writer), float):
                runs[reader, workers]["cold"].append({"error": f"{writer} writer failed: {writes.get(writer)}"})
                continue
            env = peer_env if reader in PEERS else base_env
            argv = [root, reader, str(workers), str(args.batches)]
            said = f"  [{rep + 1}] {reader} w{workers}:"
            if rep < args.cold_repeat:  # caches removed first; the warm runs use what this one left
                shutil.rmtree(os.path.join(root, "work", reader), ignore_errors=True)
                if reader.startswith("dsinspect"):
                    shutil.rmtree(os.path.join(root, "dscache"), ignore_errors=True)
                cold = run_child(CHILD, [*argv, "cold"], env, sample_memory=True)
                runs[reader, workers]["cold"].append(cold)
                if "error" in cold or "skipped" in cold:
                    print(f"{said} {cold.get('error') or cold['skipped']}", flush=True)
                    continue
                said += f" first batch {cold['first_batch_s'] * 1e3:.0f} ms cold,"
            elif not any("first_batch_s" in c for c in runs[reader, workers]["cold"]):
                continue  # its cold run failed: so would this
            if rep < args.repeat:
                warm = run_child(CHILD, [*argv, "warm"], env)
                warm["load"] = os.getloadavg()[0]
                runs[reader, workers]["warm"].append(warm)
                said += f" {warm.get('tokens_per_s', 0) / 1e6:.1f} M tokens/s warm {warm.get('error', '')}"
            print(said, flush=True)

    # the table
    rows = {}
    for (reader, workers), got in runs.items():
        colds = [c for c in got["cold"] if "error" not in c and "skipped" not in c]
        warms = [w for w in got["warm"] if "error" not in w]
        problem = next((c.get("error") or c.get("skipped") for c in got["cold"] if "error" in c or "skipped" in c),
                       None) or next((w["error"] for w in got["warm"] if "error" in w), None)
        med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
        rows[reader, workers] = {
            "mtok_s": med([w["tokens_per_s"] / 1e6 for w in warms]),
            "mtok_s_all": [round(w["tokens_per_s"] / 1e6, 1) for w in warms],
            "mtok_cpu_s": med([w["tokens_per_cpu_s"] / 1e6 for w in warms]),
            "mtok_cpu_s_all": [round(w["tokens_per_cpu_s"] / 1e6, 1) for w in warms],
            "first_ms": med([c["first_batch_s"] * 1e3 for c in colds]),
            "import_s": med([c["import_s"] for c in colds]), "build_s": med([c["build_s"] for c in colds]),
            "warm_build_s": med([w["build_s"] for w in warms]),
            "load_1min_at_warm_runs": [round(w["load"], 2) for w in warms],
            "rss_mb": med([c["peak_rss"] / 2**20 for c in colds]),
            "uss_mb": med([c["peak_uss"] / 2**20 for c in colds]),
            "width": colds[0]["width"] if colds else None,
            "real_fraction": med([w["real_fraction"] for w in warms]),
            "epoch_batches": colds[0]["epoch_batches"] if colds else None,
            "edges": colds[0]["edges"] if colds else None, "problem": problem}
    limit = rows.get(("gather", 0), {}).get("mtok_s")
    limit_cpu = rows.get(("gather", 0), {}).get("mtok_cpu_s")
    best = {w: max((rows[r, w]["mtok_s"] or 0 for r, ww in rows if ww == w and r in BEST_PEER_CANDIDATES),
                   default=0) for w in (0, 2)}
    header = (f"{'reader':<18}{'wk':>3}{'tok/seq':>8}{'Mtok/s':>8}{'x limit':>8}{'x best':>8}{'Mtok/cpu-s':>11}"
              f"{'x limit':>8}{'1st ms':>8}"
              f"{'import s':>9}{'build s':>8}{'RSS MB':>8}{'USS MB':>8}{'real %':>7}  0 vs 2 workers")
    print()
    print(header)
    print("-" * len(header))
    fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
    for (reader, workers), row in rows.items():
        if reader == "olmo-padded" and workers == 0:
            print("  other packing modes (not counted as best peer):")
        same = ""
        pair = PAIRS.get(reader, (reader, reader))
        if (pair[0], 0) in rows and (pair[1], 2) in rows and rows[pair[0], 0]["edges"] and rows[pair[1], 2]["edges"]:
            same = edges_verdict(rows[pair[0], 0]["edges"], rows[pair[1], 2]["edges"])
        row["same_0_vs_2"] = same or None
        mt = row["mtok_s"]
        print(f"{reader:<18}{workers:>3}{fmt(row['width'], 'd'):>8}{fmt(mt, '.1f'):>8}"
              f"{fmt(mt / limit if mt and limit else None, '.2f'):>8}"
              f"{fmt(mt / best[workers] if mt and best.get(workers) else None, '.2f'):>8}"
              f"{fmt(row['mtok_cpu_s'], '.1f'):>11}"
              f"{fmt(row['mtok_cpu_s'] / limit_cpu if row['mtok_cpu_s'] and limit_cpu else None, '.2f'):>8}"
              f"{fmt(row['first_ms'], '.0f'):>8}{fmt(row['import_s'], '.2f'):>9}{fmt(row['build_s'], '.3f'):>8}"
              f"{fmt(row['rss_mb'], '.0f'):>8}{fmt(row['uss_mb'], '.0f'):>8}"
              f"{fmt(row['real_fraction'] * 100 if row['real_fraction'] is not None else None, '.1f'):>7}  {same}"
              + (f"  [{row['problem']}]" if row["problem"] else ""))
    end_load = os.getloadavg()
    print(f"\n{args.batches} batches of {BATCH} per reader. Mtok/s: median of {args.repeat} warm runs over batches "
          f"2..{args.batches}, counting the tok/seq tokens each reader hands over per sequence; x limit: against "
          f"the gather; x best: against the fastest of {', '.join(sorted(BEST_PEER_CANDIDATES))} at the same "
          f"worker count. Mtok/cpu-s: the same tokens per CPU second of the process and its workers (less "
          f"sensitive to other load), x limit: against the gather's. 1st ms, import, build, RSS/USS (peak, "
          f"process + workers): cold runs. real %: the share of those tokens that are document tokens, not "
          f"padding. 0 vs 2 workers: the first and last 8 tokens of every sequence.")
    print(f"load average at end: {end_load[0]:.2f} {end_load[1]:.2f} {end_load[2]:.2f}")
    if args.json:
        for row in rows.values():
            row.pop("edges", None)
        Path(args.json).write_text(json.dumps({
            "docs": args.docs, "tokens": tokens, "batches": args.batches, "repeat": args.repeat,
            "load_start": start_load, "load_end": end_load, "writes_s": writes, "dsinspect_code": code,
            "rows": [{"reader": r, "workers": w, **row} for (r, w), row in rows.items()]}, indent=1))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

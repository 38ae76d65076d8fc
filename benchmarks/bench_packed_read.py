"""Reading packed sequences: tokens/s of `PackedLoader` against the limit of the same work, a numpy
gather of the same shuffled windows from one memory-mapped token stream, measured in the same run.

The corpus: DOCS documents of log-normal lengths (median ~400 tokens, a few over 10k), uint32 tokens,
written once as a dsinspect version (shards of 2,000 documents) and once as a flat stream file (the
documents with EOS, as nanoGPT and OLMo-core lay them out). The run: L = 2,048 with labels (2,049
tokens a sequence), batch 8, one rank, documents and sequences shuffled (seeded).

Figures, each in a fresh process that has imported its libraries before the clock starts:
- cold first batch: an empty node cache, a local catalog (stored document order, as the run below;
  and with `shuffle_documents`, which needs every length of each shard it touches);
- warm epoch: the node cache filled (by the previous figure's process), tokens/s over the epoch;
- the gather limit: the same sequences' windows gathered from the memory-mapped stream with numpy
  (no checks, no segments), tokens/s;
- replay of one step (`dsinspect.loaders.audit.packed_replay`), ms: from the catalog, the second
  replay in the process (another step: other row groups); and from the filled node cache (`cache=`).
Peers (Megatron-core, OLMo-core, LitData, datatrove) are not in this run yet.

    python benchmarks/bench_packed_read.py [--docs 50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SETUP = r"""
import sys, numpy as np, pyarrow as pa
from dsinspect.loaders import Catalog, Field, WriteOptions
root, docs = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
lengths = np.minimum(np.maximum(1, rng.lognormal(6.0, 1.0, docs).astype(np.int64)), 30_000)
tokens = rng.integers(1, 100_000, int(lengths.sum()), dtype=np.uint32)
cuts = np.concatenate([[0], np.cumsum(lengths)])
catalog = Catalog(root + "/cat")
def rows():
    for i in range(docs):
        yield {"tokens": tokens[cuts[i]:cuts[i + 1]]}
fields = [Field("tokens", pa.list_(pa.uint32()), "tokens", False)]
catalog.write_version("corpus", rows(), fields, options=WriteOptions(shard_rows=2_000))
stream = np.insert(tokens, cuts[1:], 0)  # EOS (0) after every document
stream.tofile(root + "/stream.bin")
print(int(lengths.sum()))
"""

CHILD = r"""
import json, sys, time
import numpy as np
from dsinspect.loaders import Catalog, RunSpec, SequenceSpec, PackedLoader
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.audit.packed_replay import replay_packed
root, what = sys.argv[1], sys.argv[2]
catalog = Catalog(root + "/cat")
spec = RunSpec.create(catalog, "corpus", seed=7, batch_size=8, world_size=1, shuffle="global",
                      sequences=SequenceSpec(length=2048, labels=True, eos=0, shuffle_documents=False))
cache = ShardCache(root + "/cache")
steps = spec.epoch_length // 8
if what == "cold_shuffled":  # documents shuffled too: every length of each touched shard is needed
    shuffled = spec.replace(sequences=SequenceSpec(length=2048, labels=True, eos=0, shuffle_documents=True))
    t = time.perf_counter()
    with PackedLoader(shuffled, 0, catalog, cache=ShardCache(root + "/cache-shuffled"), fill=False) as loader:
        loader.batch_at(0)
        first = time.perf_counter() - t
    print(json.dumps({"first_batch_s": first}))
elif what == "cold":
    t = time.perf_counter()
    with PackedLoader(spec, 0, catalog, cache=cache) as loader:
        loader.batch_at(0)
        first = time.perf_counter() - t
        for batch in loader:  # fill the cache for the warm figure
            pass
    print(json.dumps({"first_batch_s": first}))
elif what == "warm":
    with PackedLoader(spec, 0, catalog, cache=cache) as loader:
        t = time.perf_counter()
        n = 0
        for batch in loader:
            n += batch.tokens.size
        took = time.perf_counter() - t
    print(json.dumps({"tokens_per_s": n / took, "steps": steps}))
elif what == "gather":
    from dsinspect.loaders.order.plan import plan_steps
    stream = np.memmap(root + "/stream.bin", np.uint32, "r")
    plans = plan_steps(spec, list(range(steps)), 0)  # the same sequence indices, planned off the clock
    t = time.perf_counter()
    n = 0
    for plan in plans:
        out = np.empty((8, 2049), np.uint32)
        for i, j in enumerate(plan.indices.tolist()):
            out[i] = stream[j * 2048:j * 2048 + 2049]
        n += out.size
    took = time.perf_counter() - t
    print(json.dumps({"tokens_per_s": n / took}))
elif what == "replay":
    replay_packed(spec, 3, 0, catalog)  # the first one imports and reads what the process keeps
    t = time.perf_counter()
    replay_packed(spec, steps // 2, 0, catalog)
    print(json.dumps({"replay_s": time.perf_counter() - t}))
elif what == "replay_cache":  # the node cache filled by the "cold" figure's epoch
    replay_packed(spec, 3, 0, catalog, cache=cache)
    t = time.perf_counter()
    replay_packed(spec, steps // 2, 0, catalog, cache=cache)
    print(json.dumps({"replay_s": time.perf_counter() - t}))
"""


def run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-packed-")
    tokens = int(subprocess.run([sys.executable, "-c", SETUP, root, str(args.docs)], capture_output=True, text=True,
                                check=True).stdout.strip())
    figures: dict[str, list[float]] = {"first_batch_ms": [], "first_batch_shuffled_ms": [], "loader_mtok_s": [],
                                       "gather_mtok_s": [], "replay_ms": [], "replay_cached_ms": []}
    for _ in range(args.repeat):
        subprocess.run(["rm", "-rf", os.path.join(root, "cache"), os.path.join(root, "cache-shuffled")], check=True)
        figures["first_batch_ms"].append(run(CHILD, root, "cold")["first_batch_s"] * 1e3)
        figures["first_batch_shuffled_ms"].append(run(CHILD, root, "cold_shuffled")["first_batch_s"] * 1e3)
        figures["loader_mtok_s"].append(run(CHILD, root, "warm")["tokens_per_s"] / 1e6)
        figures["gather_mtok_s"].append(run(CHILD, root, "gather")["tokens_per_s"] / 1e6)
        figures["replay_ms"].append(run(CHILD, root, "replay")["replay_s"] * 1e3)
        figures["replay_cached_ms"].append(run(CHILD, root, "replay_cache")["replay_s"] * 1e3)
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(json.dumps({"docs": args.docs, "tokens": tokens, "load": [round(x, 2) for x in os.getloadavg()],
                      **{k: [round(x, 1) for x in v] for k, v in figures.items()}}, indent=1))
    print(f"PackedLoader {med['loader_mtok_s']:.1f} M tokens/s, gather limit {med['gather_mtok_s']:.1f} M tokens/s: "
          f"{med['loader_mtok_s'] / med['gather_mtok_s']:.2f}x of the limit; cold first batch "
          f"{med['first_batch_ms']:.0f} ms ({med['first_batch_shuffled_ms']:.0f} ms with documents shuffled); replay "
          f"of a step {med['replay_ms']:.1f} ms from the catalog, {med['replay_cached_ms']:.1f} ms from the node cache "
          f"(median of {args.repeat})")


if __name__ == "__main__":
    main()

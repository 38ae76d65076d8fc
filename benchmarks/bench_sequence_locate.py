"""Locating packed sequences at pretraining scale, with no data and no index: a run over 10^12 tokens
in 10^9 documents over 10^5 shards (a synthetic manifest: per-shard counts only; each shard's document
lengths made from its number when asked). Measures, in a fresh process per figure:

- the run spec and the packed run set up (memory ∝ shards),
- locating the sequences and document segments of one (step, rank): cold (its shards' lengths made
  and ordered) and warm,
- finding every reading of one document up to a step in the first epoch, and over four epochs
  (reverse lookup: each epoch orders the documents anew, ~20 ms an epoch),
- peak RSS.

Issue #32's targets: each locate ≤ 50 ms through the API; a reader starting in ≤ 200 MB. Usage:
    python benchmarks/bench_sequence_locate.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np
t0 = time.perf_counter()
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.spec import RunSpec, Source
from dsinspect.loaders.sequences.packed import PackedRun
SHARDS, DOCS, TOKENS = 100_000, 10_000, 10_000_000
def lengths(k, shard):
    half = np.random.default_rng(shard).integers(-999, 1000, DOCS // 2)
    return np.concatenate([1000 + half, 1000 - half])
lengths(0, 0)  # the synthetic corpus's own cost (numpy.random's import) before the clock
t1 = time.perf_counter()
spec = RunSpec((Source("web", "f" * 64, (DOCS,) * SHARDS, 1.0, (TOKENS,) * SHARDS),), seed=7, batch_size=8,
               world_size=64, shuffle="global",
               sequences=SequenceSpec(length=2048, labels=True, eos=0, shuffle_documents=True))
run = PackedRun(spec, lengths)
t2 = time.perf_counter()
step, rank = int(sys.argv[1]), int(sys.argv[2])
batch = run.batch(step, rank)
t3 = time.perf_counter()
run.batch(step, rank)
t4 = time.perf_counter()
doc = int(batch[3].segments.docs[0])
fresh = PackedRun(spec, lengths)
t5 = time.perf_counter()
found = fresh.where(0, doc, until_step=step + 1)
t6 = time.perf_counter()
again = PackedRun(spec, lengths)
t7 = time.perf_counter()
later = again.where(0, doc, until_step=step + 4 * 953_674)  # three epochs more (953,674 steps each)
t8 = time.perf_counter()
assert any((d.reading.step, d.reading.rank, d.reading.slot) == (step, rank, 3) for d in found)
assert len(later) >= len(found)
print(json.dumps({"import_s": t1 - t0, "setup_s": t2 - t1, "locate_cold_s": t3 - t2, "locate_warm_s": t4 - t3,
                  "where_s": t6 - t5, "where_4_epochs_s": t8 - t7,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    runs = []
    for i in range(args.repeat):
        step = 41_200 + 131_071 * i  # steps spread over the first epoch (953,674 steps of 512 sequences)
        out = subprocess.run([sys.executable, "-c", CHILD, str(step), "7"], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs; "
          f"{args.repeat} fresh processes")
    for key in runs[0]:
        values = [r[key] for r in runs]
        unit = "MB" if key.endswith("_mb") else "ms"
        scale = 1 if unit == "MB" else 1000
        print(f"{key:16s} median {statistics.median(values) * scale:9.1f} {unit}   "
              f"max {max(values) * scale:9.1f} {unit}")


if __name__ == "__main__":
    main()

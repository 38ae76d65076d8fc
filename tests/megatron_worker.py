"""Megatron-core's own writer and reader for tests/test_ingest_megatron.py, in one subprocess with
PYTHONPATH=$DSINSPECT_PEERS (megatron-core==0.16.1 is kept out of the main environment): the package is
imported once, then the test sends one JSON request a line on stdin, and the worker answers each with a
line `ok` (or `error: ...`) once its output is written. Nothing here imports dsinspect.

Requests:
- `{"op": "build", "corpus": NPZ, "prefix": P, "dtype": "uint16"|..., "multimodal": bool}`: P.bin and
  P.idx written by `IndexedDatasetBuilder(dtype=...)` from the corpus (`tokens` end to end, `lengths`
  per sequence, `modes` per sequence, `documents`: sequences per document, `items`: per document,
  whether it is written by `add_item` per sequence then `end_document`, else by one `add_document`).
- `{"op": "read", "prefix": P, "multimodal": bool, "out": NPZ}`: what `IndexedDataset(P)` reads:
  every sequence (`tokens` end to end, `lengths`), `pointers`, `document_indices`, `modes`, `dtype`.
"""

import json
import sys
import traceback
import warnings

import numpy as np

warnings.filterwarnings("ignore")  # Megatron warns about apex and transformer-engine at import
# megatron.core imports transformers when it can; the main environment's refuses the peers directory's
# older huggingface_hub with an ImportError Megatron does not catch, and nothing here needs it
sys.modules["transformers"] = None
answers, sys.stdout = sys.stdout, sys.stderr  # whatever the package prints stays off the answer channel

import torch  # noqa: E402
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder  # noqa: E402


def build(request: dict) -> None:
    data = np.load(request["corpus"])
    sequences = np.split(data["tokens"], np.cumsum(data["lengths"])[:-1]) if len(data["lengths"]) else []
    modes = data["modes"].tolist()
    prefix, multimodal = request["prefix"], request["multimodal"]
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=getattr(np, request["dtype"]), multimodal=multimodal)
    at = 0
    for count, items in zip(data["documents"].tolist(), data["items"].tolist()):
        mine = range(at, at + count)
        if items:
            for i in mine:
                builder.add_item(torch.tensor(sequences[i].astype(np.int64)), modes[i])
            builder.end_document()
        else:
            tokens = np.concatenate([np.zeros(0, np.int64), *(sequences[i].astype(np.int64) for i in mine)])
            builder.add_document(torch.tensor(tokens), [len(sequences[i]) for i in mine],
                                 [modes[i] for i in mine] if multimodal else None)
        at += count
    builder.finalize(prefix + ".idx")


def read(request: dict) -> None:
    dataset = IndexedDataset(request["prefix"], multimodal=request["multimodal"])
    got = [dataset[i] for i in range(len(dataset))]
    sequences = [g[0] for g in got] if request["multimodal"] else got
    np.savez(request["out"], tokens=np.concatenate([np.zeros(0, dataset.index.dtype), *sequences]),
             lengths=np.array([len(s) for s in sequences], np.int64),
             pointers=np.asarray(dataset.index.sequence_pointers),
             document_indices=np.asarray(dataset.document_indices),
             modes=np.array([g[1] for g in got] if request["multimodal"] else [], np.int8),
             dtype=np.array(np.dtype(dataset.index.dtype).name))


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        try:
            {"build": build, "read": read}[request["op"]](request)
            answers.write("ok\n")
        except Exception:  # noqa: BLE001 - the test shows it; the worker stays up for the next request
            answers.write("error: " + traceback.format_exc().replace("\n", " | ") + "\n")
        answers.flush()


if __name__ == "__main__":
    main()

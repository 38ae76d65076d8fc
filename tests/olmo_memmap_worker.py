"""OLMo-core's own writer and readers for tests/test_ingest_token_memmaps.py, in one subprocess with
PYTHONPATH=$DSINSPECT_PEERS (ai2-olmo-core==3.0.0 is kept out of the main environment): olmo_core is
imported once, then the test sends one JSON request a line on stdin, and the worker answers each with
a line `ok` (or `error: ...`) once its output is written. Nothing here imports dsinspect.

Requests:
- `{"op": "write", "documents": NPZ, "path": NPY, "dtype": "uint16"|"uint32", "eos": ID}`: the
  documents (`tokens` end to end, `lengths`) as Dolma's tokenizer lays them out, each followed by EOS,
  written by `write_array_to_disk`, its metadata by `write_document_indices`.
- `{"op": "read", "path": NPY, "dtype": ..., "eos": ID|null, "length": L, "out": NPZ}`: what OLMo-core
  reads from a token file: the document (start, end) pairs of `iter_document_indices` from the metadata
  file (`metadata`) and, given an EOS, from the array (`array`); every item of a `NumpyFSLDataset` of L
  tokens over it (`items`).
"""

import json
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")

from olmo_core.data import NumpyDatasetDType, NumpyFSLDatasetConfig, TokenizerConfig  # noqa: E402
from olmo_core.data.utils import iter_document_indices, write_array_to_disk, write_document_indices  # noqa: E402


def write(request: dict) -> None:
    data = np.load(request["documents"])
    dtype, eos = np.dtype(request["dtype"]), int(request["eos"])
    documents = np.split(data["tokens"], np.cumsum(data["lengths"])[:-1])
    stream = np.concatenate([np.append(d, eos) for d in documents]).astype(dtype)
    path = Path(request["path"])
    write_array_to_disk(stream, path)
    write_document_indices(path, dtype=dtype.type, eos_token_id=eos)


def read(request: dict) -> None:
    path, dtype, eos = request["path"], np.dtype(request["dtype"]).type, request["eos"]
    out = {"metadata": np.array(list(iter_document_indices(path, use_array_if_local=False, dtype=dtype)))}
    if eos is not None:
        out["array"] = np.array(list(iter_document_indices(path, eos_token_id=eos, dtype=dtype)))
    # FSL items do not depend on the tokenizer's EOS or padding: only the config asks for one
    tokenizer = TokenizerConfig(vocab_size=int(np.iinfo(dtype).max) + 1, eos_token_id=eos or 0, pad_token_id=eos or 0)
    work = Path(request["out"]).with_suffix(".work")
    dataset = NumpyFSLDatasetConfig(tokenizer=tokenizer, paths=[path], sequence_length=int(request["length"]),
                                    dtype=NumpyDatasetDType(np.dtype(dtype).name), work_dir=str(work)).build()
    dataset.prepare()
    out["items"] = np.stack([dataset[i]["input_ids"].numpy() for i in range(len(dataset))])
    np.savez(request["out"], **out)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        try:
            {"write": write, "read": read}[request["op"]](request)
            print("ok", flush=True)
        except Exception:  # noqa: BLE001 - the test shows the worker's traceback as its failure
            print("error: " + traceback.format_exc().replace("\n", " | "), flush=True)


if __name__ == "__main__":
    main()

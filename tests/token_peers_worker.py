"""Writes token corpora with LitData's and datatrove's own writers and reads them back with their own
readers, for tests/test_ingest_litdata_datatrove.py to compare with what dsinspect ingests.

Runs in a subprocess with PYTHONPATH=$DSINSPECT_PEERS (litdata 0.2.76 and datatrove 0.10.1 are kept
out of the main environment), on the main environment's torch, numpy and tokenizers. Nothing here
imports dsinspect. argv: work directory; it receives one folder per corpus and `peers.npz`:

- LitData, `optimize(fn, inputs, item_loader=TokensLoader(), num_workers=1)`: `lit_int32` (fn yields
  torch int32 tensors, as LitGPT's prepare scripts do; chunks cut at `chunk_size` tokens) and
  `lit_uint16` (numpy uint16 arrays; chunks cut at `chunk_bytes`). Kept: `NAME/items` and
  `NAME/item_lengths` (what fn yielded, in order), `NAME/stream` (every token as LitData's
  StreamingDataset reads it with TokensLoader(block_size=1), shuffle off: each chunk's whole stream).
- datatrove, `DocumentTokenizer` over datatrove `Document`s with a WordLevel tokenizer.json made here
  (no network), EOS after each document, documents shuffled (its default): `dt_u16` (a 600-word
  vocabulary: 2-byte tokens; loss masks from `no_loss_ranges`; files cut at `max_tokens_per_file`)
  and `dt_u32` (70,000 words: 4-byte tokens; no loss). Kept: `NAME/files` (the .ds names, sorted),
  per file `NAME/FILE/stream` and `NAME/FILE/starts` (DatatroveFileDataset with one window over the
  whole file and return_positions: its tokens, and where its positions restart, i.e. where the
  reader's `.ds.index` says documents start), and `NAME/doc_tokens`, `NAME/doc_lengths`,
  `NAME/doc_loss` (each document as the tokenizer step encodes it and masks its loss, in input order).
"""

import sys
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")

LIT_SPECS = {"lit_int32": ("int32", {"chunk_size": 3000}), "lit_uint16": ("uint16", {"chunk_bytes": 5000})}
DT_SPECS = {"dt_u16": (600, True), "dt_u32": (70_000, False)}


def lit_item(seed: int, dtype: str):
    """The documents one LitData input becomes (1-3 of 1-400 tokens; ids across the type's range)."""
    rng = np.random.default_rng(seed)
    high = 60_000 if dtype == "uint16" else 2_000_000
    return [rng.integers(0, high, int(rng.integers(1, 401))).astype(dtype) for _ in range(int(rng.integers(1, 4)))]


def yield_int32(seed: int):
    import torch

    for item in lit_item(seed, "int32"):
        yield torch.from_numpy(item)


def yield_uint16(seed: int):
    yield from lit_item(seed, "uint16")


def litdata(work: Path) -> dict:
    from litdata import StreamingDataset, TokensLoader, optimize

    out = {}
    for name, (dtype, limit) in LIT_SPECS.items():
        fn = yield_int32 if dtype == "int32" else yield_uint16
        optimize(fn=fn, inputs=list(range(60)), output_dir=str(work / name), item_loader=TokensLoader(),
                 num_workers=1, **limit)
        items = [item for seed in range(60) for item in lit_item(seed, dtype)]
        dataset = StreamingDataset(str(work / name), item_loader=TokensLoader(block_size=1), shuffle=False)
        out[f"{name}/stream"] = np.concatenate([np.asarray(window) for window in dataset]).astype(dtype)
        out[f"{name}/items"] = np.concatenate(items)
        out[f"{name}/item_lengths"] = np.array([len(i) for i in items])
    return out


def datatrove(work: Path) -> dict:
    from datatrove.data import Document
    from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer
    from datatrove.utils.dataset import DatatroveFileDataset
    from tokenizers import Tokenizer, models, pre_tokenizers

    out = {}
    for name, (vocabulary, loss) in DT_SPECS.items():
        words = [f"w{i}" for i in range(vocabulary)]
        tokenizer = Tokenizer(models.WordLevel({"<eos>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(words)}},
                                               unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer.save(str(work / f"{name}.tokenizer.json"))
        rng = np.random.default_rng(vocabulary)
        documents = []
        for i in range(300):
            text = " ".join(words[j] for j in rng.integers(0, vocabulary, int(rng.integers(1, 120))))
            # no loss on the first word of every third document of three words or more (never all of it)
            masked = loss and i % 3 == 0 and text.count(" ") > 1
            metadata = {"no_loss_ranges": [(0, text.index(" ") + 1)]} if masked else {}
            documents.append(Document(text=text, id=str(i), metadata=metadata))
        step = DocumentTokenizer(str(work / name), tokenizer_name_or_path=str(work / f"{name}.tokenizer.json"),
                                 eos_token="<eos>", save_loss_metadata=loss, seed=7,
                                 max_tokens_per_file=4000 if loss else None)
        step.run(iter(documents), rank=0, world_size=1)
        encoded = step.tokenizer.encode_batch([d.text for d in documents])
        masks = [step.get_loss_values(d, e) for d, e in zip(documents, encoded)]
        assert all(m is None or len(m) == len(e.ids) for m, e in zip(masks, encoded))  # no document cropped
        out[f"{name}/doc_tokens"] = np.concatenate([e.ids for e in encoded])
        out[f"{name}/doc_lengths"] = np.array([len(e.ids) for e in encoded])
        if loss:
            out[f"{name}/doc_loss"] = np.concatenate(masks).astype(np.uint8)
        files = sorted(p.name for p in (work / name).glob("*.ds"))
        out[f"{name}/files"] = np.array(files)
        for file in files:
            tokens = (work / name / file).stat().st_size // step.token_size
            dataset = DatatroveFileDataset(str(work / name / file), seq_len=tokens - 1, token_size=step.token_size,
                                           return_positions=True)
            assert len(dataset) == 1
            window = dataset[0]
            out[f"{name}/{file}/stream"] = window["input_ids"].numpy()
            out[f"{name}/{file}/starts"] = np.flatnonzero(window["positions"].numpy() == 0)
    return out


def main() -> None:
    import datatrove as dt_module
    import litdata as lit_module

    work = Path(sys.argv[1])
    result = {**litdata(work), **datatrove(work)}
    result["module_files"] = np.array([lit_module.__file__, dt_module.__file__])
    np.savez(work / "peers.npz", **result)


if __name__ == "__main__":
    main()

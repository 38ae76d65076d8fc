"""Builds a peer library's own files and dataset from the documents tests/test_peer_sequences.py passes,
and writes what the peer yields, for the test to compare with dsinspect's packed sequences.

Runs in a subprocess with PYTHONPATH=$DSINSPECT_PEERS (ai2-olmo-core and megatron-core are kept out of
the main environment), on the main environment's torch and numpy. Nothing here imports dsinspect.

argv: peer ("olmo", "olmo_packed", "olmo_padded" or "megatron"), documents .npz (`tokens`: every
document's tokens end to end, `lengths`: each document's length; `length` L, `eos`, `seed`, `no_eod`:
the documents Megatron's input holds without EOD), work directory, output .npz.
"""

import sys
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")  # Megatron warns about apex and transformer-engine at import


def documents(data) -> list[np.ndarray]:
    ends = np.cumsum(data["lengths"])
    return np.split(data["tokens"], ends[:-1])


def olmo_dataset(data, work: Path, kind: str):
    """OLMo-core's dataset over one token file laid out as Dolma's tokenizer writes it: raw uint16 token
    ids in np.memmap's format (no .npy header), every document followed by EOS; prepared. `kind`:
    "packed" NumpyPackedFSLDataset (OBFD), "padded" NumpyPaddedFSLDataset (a document an item), else
    NumpyFSLDataset. (dataset, the stream written, the tokenizer)."""
    from olmo_core.data import (
        NumpyDatasetDType,
        NumpyFSLDataset,
        NumpyFSLDatasetConfig,
        NumpyPackedFSLDataset,
        NumpyPackedFSLDatasetConfig,
        NumpyPaddedFSLDataset,
        NumpyPaddedFSLDatasetConfig,
        TokenizerConfig,
    )
    from olmo_core.data.utils import write_array_to_disk

    tokenizer = TokenizerConfig.gpt_neox_olmo_dolma_v1_5()
    eos = int(data["eos"])
    assert tokenizer.eos_token_id == eos, (tokenizer.eos_token_id, eos)
    stream = np.concatenate([np.append(d, eos) for d in documents(data)]).astype(np.uint16)
    path = work / "part-0-00000.npy"
    write_array_to_disk(stream, path)
    assert path.stat().st_size == stream.size * 2  # raw tokens, no header
    config_type, dataset_type = {"packed": (NumpyPackedFSLDatasetConfig, NumpyPackedFSLDataset),
                                 "padded": (NumpyPaddedFSLDatasetConfig, NumpyPaddedFSLDataset)}.get(
        kind, (NumpyFSLDatasetConfig, NumpyFSLDataset))
    lengths = {} if kind == "padded" else {"generate_doc_lengths": True}  # the padded config has no such option
    config = config_type(tokenizer=tokenizer, paths=[str(path)], sequence_length=int(data["length"]),
                         dtype=NumpyDatasetDType.uint16, work_dir=str(work / "olmo-work"), **lengths)
    dataset = config.build()
    assert type(dataset) is dataset_type, type(dataset)
    dataset.prepare()
    return dataset, stream, tokenizer


def olmo(data, work: Path) -> dict:
    """OLMo-core's NumpyFSLDataset: every item and its `doc_lens`."""
    dataset, stream, _ = olmo_dataset(data, work, "fsl")
    items = [dataset[i] for i in range(len(dataset))]
    doc_lens = [item["doc_lens"].numpy() for item in items]
    return {"count": len(dataset), "stream_tokens": stream.size,
            "input_ids": np.stack([item["input_ids"].numpy() for item in items]),
            "doc_lens": np.concatenate(doc_lens), "doc_lens_counts": np.array([len(d) for d in doc_lens])}


def olmo_packed(data, work: Path) -> dict:
    """OLMo-core's NumpyPackedFSLDataset (OBFD packing, its default `truncate` for documents longer
    than L) over the same token file as `olmo`: every item, and each item's real tokens (its
    `label_mask`, False on the padding)."""
    dataset, stream, tokenizer = olmo_dataset(data, work, "packed")
    items = [dataset[i] for i in range(len(dataset))]
    real = np.array([int(item["label_mask"].sum()) for item in items])
    return {"count": len(dataset), "stream_tokens": stream.size, "pad_token_id": tokenizer.pad_token_id,
            "input_ids": np.stack([item["input_ids"].numpy() for item in items]), "real_tokens": real}


def olmo_padded(data, work: Path) -> dict:
    """OLMo-core's NumpyPaddedFSLDataset (one document an item, its first L tokens, padded) over the same
    token file as `olmo`: every item with its `label_mask` (False on the padding)."""
    dataset, stream, tokenizer = olmo_dataset(data, work, "padded")
    items = [dataset[i] for i in range(len(dataset))]
    return {"count": len(dataset), "stream_tokens": stream.size, "pad_token_id": tokenizer.pad_token_id,
            "input_ids": np.stack([item["input_ids"].numpy() for item in items]),
            "label_mask": np.stack([item["label_mask"].numpy() for item in items])}


def megatron(data, work: Path) -> dict:
    """Megatron-core's GPTDataset, built by BlendedMegatronDatasetBuilder from a .bin/.idx pair written
    by IndexedDatasetBuilder as tools/preprocess_data.py --append-eod writes it: each document's tokens
    with the tokenizer's EOD appended (but those `no_eod` marks), one sequence per document, the smallest
    dtype for the vocab."""
    import torch

    # megatron.core.tokenizers imports transformers when it can (its HuggingFace tokenizer); the main
    # environment's transformers refuses the older huggingface_hub the peers directory pins for
    # cached-path (OLMo-core), with an ImportError Megatron does not catch. Megatron supports running
    # without transformers (it catches ModuleNotFoundError), and its null tokenizer needs none of it.
    sys.modules["transformers"] = None
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    from megatron.core.tokenizers import MegatronTokenizer

    eos, length = int(data["eos"]), int(data["length"])
    tokenizer = MegatronTokenizer.from_pretrained(metadata_path={"library": "null"}, vocab_size=eos)
    assert tokenizer.eod == eos and tokenizer.vocab_size == eos + 1, (tokenizer.eod, tokenizer.vocab_size)
    prefix = str(work / "corpus_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(tokenizer.vocab_size))
    for doc, no_eod in zip(documents(data), data["no_eod"]):
        ids = doc if no_eod else np.append(doc, tokenizer.eod)
        builder.add_document(torch.tensor(ids.astype(np.int64)), [ids.size])
    builder.finalize(prefix + ".idx")

    cache = work / "megatron-cache"
    config = GPTDatasetConfig(random_seed=int(data["seed"]), sequence_length=length, blend=([prefix], None),
                              split="1,0,0", path_to_cache=str(cache), tokenizer=tokenizer,
                              reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                              create_attention_mask=False, add_extra_token_to_sequence=True)
    # sizes None: as many samples as one epoch holds (no excess sampling, a single epoch)
    train, valid, test = BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None], lambda: True, config).build()
    assert type(train) is GPTDataset and valid is None and test is None, (train, valid, test)
    assert train.dataset.sequence_lengths.dtype == np.int32 and train.dataset.index.dtype == np.uint16

    cached = {}
    for name in ("document_index", "sample_index", "shuffle_index"):
        files = list(cache.glob(f"*-GPTDataset-train-{name}.npy"))
        assert len(files) == 1, files
        cached[name] = np.load(files[0])
        assert np.array_equal(cached[name], getattr(train, name)), name  # what it caches is what it uses

    tokens, labels, doc_ids = [], [], []
    for k in range(len(train)):
        item = train[k]
        tokens.append(item["tokens"].numpy())
        labels.append(item["labels"].numpy())
        doc_ids.append(train._query_document_sample_shuffle_indices(k)[1])  # the documents of sample k
    return {"count": len(train), "stream_tokens": int(train.dataset.sequence_lengths.sum()),
            "tokens": np.stack(tokens), "labels": np.stack(labels),
            "doc_ids": np.concatenate(doc_ids), "doc_ids_counts": np.array([len(d) for d in doc_ids]),
            "sequence_lengths": np.asarray(train.dataset.sequence_lengths),
            **cached}


def main() -> None:
    peer, source, work, out = sys.argv[1:5]
    work_dir = Path(work)
    work_dir.mkdir(parents=True, exist_ok=True)
    with np.load(source) as data:
        result = {"olmo": olmo, "olmo_packed": olmo_packed, "olmo_padded": olmo_padded,
                  "megatron": megatron}[peer](data, work_dir)
    # which files each peer package was imported from: the isolated directory, not the main environment
    modules = {"olmo": "olmo_core", "olmo_packed": "olmo_core", "olmo_padded": "olmo_core", "megatron": "megatron.core"}
    result["module_file"] = np.array(sys.modules[modules[peer]].__file__)
    np.savez(out, **result)


if __name__ == "__main__":
    main()

"""dsinspect's `concat` sequences against the peers' own datasets, built by the peers' own writers and
read by their own readers (tests/peer_sequences_worker.py, in a subprocess with
PYTHONPATH=$DSINSPECT_PEERS: ai2-olmo-core==3.0.0 and megatron-core==0.16.1 are kept out of the main
environment). docs/PRETRAINING.md names both conventions; here they are checked, every sequence of an
epoch, over 300 seeded documents of 1-400 tokens (33 of length 1, 160 longer than L), L = 64.

OLMo-core, `NumpyFSLDataset` (`NumpyFSLDatasetConfig.build()`, then `prepare()`):
  - its input is a flat token file as Dolma's tokenizer writes it: raw uint16 ids in np.memmap's
    format (no .npy header; written here with olmo_core.data.utils.write_array_to_disk), each document
    followed by the tokenizer's EOS (gpt_neox_olmo_dolma_v1_5: EOS 50279);
  - item i is `input_ids` = file tokens [i*L, (i+1)*L): no overlap, no labels token, nothing added;
    the file's last (tokens mod L) tokens are dropped: tokens // L items (per file: with several files
    each file's remainder is dropped, which equals dsinspect only per file);
  - = dsinspect `SequenceSpec(L, labels=False, eos=50279)` over the documents stored without EOS:
    sequence i is item i, the same count (tokens + documents) // L, and OLMo's `doc_lens` (split at
    each EOS) are dsinspect's segment sizes (each document's segment counting its EOS).

Megatron-core, `GPTDataset` (`BlendedMegatronDatasetBuilder(GPTDataset, [None] * 3, ...)`, one prefix,
split "1,0,0", sizes None: one epoch; `GPTDatasetConfig(sequence_length=L,
add_extra_token_to_sequence=True, random_seed=SEED, path_to_cache=...)`, the null tokenizer):
  - its input is a .bin/.idx pair written by `IndexedDatasetBuilder` as tools/preprocess_data.py
    --append-eod writes it: each document's tokens and the tokenizer's EOD (here 50279), uint16 (10
    of the length-1 documents without EOD, so that Megatron's documents include length-1 ones: Megatron
    never adds an EOD itself, its documents are whatever the .bin holds);
  - it always shuffles documents: `document_index` is numpy RandomState(seed).shuffle of the document
    ids, then `shuffle_index` the same RandomState's shuffle of the sample ids (checked by rebuilding
    both here);
  - `sample_index[j]` = (position in document_index, offset) where sample j starts; sample j is the
    stream of the documents in document_index order, tokens [j*L, j*L + L + 1) (consecutive samples
    share one token; the last row is where the last sample's extra token sits, stream offset count*L);
  - `dataset[k]` is sample shuffle_index[k]: `tokens` its first L tokens, `labels` its last L;
  - count: (tokens - 1) // L samples (train split, drop_last_partial_sequence); the remaining tokens
    are not read (a valid split with drop_last_partial_validation_sequence=False would pad a last
    partial sample instead, which dsinspect does not do);
  - = dsinspect `SequenceSpec(L, labels=True, eos=None)` over a version holding Megatron's documents
    (EOD included) in Megatron's epoch-0 document order, read in stream order (shuffle="none"):
    dataset[k] == dsinspect sequence shuffle_index[k] (tokens + the labels' last token), for all k;
    sample_index[j] == the (row, start) of sequence j's first segment; the documents of sample k are
    document_index[rows of sequence shuffle_index[k]'s segments]; the same count (tokens - 1) // L.
    (0.16.1's dataset[k] has no `text`: it is `tokens` followed by the last of `labels`.)
  - checked twice: by dsinspect's arithmetic (packed_run's segments, the tokens cut from the documents)
    and as PackedLoader reads them (the second caught a reader that failed every read without eos).
OLMo-core, `NumpyPackedFSLDataset` (`NumpyPackedFSLDatasetConfig.build()`, OBFD over its one source
file, documents longer than L truncated by default), against dsinspect's `best_fit` over the same
documents in one shard (L = 64, no labels, EOS after each): dsinspect pads no more, drops no token, and
splits exactly the documents OLMo truncates.
OLMo-core, `NumpyPaddedFSLDataset` (`NumpyPaddedFSLDatasetConfig.build()`: an item per document, its
first L tokens (EOS included), padded with the tokenizer's pad id, `label_mask` False on the padding),
against dsinspect's `pad` over the same documents in three shards (L = 64, no labels, EOS after each,
`pad` = OLMo's pad id): the first piece of document d is OLMo's item d, tokens and mask; the rest of
each document longer than L follows in pieces of its own, where OLMo drops it.
Megatron-core (continued):
  - not compared: beyond one epoch (num_samples larger than an epoch) Megatron shuffles the documents of
    all its epochs in one permutation and its samples run on across epoch boundaries, where dsinspect
    starts each epoch's stream afresh; its shuffle_index is not dsinspect's `shuffle=global` order.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.loaders import Catalog, Field, PackedLoader, RunSpec, SequenceSpec, WriteOptions, packed_run
from dsinspect.loaders.order.packing import sequence_count
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.sequences.segments import assemble

HERE = Path(__file__).parent
L = 64
EOS = 50279  # OLMo's gpt_neox_olmo_dolma_v1_5 EOS; Megatron's NullTokenizer(vocab_size=50279).eod
SEED = 1234  # Megatron's random_seed
FIELDS = [Field("tokens", pa.list_(pa.uint16()), "tokens", False)]
PEERS = {"olmo": "olmo_core/__init__.py", "megatron": "megatron/core/__init__.py"}
WORKERS = ("olmo", "olmo_packed", "olmo_padded", "megatron")  # peer_sequences_worker.py's modes, run at once


def peers_dir() -> Path:
    where = os.environ.get("DSINSPECT_PEERS")
    if not where:
        pytest.skip("DSINSPECT_PEERS is not set (the directory holding ai2-olmo-core and megatron-core)")
    if not all((Path(where) / f).is_file() for f in PEERS.values()):
        pytest.skip(f"DSINSPECT_PEERS={where} lacks ai2-olmo-core or megatron-core")
    return Path(where)


def make_documents() -> list[np.ndarray]:
    """300 documents of 1-159 tokens, then 30 set to length 1 and 20 to 65-400 (33 of length 1, 160
    longer than L); ids 1..EOS-1 (EOS never inside a document)."""
    rng = np.random.default_rng(20240613)
    lengths = rng.integers(1, 160, 300)
    picked = rng.permutation(300)
    lengths[picked[:30]] = 1
    lengths[picked[30:50]] = rng.integers(L + 1, 401, 20)
    return [rng.integers(1, EOS, int(n)).astype(np.uint16) for n in lengths]


def no_eod_mask(docs: list[np.ndarray]) -> np.ndarray:
    """The documents Megatron's input holds without an EOD: 10 of the length-1 ones (so that its
    documents include length-1 ones too)."""
    mask = np.zeros(len(docs), np.int8)
    mask[[i for i, d in enumerate(docs) if d.size == 1][:10]] = 1
    return mask


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    """Both peer workers started at once (each spends ~10 s importing its library); each test waits
    for its own. (documents, {peer: (process, output, log)}, tmp)."""
    where = peers_dir()
    tmp = tmp_path_factory.mktemp("peers")
    docs = make_documents()
    source = tmp / "documents.npz"
    np.savez(source, tokens=np.concatenate(docs), lengths=np.array([d.size for d in docs]), length=L, eos=EOS,
             seed=SEED, no_eod=no_eod_mask(docs))
    env = {**os.environ, "PYTHONPATH": str(where)}
    running = {}
    for peer in WORKERS:
        out, log = tmp / f"{peer}.npz", tmp / f"{peer}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen([sys.executable, "-W", "ignore", str(HERE / "peer_sequences_worker.py"), peer,
                                     str(source), str(tmp / peer), str(out)], stdout=f, stderr=subprocess.STDOUT,
                                    env=env)
        running[peer] = (proc, out, log)
    yield docs, running, tmp
    for proc, _, _ in running.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def peer_result(peers, peer: str) -> dict:
    _, running, _ = peers
    proc, out, log = running[peer]
    code = proc.wait(timeout=300)
    assert code == 0, f"the {peer} worker failed ({code}):\n{log.read_text()[-4000:]}"
    with np.load(out) as data:
        result = {k: data[k] for k in data.files}
    assert Path(str(result["module_file"])).is_relative_to(peers_dir())  # the pinned peer, not another copy
    return result


def spec_of(catalog: Catalog, name: str, **packing) -> RunSpec:
    """Batches of 16 on one rank in stream order (no sequence shuffle), the last batch padded."""
    return RunSpec.create(catalog, name, batch_size=16, world_size=1, shuffle="none", last_batch="pad",
                          sequences=SequenceSpec(length=L, shuffle_documents=False, **packing))


def read_sequences(catalog: Catalog, spec: RunSpec, cache: Path):
    """Every sequence of the first epoch in stream order as PackedLoader reads it: (tokens [n, W], Segments,
    cu_seqlens of each sequence)."""
    tokens, segments, cu = [], [], []
    with PackedLoader(spec, 0, catalog, cache=ShardCache(cache)) as loader:
        for batch in loader:  # the first epoch
            for i, s in enumerate(batch.sequences):
                assert s.source_epoch == 0
                if s.padding:  # the last batch filled up with repeated sequences
                    continue
                assert s.sequence == len(tokens)  # stream order
                tokens.append(batch.tokens[i])
                segments.append(s.segments)
                sizes = np.diff(batch.cu_seqlens)  # every segment of the batch, sequence after sequence
                first = sum(len(t.segments) for t in batch.sequences[:i])
                cu.append(np.concatenate([[0], np.cumsum(sizes[first:first + len(s.segments)])]))
    return np.stack(tokens), segments, cu


def located_sequences(catalog: Catalog, spec: RunSpec, rows: list[np.ndarray]):
    """Every sequence of the first epoch in stream order by dsinspect's arithmetic alone (packed_run's
    segments over the manifest and the stored document lengths), its tokens cut from `rows` (the
    documents as stored): (tokens [n, W], Segments)."""
    run = packed_run(catalog, spec)
    located = [s for step in range(-(-spec.epoch_length // 16)) for s in run.batch(step, 0) if not s.padding]
    assert [(s.source_epoch, s.sequence) for s in located] == [(0, j) for j in range(spec.epoch_length)]
    tokens = [assemble(s.segments, lambda d: rows[d], spec.sequences.eos) for s in located]
    return np.stack(tokens), [s.segments for s in located]


def test_concat_without_labels_is_olmo_core_numpy_fsl_dataset(peers):
    docs, _, tmp = peers
    catalog = Catalog(str(tmp / "cat-olmo"))
    catalog.write_version("corpus", [{"tokens": d.tolist()} for d in docs], FIELDS,
                          options=WriteOptions(shard_rows=25))
    spec = spec_of(catalog, "corpus", labels=False, eos=EOS)
    ours, segments, cu = read_sequences(catalog, spec, tmp / "cache")  # while the peers import
    olmo = peer_result(peers, "olmo")

    stream = sum(d.size for d in docs) + len(docs)  # every document and its EOS
    assert int(olmo["stream_tokens"]) == stream
    count = stream // L  # the file's last stream % L tokens dropped
    assert int(olmo["count"]) == count == spec.epoch_length == len(ours) == sequence_count([stream - len(docs)],
                                                                                          [len(docs)], spec.sequences)
    assert stream % L != 0  # a tail to drop
    assert ours.shape == olmo["input_ids"].shape == (count, L)
    np.testing.assert_array_equal(ours, olmo["input_ids"])  # sequence i is item i, all of them

    # OLMo's doc_lens (the item split after each EOS) are the sizes of dsinspect's segments
    olmo_lens = np.split(olmo["doc_lens"], np.cumsum(olmo["doc_lens_counts"])[:-1])
    assert len(olmo_lens) == count
    for i in range(count):
        np.testing.assert_array_equal(segments[i].sizes, olmo_lens[i], err_msg=f"item {i}")
        np.testing.assert_array_equal(np.diff(cu[i]), olmo_lens[i], err_msg=f"item {i}")
    assert sum(len(s) for s in segments) > count + 100  # many items hold several documents


@pytest.fixture(scope="module")
def megatron(peers):
    """Megatron's result; its documents as its .bin holds them; a dsinspect version of those documents in
    Megatron's epoch-0 order and its spec (labels, no EOS added): (result, stored, catalog, spec)."""
    docs, _, tmp = peers
    meg = peer_result(peers, "megatron")
    eod = no_eod_mask(docs) == 0
    stored = [np.append(d, EOS).astype(np.uint16) if e else d for d, e in zip(docs, eod)]
    catalog = Catalog(str(tmp / "cat-megatron"))
    catalog.write_version("megatron-order", [{"tokens": stored[d].tolist()} for d in meg["document_index"]],
                          FIELDS, options=WriteOptions(shard_rows=25))
    return meg, stored, catalog, spec_of(catalog, "megatron-order", labels=True, eos=None)


def test_megatron_core_gpt_dataset_index(megatron):
    """Megatron's own conventions: documents, then samples, shuffled by one RandomState(seed); one epoch
    of (tokens - 1) // L samples; dsinspect counts the same."""
    meg, stored, _, spec = megatron
    n = len(stored)
    assert sum(d.size == 1 for d in stored) == 10  # length-1 documents as Megatron stores them
    np.testing.assert_array_equal(meg["sequence_lengths"], [d.size for d in stored])
    state = np.random.RandomState(SEED)
    expected_documents = np.arange(n, dtype=np.int32)
    state.shuffle(expected_documents)
    np.testing.assert_array_equal(meg["document_index"], expected_documents)
    assert not np.array_equal(meg["document_index"], np.arange(n))
    stream = sum(d.size for d in stored)
    assert int(meg["stream_tokens"]) == stream
    count = (stream - 1) // L  # L + 1 tokens every L: the last sample needs its extra token
    assert int(meg["count"]) == count == spec.epoch_length == sequence_count([stream], [n], spec.sequences)
    expected_samples = np.arange(count, dtype=np.uint32)
    state.shuffle(expected_samples)
    np.testing.assert_array_equal(meg["shuffle_index"], expected_samples)


def assert_megatron_samples(meg, stored, ours, segments):
    """Every sample of Megatron's epoch against dsinspect's sequences in stream order."""
    document_index, sample_index, shuffle_index = meg["document_index"], meg["sample_index"], meg["shuffle_index"]
    count = int(meg["count"])
    assert ours.shape == (count, L + 1)

    # dataset[k] is dsinspect's sequence shuffle_index[k]: inputs its first L tokens, labels its last L
    tokens, labels = meg["tokens"], meg["labels"]
    assert tokens.shape == labels.shape == (count, L)
    np.testing.assert_array_equal(tokens[:, 1:], labels[:, :-1])
    text = np.concatenate([tokens, labels[:, -1:]], axis=1)
    np.testing.assert_array_equal(text, ours[shuffle_index])  # every sample of the epoch

    # its sample index is where dsinspect's sequences start; its documents are dsinspect's segments
    assert sample_index.shape == (count + 1, 2)
    np.testing.assert_array_equal(sample_index[:-1], [(s.docs[0], s.starts[0]) for s in segments])
    starts = np.concatenate([[0], np.cumsum([stored[d].size for d in document_index])])
    np.testing.assert_array_equal(starts[sample_index[:, 0]] + sample_index[:, 1], np.arange(count + 1) * L)
    last = segments[-1]  # the last row: the last sample's extra token, the last token dsinspect reads
    assert (sample_index[-1, 0], sample_index[-1, 1] + 1) == (last.docs[-1], last.stops[-1])
    doc_ids = np.split(meg["doc_ids"], np.cumsum(meg["doc_ids_counts"])[:-1])
    for k in range(count):
        np.testing.assert_array_equal(doc_ids[k], document_index[segments[shuffle_index[k]].docs],
                                      err_msg=f"sample {k}")


def test_concat_with_labels_is_megatron_core_gpt_dataset(megatron):
    """dsinspect's arithmetic (packed_run's segments) over Megatron's documents in its order."""
    meg, stored, catalog, spec = megatron
    ours, segments = located_sequences(catalog, spec, [stored[d] for d in meg["document_index"]])
    assert_megatron_samples(meg, stored, ours, segments)


def test_packed_loader_reads_megatron_core_gpt_dataset_samples(megatron, peers):
    """The same through PackedLoader: the tokens as read from the verified cache."""
    meg, stored, catalog, spec = megatron
    ours, segments, _ = read_sequences(catalog, spec, peers[2] / "cache")
    assert_megatron_samples(meg, stored, ours, segments)


def test_best_fit_pads_less_than_olmo_core_packed_dataset_and_drops_nothing(peers):
    """OLMo-core's NumpyPackedFSLDataset (OBFD over its one source file, documents longer than L truncated
    by default) and dsinspect's best_fit (the same documents in one shard, L = 64 without labels, EOS
    after each), every sequence of the epoch as PackedLoader reads it."""
    docs, _, tmp = peers
    catalog = Catalog(str(tmp / "cat-best-fit"))
    catalog.write_version("corpus", [{"tokens": d.tolist()} for d in docs], FIELDS,
                          options=WriteOptions(shard_rows=len(docs)))  # one block, as OLMo packs one file
    spec = RunSpec.create(catalog, "corpus", batch_size=16, world_size=1, shuffle="none", last_batch="pad",
                          sequences=SequenceSpec(length=L, eos=EOS, packing="best_fit"))
    held, tokens_read, pieces = 0, 0, {}
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp / "cache-best-fit")) as loader:
        for batch in loader:
            for i, s in enumerate(batch.sequences):
                if s.padding:
                    continue
                held += L
                tokens_read += int(batch.held[i])
                for d, a, b in zip(s.segments.docs.tolist(), s.segments.starts.tolist(), s.segments.stops.tolist()):
                    pieces.setdefault(d, []).append((a, b))
    olmo = peer_result(peers, "olmo_packed")
    stream = sum(d.size for d in docs) + len(docs)
    assert int(olmo["stream_tokens"]) == stream == tokens_read  # dsinspect: every token and EOS, once
    sizes = np.array([d.size + 1 for d in docs])
    olmo_real = int(olmo["real_tokens"].sum())
    truncated = sizes > L
    assert olmo_real == stream - int((sizes[truncated] - L).sum())  # OLMo drops what exceeds L of those
    olmo_padding = 1 - olmo_real / (int(olmo["count"]) * L)
    ours_padding = 1 - tokens_read / held
    assert ours_padding <= olmo_padding, (ours_padding, olmo_padding)
    assert all(sum(b - a for a, b in pieces[d]) == int(n) for d, n in enumerate(sizes))  # no document loses a token
    split = {d for d, p in pieces.items() if len(p) > 1}
    assert split == set(np.flatnonzero(truncated).tolist())  # split: exactly the documents OLMo truncates


def test_pad_is_olmo_core_padded_dataset_with_the_rest_of_each_long_document_kept(peers):
    """Every sequence of the epoch as PackedLoader reads it (stream order: each document's pieces in a
    row), against every item of OLMo-core's NumpyPaddedFSLDataset."""
    docs, _, tmp = peers
    olmo = peer_result(peers, "olmo_padded")
    catalog = Catalog(str(tmp / "cat-pad"))
    catalog.write_version("corpus", [{"tokens": d.tolist()} for d in docs], FIELDS,
                          options=WriteOptions(shard_rows=100))  # the spec counts each shard's sequences
    spec = RunSpec.create(catalog, "corpus", batch_size=16, world_size=1, shuffle="none", last_batch="pad",
                          sequences=SequenceSpec(length=L, eos=EOS, packing="pad", pad=int(olmo["pad_token_id"])))
    first: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # document -> its first piece's tokens and loss mask
    rest = []  # the pieces after each document's first: (document, start, stop)
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp / "cache-pad")) as loader:
        for batch in loader:  # the first epoch
            for i, s in enumerate(batch.sequences):
                if s.padding:
                    continue
                (d,), (a,), (b,) = s.segments.docs.tolist(), s.segments.starts.tolist(), s.segments.stops.tolist()
                if a == 0:
                    first[d] = (batch.tokens[i].copy(), batch.loss_mask[i].copy())
                else:
                    rest.append((d, a, b))
    assert int(olmo["count"]) == len(docs) == len(first)
    for d in range(len(docs)):
        np.testing.assert_array_equal(first[d][0], olmo["input_ids"][d], err_msg=f"document {d}")
        np.testing.assert_array_equal(first[d][1], olmo["label_mask"][d], err_msg=f"document {d}")
    sizes = np.array([d.size + 1 for d in docs])
    longer = np.flatnonzero(sizes > L)
    assert len(longer) == 160
    assert {d for d, _, _ in rest} == set(longer.tolist())  # what OLMo drops of them, dsinspect reads
    assert sum(b - a for _, a, b in rest) == int((sizes[longer] - L).sum())

"""The packed-sequence loader (read/packed_loader.py) over a real catalog: every batch holds the windows
the run's arithmetic names, read from verified cached shards, with the document segments, position ids,
`cu_seqlens` and loss mask a model takes; exact and elastic resume continue the same order of
sequences; a run record passes the log check and an edited document is named. docs/PRETRAINING.md
links here."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from replay_diff_fixtures import rewrite_shard

from dsinspect.errors import IntegrityError, UserError
from dsinspect.loaders import Catalog, Field, Loader, LoaderState, WriteOptions, epoch_order
from dsinspect.loaders.audit.logcheck import check_log
from dsinspect.loaders.order.packing import SequenceSpec
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.cache import ShardCache
from dsinspect.loaders.read.packed_loader import PackedLoader
from dsinspect.loaders.sequences.packed import PackedRun
from dsinspect.loaders.sequences.segments import assemble

EOS = 65_535
FIELDS = [Field("id", pa.int64(), "scalar", False), Field("tokens", pa.list_(pa.uint16()), "tokens")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """150 documents of 0-299 tokens (two null ones) in 6 shards of 25, row groups of 10."""
    rng = np.random.default_rng(7)
    docs = [rng.integers(1, 50_000, int(n)).tolist() for n in rng.integers(0, 300, 150)]
    docs[3] = docs[77] = None
    root = tmp_path_factory.mktemp("packed")
    catalog = Catalog(str(root / "cat"))
    catalog.write_version("corpus", [{"id": i, "tokens": d} for i, d in enumerate(docs)], FIELDS,
                          options=WriteOptions(shard_rows=25, row_group_rows=10))
    return catalog, [d or [] for d in docs], root


def spec_of(catalog, **options) -> RunSpec:
    seq = SequenceSpec(length=64, labels=True, eos=EOS, shuffle_documents=True)
    defaults = dict(seed=5, batch_size=3, world_size=2, shuffle="global", last_batch="pad", sequences=seq)
    return RunSpec.create(catalog, "corpus", **{**defaults, **options})


def small_corpus(tmp_path, seed: int, count: int, longest: int):
    """A catalog of its own (a test that edits shards in place): `count` documents of 1..longest tokens."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(1, 50_000, int(n)).tolist() for n in rng.integers(1, longest, count)]
    catalog = Catalog(str(tmp_path / "cat"))
    version = catalog.write_version("corpus", [{"id": i, "tokens": d} for i, d in enumerate(docs)], FIELDS,
                                    options=WriteOptions(shard_rows=20, row_group_rows=10))
    return catalog, version, docs


def stream_of(loader):
    while True:  # each `for` yields the rest of one epoch
        yield from loader


def test_every_batch_holds_the_windows_the_arithmetic_names_and_what_a_model_takes(corpus, tmp_path):
    catalog, docs, _ = corpus
    spec = spec_of(catalog)
    arithmetic = PackedRun(spec, lambda k, shard: np.array([len(d) for d in docs[shard * 25:(shard + 1) * 25]]))
    version = catalog.resolve("corpus")
    read: dict[int, int] = {}
    for rank in range(2):
        with PackedLoader(spec, rank, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
            stream = stream_of(loader)
            for step in range(-(-spec.epoch_length // 6) + 2):  # through the first epoch's padded tail, on
                batch = next(stream)
                expected = arithmetic.batch(step, rank)
                assert (batch.step, batch.rank, batch.tokens.shape) == (step, rank, (3, 65))
                assert batch.tokens.dtype == np.uint16  # as stored
                assert [(s.source_epoch, s.sequence, s.padding) for s in batch.sequences] == \
                    [(s.source_epoch, s.sequence, s.padding) for s in expected]
                for i, s in enumerate(expected):
                    want = assemble(s.segments, lambda d: np.asarray(docs[d], np.int64), EOS)
                    np.testing.assert_array_equal(batch.tokens[i], want)
                    segments = batch.segments(i)
                    assert [g.address for g in segments] == [f"corpus@{version.id}:{d}" for d in s.segments.docs]
                    assert [(g.start, g.stop) for g in segments] == list(zip(s.segments.starts, s.segments.stops))
                    for g in segments:  # positions restart at each document; the EOS counts in it
                        size = g.stop - g.start
                        np.testing.assert_array_equal(batch.position_ids[i, g.offset:g.offset + size], np.arange(size))
                        assert g.stop <= len(docs[int(g.address.rsplit(":", 1)[1])]) + 1
                    if not s.padding and s.source_epoch == 0:
                        read[s.sequence] = read.get(s.sequence, 0) + 1
                # cu_seqlens: every segment's bounds in the flattened batch, from 0 to B * W
                sizes = np.concatenate([s.segments.sizes for s in expected])
                np.testing.assert_array_equal(batch.cu_seqlens, np.concatenate([[0], np.cumsum(sizes)]))
                assert batch.cu_seqlens[-1] == 3 * 65 and batch.max_seqlen == sizes.max()
                np.testing.assert_array_equal(batch.loss_mask, ~np.array([[s.padding] * 65 for s in expected]))
    assert read == dict.fromkeys(range(spec.epoch_length), 1)  # the first epoch: each sequence once over the ranks


def test_documents_concatenated_as_stored_without_an_eos(corpus, tmp_path):
    """eos=None: corpora tokenized by Megatron's or OLMo's tools already end each document with it."""
    catalog, docs, _ = corpus
    spec = spec_of(catalog, sequences=SequenceSpec(length=50, labels=True, eos=None))
    stream = np.concatenate([np.asarray(d, np.int64) for d in docs])
    with PackedLoader(spec, 1, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        for batch in loader:
            for i, s in enumerate(batch.sequences):
                np.testing.assert_array_equal(batch.tokens[i], stream[s.sequence * 50:s.sequence * 50 + 51])


def test_a_sequence_digest_is_its_documents_row_hashes_and_token_ranges(corpus, tmp_path):
    """docs/PRETRAINING.md: xxh3-128 over each segment's stored row hash, start and stop (int64, little-endian)."""
    import xxhash

    catalog, _, _ = corpus
    version = catalog.resolve("corpus")
    with PackedLoader(spec_of(catalog), 1, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        batch = loader.batch_at(5)
    for i, s in enumerate(batch.sequences):
        record = b"".join(version.row_hash(int(d)) + int(a).to_bytes(8, "little") + int(b).to_bytes(8, "little")
                          for d, a, b in zip(s.segments.docs, s.segments.starts, s.segments.stops))
        assert bytes(batch.digests[i]) == xxhash.xxh3_128_digest(record)
    assert batch.fingerprint == xxhash.xxh3_128_hexdigest(batch.digests.tobytes())


def test_exact_and_elastic_resume_continue_the_same_sequences(corpus, tmp_path):
    catalog, _, _ = corpus
    spec = spec_of(catalog, batch_size=4, last_batch="drop")
    cache = ShardCache(tmp_path / "cache")

    def global_order(spec, steps, states=None):
        """(tokens, digest) of each sequence the ranks read over `steps`, in global order."""
        out = []
        loaders = [PackedLoader(spec, r, catalog, cache=cache) for r in range(spec.world_size)]
        for r, loader in enumerate(loaders):
            if states is not None:
                loader.load_state_dict(states[min(r, len(states) - 1)])
        streams = [stream_of(loader) for loader in loaders]
        for _ in range(steps):
            for batch in [next(s) for s in streams]:
                out += [(bytes(t), bytes(d)) for t, d in zip(batch.tokens, batch.digests)]
        states = [loader.state_dict() for loader in loaders]
        for loader in loaders:
            loader.close()
        return out, states

    whole, _ = global_order(spec, 9)  # 72 sequences
    first, states = global_order(spec, 3)
    assert first == whole[:24]
    for world, batch in [(2, 4), (1, 8), (4, 2), (1, 3)]:
        resumed, _ = global_order(spec.replace(world_size=world, batch_size=batch), 48 // (world * batch), states)
        assert resumed == whole[24:24 + 48 // (world * batch) * world * batch], (world, batch)
    other = RunSpec.create(catalog, "corpus", seed=6, batch_size=4, world_size=2, shuffle="global",
                           sequences=spec.sequences)
    with pytest.raises(UserError, match="another data order"):
        PackedLoader(other, 0, catalog, cache=cache).load_state_dict(states[0])


def test_a_record_of_packed_batches_passes_the_check_and_an_edited_document_is_named(tmp_path, cli):
    catalog, version, docs = small_corpus(tmp_path, seed=11, count=60, longest=120)  # edited below: its own
    spec = spec_of(catalog, batch_size=2, last_batch="drop")
    record = str(tmp_path / "run")
    cache = ShardCache(tmp_path / "cache")
    states, seen = [], []
    for rank in range(2):  # 3 steps on two ranks, then the rest of the epoch on one with batch 4
        with PackedLoader(spec, rank, catalog, cache=cache, record_dir=record, record_samples=True) as loader:
            stream = stream_of(loader)
            seen.append([next(stream) for _ in range(3)])
            states.append(loader.state_dict())
    with PackedLoader(spec.replace(world_size=1, batch_size=4), 0, catalog, cache=cache, record_dir=record,
                      record_samples=True) as loader:
        loader.load_state_dict(states[0])
        later = list(loader)
    result = check_log(record, record, catalog=catalog)
    assert result.ok and result.segments == 2 and result.checked == 6 + len(later), result.to_json()
    code, out, err = cli("replay", "--spec", record, "--check-log", record, "--catalog", catalog.url)
    assert code == 0, err
    # a document the run read at step 1 on rank 0 edited in place (its stored row hash rewritten too)
    target = int(seen[0][1].sequences[0].segments.docs[0])
    rewrite_shard(version, target, "tokens", [t ^ 1 for t in docs[target]], rehash=True)
    result = check_log(record, record, catalog=catalog)
    div = result.divergence
    assert not result.ok and (div.step, div.rank) == (1, 0) and 0 in div.positions
    assert f"{version.address}:{target} tokens" in div.reason
    code, out, err = cli("replay", "--spec", record, "--check-log", record, "--catalog", catalog.url)
    assert code == 1 and f":{target} tokens" in out + err
    # one that no longer has the length the manifest counted: the check fails naming the shard
    rewrite_shard(version, target, "tokens", docs[target] + [5], rehash=True)
    div = check_log(record, record, catalog=catalog).divergence
    assert (div.step, div.rank) == (0, 0) and "no longer holds the documents" in div.reason


def test_a_damaged_cached_shard_is_refused_not_read(corpus, tmp_path):
    catalog, _, _ = corpus
    spec = spec_of(catalog)
    cache = ShardCache(tmp_path / "cache")
    with PackedLoader(spec, 0, catalog, cache=cache) as loader:
        clean = loader.batch_at(0).tokens.copy()
    cached = sorted((tmp_path / "cache").rglob("*.arrow"))
    assert cached
    for path in cached:  # flip one byte in the middle of every cached shard (where tokens are)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    refused = []
    for _ in range(len(cached) + 1):  # as a job restarted after each refusal: a damaged shard is dropped once
        cache = ShardCache(tmp_path / "cache")  # a new process: blocks checked by the last one are checked again
        with PackedLoader(spec, 0, catalog, cache=cache) as loader:
            try:
                got = loader.batch_at(0).tokens
                break
            except IntegrityError as e:
                assert "do not match the hash taken when it was cached" in str(e)
                refused.append(e)
    assert 1 <= len(refused) <= len(cached)
    np.testing.assert_array_equal(got, clean)  # fetched again, read exactly


def test_what_cannot_be_read_as_packed_batches_is_refused_in_one_line(corpus):
    catalog, _, _ = corpus
    with pytest.raises(UserError, match="eos 70000 does not fit the stored token type uint16"):
        PackedLoader(spec_of(catalog, sequences=SequenceSpec(length=64, eos=70_000)), 0, catalog)
    with pytest.raises(UserError, match="reads rows, not packed sequences"):
        PackedLoader(RunSpec.create(catalog, "corpus", batch_size=2), 0, catalog)
    with pytest.raises(UserError, match="PackedLoader"):
        Loader(spec_of(catalog), 0, catalog=catalog)
    with pytest.raises(UserError, match="rank 2 is outside the world size 2"):
        PackedLoader(spec_of(catalog), 2, catalog)
    with pytest.raises(UserError, match="pad 70000 does not fit the stored token type uint16"):
        PackedLoader(spec_of(catalog, sequences=SequenceSpec(length=64, packing="best_fit", pad=70_000)), 0, catalog)


def test_the_packed_adapters_refuse_a_row_spec_and_what_they_set_themselves(corpus):
    pytest.importorskip("torch")
    pytest.importorskip("grain")
    from dsinspect.loaders.grain import PackedStepSource
    from dsinspect.loaders.pytorch import PackedTorchLoader
    catalog, _, _ = corpus
    rows = RunSpec.create(catalog, "corpus", batch_size=2)
    with pytest.raises(UserError, match=r"PackedTorchLoader reads packed sequences.*TorchLoader"):
        PackedTorchLoader(rows, catalog)
    with pytest.raises(UserError, match=r"PackedStepSource reads packed sequences.*StepSource"):
        PackedStepSource(rows, catalog)
    with pytest.raises(UserError, match="PackedTorchLoader sets collate_fn itself"):
        PackedTorchLoader(spec_of(catalog), catalog, collate_fn=list)
    with pytest.raises(UserError, match="rank 5 is outside the world size 2"):
        PackedTorchLoader(spec_of(catalog), catalog, rank=5)


# -- replay: the batch of any step, by arithmetic, from the catalog ----------------------------------

def test_replay_gives_the_loaders_packed_batch_and_names_a_damaged_document(tmp_path, cli):
    from dsinspect.loaders.audit.packed_replay import replay_packed

    catalog, version, docs = small_corpus(tmp_path, seed=4, count=50, longest=90)  # edited below: its own
    spec = spec_of(catalog, batch_size=2)
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    for step in (0, 7, spec.epoch_length // 4 + 3):  # the last one in the second epoch
        replayed = replay_packed(spec, step, "all", catalog)
        assert [b.rank for b in replayed.batches] == [0, 1] and not replayed.damaged
        for b in replayed.batches:
            with PackedLoader(spec, b.rank, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
                read = loader.batch_at(step)
            np.testing.assert_array_equal(b.tokens, read.tokens)
            assert b.tokens.dtype == read.tokens.dtype and b.fingerprint == read.fingerprint
            assert [b.segments(i) for i in range(len(b))] == [read.segments(i) for i in range(len(read))]
    code, out, err = cli("replay", "--spec", path, "--step", 7, "--catalog", catalog.url)
    assert code == 0, err
    read = replay_packed(spec, 7, 0, catalog).batches[0]
    assert f"rank 0: {read.fingerprint}" in out and "sequences of 64 tokens" in out
    first = read.segments(0)[0]
    assert f"corpus@{version.id[:12]}:{first.address.rsplit(':', 1)[1]} [{first.start}, {first.stop})" in out
    code, out, err = cli("replay", "--spec", path, "--step", 7, "--rank", "all", "--json", "--catalog", catalog.url)
    data = json.loads(out)
    assert code == 0 and [b["fingerprint"] for b in data["batches"]] == \
        [b.fingerprint for b in replay_packed(spec, 7, "all", catalog).batches]
    assert data["batches"][0]["sequences"][0]["tokens"] == read.tokens[0].tolist()
    # a document edited in place, its stored row hash left as it was: named, exit 1, the batch still shown
    target = int(read.sequences[1].segments.docs[0])
    rewrite_shard(version, target, "tokens", [t ^ 1 for t in docs[target]], rehash=False)
    code, out, err = cli("replay", "--spec", path, "--step", 7, "--catalog", catalog.url)
    assert code == 1 and f"rank 0: {read.fingerprint}" in out  # the stored row hashes: as the job read it
    assert f"sequence 1 took tokens from corpus@{version.id}:{target}, whose bytes no longer hash" in err
    assert err.count("\n") == 1


def test_replay_decodes_each_sequence_with_the_stored_tokenizer(tmp_path, cli):
    from dsinspect.defaults import open_catalog
    from dsinspect.loaders.audit.packed_replay import replay_packed

    catalog = open_catalog()  # demo-text: a Hugging Face tokenizer stored with its tokens field
    spec = RunSpec.create(catalog, "demo-text@v1", batch_size=2, shuffle="none",
                          sequences=SequenceSpec(length=48, eos=0))
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    code, out, err = cli("replay", "--spec", path, "--step", 0, "--catalog", catalog.url)
    assert code == 0, err
    version = catalog.resolve("demo-text@v1")
    assert "A simple bread: 500 g strong flour" in out  # decoded words, not ids
    # a sequence holding the end of one document and the start of the next: ` │ ` between their texts
    step = next(s for s in range(40) if len(replay_packed(spec, s, 0, catalog).batches[0].segments(0)) > 1)
    code, out, err = cli("replay", "--spec", path, "--step", step, "--json", "--catalog", catalog.url)
    shown = json.loads(out)["batches"][0]["sequences"][0]
    doc = int(shown["segments"][1]["address"].rsplit(":", 1)[1])
    second = shown["text"].split(" │ ")[1]
    assert version.row(doc)["text"].startswith(second[:20]) and len(second) >= 20
    code, out, err = cli("replay", "--spec", path, "--step", 0, "--export", tmp_path / "x", "--catalog", catalog.url)
    assert code == 2 and "a packed run's batch is its sequences" in err


def test_torch_tensors_shift_labels_and_keep_attention_inside_each_document(corpus, tmp_path):
    torch = pytest.importorskip("torch")
    from dsinspect.loaders.pytorch import packed_to_torch

    catalog, docs, _ = corpus
    spec = spec_of(catalog)  # 64 tokens + 1 label token a sequence
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        batch = loader.batch_at(4)
    t = packed_to_torch(batch)
    assert t["input_ids"].shape == t["labels"].shape == t["position_ids"].shape == t["loss_mask"].shape == (3, 64)
    assert t["input_ids"].dtype == t["labels"].dtype == torch.int64
    assert torch.equal(t["input_ids"][:, 1:], t["labels"][:, :-1])  # labels: the inputs shifted by one
    assert t["labels"][:, -1].tolist() == batch.tokens[:, 64].tolist()
    cu = t["cu_seqlens"].tolist()
    assert cu[0] == 0 and cu[-1] == 3 * 64 and all(b > a for a, b in zip(cu, cu[1:]))
    assert t["max_seqlen"] == max(b - a for a, b in zip(cu, cu[1:]))
    flat_positions = t["position_ids"].reshape(-1)
    assert all(flat_positions[a] == 0 for a in cu[:-1])  # every segment starts at position 0
    # attention masked by cu_seqlens: a document's outputs do not depend on any other document's tokens
    torch.manual_seed(0)
    embed = torch.nn.Embedding(65_536, 8)

    def attend(ids: torch.Tensor) -> torch.Tensor:
        doc = torch.bucketize(torch.arange(3 * 64), t["cu_seqlens"][1:], right=True)
        mask = (doc[:, None] == doc[None, :]) & torch.ones(3 * 64, 3 * 64, dtype=torch.bool).tril()
        x = embed(ids.reshape(-1))[None]
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, attn_mask=mask)[0]

    with torch.no_grad():
        before = attend(t["input_ids"])
        changed = t["input_ids"].clone().reshape(-1)
        changed[cu[1]:] = (changed[cu[1]:] + 1) % 65_536  # every token after the first segment
        after = attend(changed.reshape(3, 64))
    assert torch.equal(before[:cu[1]], after[:cu[1]]) and not torch.equal(before[cu[1]:], after[cu[1]:])


def test_segment_ids_and_the_document_table_name_the_same_segments_as_cu_seqlens(corpus, tmp_path):
    catalog, docs, _ = corpus
    spec = spec_of(catalog)
    with PackedLoader(spec, 1, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        batch = loader.batch_at(2)
    arrays = batch.model_arrays(np.int32)
    assert {k: (v.shape, v.dtype.name) for k, v in arrays.items()} == {
        "input_ids": ((3, 64), "int32"), "labels": ((3, 64), "int32"), "position_ids": ((3, 64), "int32"),
        "segment_ids": ((3, 64), "int32"), "loss_mask": ((3, 64), "bool")}
    # the segmentation JAX and Grain take and FlashAttention's cu_seqlens cut the inputs at the same places
    ids = arrays["segment_ids"]
    new = np.ones(ids.shape, bool)
    new[:, 1:] = ids[:, 1:] != ids[:, :-1]  # a segment starts here: a row's start, or a change of id
    assert np.flatnonzero(new.reshape(-1)).tolist() == batch.cu_seqlens_of(64)[:-1].tolist()
    assert (ids[:, 0] == 1).all() and (np.diff(ids, axis=1) >= 0).all()
    assert (arrays["position_ids"][new] == 0).all() and (arrays["position_ids"][~new] > 0).all()
    # the table: each segment's document, range and place, as `segments(i)` says with addresses
    table = batch.document_segments
    for i in range(len(batch)):
        rows = table[table[:, 0] == i]
        assert [(f"{batch.sources[s]}:{d}", a, b, o) for _, s, d, a, b, o in rows.tolist()] == \
            [(g.address, g.start, g.stop, g.offset) for g in batch.segments(i)]
        for _, _, d, a, b, o in rows.tolist():  # and the tokens there are the document's (its EOS after it)
            expected = (docs[d] + [EOS])[a:b]
            assert batch.tokens[i, o:o + b - a].tolist() == expected[:len(batch.tokens[i, o:o + b - a])]


def test_token_ids_past_the_adapters_integer_type_are_refused(tmp_path):
    catalog = Catalog(str(tmp_path / "cat"))
    fields = [Field("tokens", pa.list_(pa.uint32()), "tokens")]
    catalog.write_version("wide", [{"tokens": [5, 2**31 + 7, 9] * 30}], fields)
    spec = RunSpec.create(catalog, "wide", seed=1, batch_size=1, world_size=1,
                          sequences=SequenceSpec(length=16, labels=True))
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        batch = loader.batch_at(0)
    assert int(batch.model_arrays()["input_ids"].max()) == 2**31 + 7  # int64 holds it
    with pytest.raises(UserError, match=r"token id 2147483655 in step 0 does not fit int32"):
        batch.model_arrays(np.int32)


def test_a_token_id_past_the_type_refuses_only_the_batch_that_holds_it(tmp_path):
    """Batches read together make their arrays once, but the refusal is each batch's own: the steps of the
    run before and after the one holding the wide id hand over their arrays."""
    catalog = Catalog(str(tmp_path / "cat"))
    fields = [Field("tokens", pa.list_(pa.uint32()), "tokens")]
    docs = [[5, 9] * 8 for _ in range(12)]
    docs[6][3] = 2**31 + 7  # in the 7th sequence of 16 tokens (12 documents of 16 with EOS 0: 17 each)
    catalog.write_version("wide", [{"tokens": d} for d in docs], fields)
    spec = RunSpec.create(catalog, "wide", seed=1, batch_size=1, world_size=1, shuffle="none",
                          sequences=SequenceSpec(length=16, eos=0))
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        batches = loader.batches_at(range(spec.epoch_length))
    assert len({id(b.rows) for b in batches}) == 1
    wide = [b.step for b in batches if int(b.tokens.max()) > 2**31]
    assert len(wide) == 1 and 0 < wide[0] < len(batches) - 1
    for b in batches:
        if b.step in wide:
            with pytest.raises(UserError, match=rf"token id 2147483655 in step {b.step} does not fit int32"):
                b.model_arrays(np.int32)
        else:
            np.testing.assert_array_equal(b.model_arrays(np.int32)["input_ids"], b.tokens.astype(np.int32))


@pytest.mark.parametrize("packing", ["best_fit", "pad"])
def test_best_fit_and_pad_batches_hold_every_document_once_with_the_padding_masked(corpus, tmp_path, packing):
    from dsinspect.loaders.audit.packed_replay import replay_packed

    catalog, docs, _ = corpus
    seq = SequenceSpec(length=64, labels=True, eos=EOS, packing=packing, pad=7, shuffle_documents=True)
    spec = spec_of(catalog, sequences=seq, last_batch="drop", batch_size=2)
    run = PackedRun(spec, lambda k, shard: np.array([len(d) for d in docs[shard * 25:(shard + 1) * 25]]))
    held: dict[int, list[tuple[int, int]]] = {}
    record = str(tmp_path / "run")
    for rank in range(2):
        with PackedLoader(spec, rank, catalog, cache=ShardCache(tmp_path / "cache"), record_dir=record,
                          record_samples=True) as loader:
            for batch in loader:  # the first epoch
                expected = run.batch(batch.step, rank)
                for i, s in enumerate(expected):
                    want = assemble(s.segments, lambda d: np.asarray(docs[d], np.int64), EOS, width=65, pad=7)
                    np.testing.assert_array_equal(batch.tokens[i], want)
                    n = int(s.segments.sizes.sum())
                    assert batch.held[i] == n <= 65
                    assert packing == "best_fit" or len(s.segments) == 1  # pad: one piece of one document
                    assert batch.loss_mask[i].tolist() == [True] * n + [False] * (65 - n)
                    assert (batch.segment_ids[i, n:] == 0).all() and (batch.segment_ids[i, :n] > 0).all()
                    for d, a, b in zip(s.segments.docs.tolist(), s.segments.starts.tolist(), s.segments.stops.tolist()):
                        held.setdefault(d, []).append((a, b))
                arrays = batch.model_arrays()
                np.testing.assert_array_equal(arrays["loss_mask"], batch.loss_mask[:, 1:])  # masks the labels
                assert batch.cu_seqlens[-1] == 2 * 65 and (np.diff(batch.cu_seqlens) > 0).all()
                if batch.step == 3:
                    replayed = replay_packed(spec, 3, rank, catalog).batches[0]
                    np.testing.assert_array_equal(replayed.tokens, batch.tokens)
                    assert replayed.fingerprint == batch.fingerprint
            state = loader.state_dict()
    # the epoch's sequences over both ranks (the last partial global batch dropped) hold each document's
    # tokens and EOS once, in pieces; those not read sit in the dropped sequences
    dropped = {int(d) for j in epoch_order(spec, 0)[spec.epoch_length // 4 * 4:].tolist()
               for d in run.plans[0].segments(0, j).docs}
    for d, doc in enumerate(docs):
        pieces = sorted(held.get(d, []))
        if d in dropped:
            continue
        assert sum(b - a for a, b in pieces) == len(doc) + 1, d
    assert LoaderState.from_json(state).step == spec.epoch_length // 4
    result = check_log(record, record, catalog=Catalog(catalog.url))
    assert result.ok and result.checked == 2 * (spec.epoch_length // 4), result.to_json()


def test_replay_of_a_best_fit_run_shows_each_sequences_padding(corpus, tmp_path, cli):
    catalog, docs, _ = corpus
    seq = SequenceSpec(length=64, labels=True, eos=EOS, packing="best_fit", pad=7)
    spec = spec_of(catalog, sequences=seq)
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    run = PackedRun(spec, lambda k, shard: np.array([len(d) for d in docs[shard * 25:(shard + 1) * 25]]))
    step = next(t for t in range(spec.epoch_length // 6) if any(s.segments.sizes.sum() < 65 for s in run.batch(t, 0)))
    code, out, err = cli("replay", "--spec", path, "--step", step, "--json", "--catalog", catalog.url)
    assert code == 0, err
    entries = json.loads(out)["batches"][0]["sequences"]
    assert [e["held"] for e in entries] == [int(s.segments.sizes.sum()) for s in run.batch(step, 0)]
    assert all(e["tokens"][e["held"]:] == [7] * (65 - e["held"]) for e in entries)
    code, out, err = cli("replay", "--spec", path, "--step", step, "--catalog", catalog.url)
    assert code == 0 and "best_fit" in out and "(+1 for labels)" in out
    short = [e for e in entries if e["held"] < 65]
    assert short and f"‹pad ×{65 - short[0]['held']}›" in out


def test_packed_torch_loader_reads_each_passs_first_batch_here_and_the_rest_in_its_workers(corpus, tmp_path,
                                                                                           monkeypatch):
    """With workers, a pass's first batch is one read in this process (it waits neither for workers to
    start nor for several of them reading cold at once); every later step comes from a worker."""
    pytest.importorskip("torch")
    import os

    from dsinspect.loaders.pytorch import PackedTorchLoader
    catalog, _, _ = corpus
    log = tmp_path / "reads"
    alone, together = PackedLoader.batch_at, PackedLoader.batches_at

    def batch_at(self, step):
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {step}\n")
        return alone(self, step)

    def batches_at(self, steps, **kw):
        with open(log, "a") as f:
            f.write("".join(f"{os.getpid()} {s}\n" for s in steps))
        return together(self, steps, **kw)

    monkeypatch.setattr(PackedLoader, "batch_at", batch_at)  # forked workers inherit the patch
    monkeypatch.setattr(PackedLoader, "batches_at", batches_at)
    spec = spec_of(catalog, world_size=1)
    with PackedTorchLoader(spec, catalog, num_workers=2) as loader:
        loader.load_state_dict(LoaderState.at(spec, 5, 0).to_json())
        steps = [b["step"] for b in loader]
    reads = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert steps == list(range(5, -(-spec.epoch_length // 3)))  # last_batch="pad": the partial batch too
    assert reads[0] == (os.getpid(), 5)  # before any worker read anything
    later = {pid for pid, step in reads[1:]}
    assert os.getpid() not in later and len(later) == 2 and sorted(s for _, s in reads[1:]) == steps[1:]


def test_replay_shows_a_documents_terminal_escapes_as_text(tmp_path):
    """A document holding ESC sequences, decoded by its stored tokenizer, reaches the terminal as \\x1b
    text (a real process writing to a pipe: what a terminal would get)."""
    import subprocess
    import sys

    from dsinspect.demo.tokenizer import load_tokenizer, tokenizer_bytes
    catalog = Catalog(str(tmp_path / "cat"))
    blob = catalog.put_blob("esc", tokenizer_bytes(), ".json")
    tokens = Field("tokens", pa.list_(pa.int32()), "tokens", options={"tokenizer": {"kind": "huggingface",
                                                                                   "blob": blob}})
    tok = load_tokenizer()
    texts = ["plain words first", "\x1b[2J\x1b]0;owned\x07 cleared", "and some words after it"]
    catalog.write_version("esc", [{"tokens": tok.encode(t).ids} for t in texts], [tokens])
    spec = RunSpec.create(catalog, "esc", batch_size=1, shuffle="none", sequences=SequenceSpec(length=8, eos=0))
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    shown = ""
    for step in range(spec.epoch_length):
        done = subprocess.run([sys.executable, "-m", "dsinspect", "replay", "--spec", str(path), "--step", str(step),
                               "--catalog", catalog.url], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout
        shown += done.stdout
    assert "\\x1b" in shown


def test_batches_read_together_share_their_rows_and_equal_each_batch_read_alone(corpus, tmp_path):
    """A run of steps read together holds one set of rows (tokens, segments, digests) and makes what a model
    takes once for all of them: each batch's arrays are its slice, equal to the same batch read alone, and
    the run crosses a DataLoader worker's pipe as one pickle of those rows (not one per batch)."""
    import pickle

    catalog, _, _ = corpus
    seq = SequenceSpec(length=64, labels=True, eos=EOS, packing="best_fit", pad=7, shuffle_documents=True)
    spec = spec_of(catalog, sequences=seq, world_size=1, batch_size=4)
    steps = list(range(-(-spec.epoch_length // 4) - 6, -(-spec.epoch_length // 4)))  # through the padded tail
    with PackedLoader(spec, 0, catalog, cache=ShardCache(tmp_path / "cache")) as loader:
        together = loader.batches_at(steps)
        alone = [loader.batch_at(s) for s in steps]
    assert len({id(b.rows) for b in together}) == 1 and len({id(b.rows) for b in alone}) == len(steps)
    assert any(b.padding.any() for b in together) and any((b.held < 65).any() for b in together)
    for a, b in zip(together, alone):
        assert (a.step, a.epoch, len(a), a.fingerprint) == (b.step, b.epoch, len(b), b.fingerprint)
        for name in ("tokens", "digests", "held", "padding", "position_ids", "segment_ids", "loss_mask",
                     "cu_seqlens", "document_segments"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        ma, mb = a.model_arrays(np.int32), b.model_arrays(np.int32)
        assert all(np.array_equal(ma[k], mb[k]) and ma[k].dtype == mb[k].dtype for k in ma)
        assert [a.segments(i) for i in range(len(a))] == [b.segments(i) for i in range(len(b))]
    sent = pickle.loads(pickle.dumps(together))
    assert len({id(b.rows) for b in sent}) == 1
    assert len(pickle.dumps(together)) < 2 * len(pickle.dumps(together[0].rows))
    np.testing.assert_array_equal(sent[3].position_ids, alone[3].position_ids)

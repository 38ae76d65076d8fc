"""Token views: exact bytes and byte offsets per piece (honest about split multibyte characters),
special and unknown ids, padding statistics, and OpenAI encodings offline through tiktoken."""

import json

import numpy as np
import pytest

from dsinspect.defaults import BUNDLED
from dsinspect.demo.tokenizer import load_tokenizer, tokenizer_bytes
from dsinspect.inspect import Severity, encode_text, huggingface_vocab, tiktoken_encoding, tiktoken_vocab, tokens_view
from dsinspect.inspect.vocab import byte_level_decode
from dsinspect.loaders.format.tokenizer_docs import bundled_encoding
from dsinspect.loaders.store.catalog import Catalog


@pytest.fixture(scope="module")
def vocab():
    return huggingface_vocab(tokenizer_bytes(), "demo")


@pytest.fixture(scope="module")
def cl100k():
    return tiktoken_vocab("cl100k_base")


def test_vocab_matches_the_tokenizer(vocab):
    tok = load_tokenizer()
    assert vocab.size == tok.get_vocab_size() == 2048
    assert vocab.special == {0, 1, 2, 3} and vocab.pad_id == 1
    whole = 0
    for tid in range(4, vocab.size):
        decoded = tok.decode([tid])
        if "\ufffd" not in decoded:  # pieces that are whole characters decode alike
            assert vocab.piece(tid) == decoded.encode("utf-8"), tid
            whole += 1
    assert whole > 1500
    assert vocab.piece(2048) is None and vocab.piece(-1) is None


def test_pieces_carry_byte_offsets_that_rebuild_the_text(vocab):
    text = "Zażółć 日本語 ✏️ and a long word: Donaudampfschifffahrt"
    view = encode_text(text, vocab)
    assert view.text == text and view.stats.decoded_bytes == len(text.encode())
    pieces = view.page().pieces
    data = text.encode()
    assert pieces[0].start == 0 and pieces[-1].end == len(data)
    for a, b in zip(pieces, pieces[1:]):
        assert a.end == b.start
    for p in pieces:
        assert data[p.start:p.end] == p.data


def test_a_split_multibyte_character_is_shown_as_bytes_not_repeated(vocab):
    view = encode_text("ロボット", vocab)  # 12 bytes; the small demo vocab splits these characters
    pieces = view.page().pieces
    partial = [p for p in pieces if p.partial]
    assert partial, "expected the demo tokenizer to split a katakana character"
    spans = [(p.start, p.end) for p in pieces]
    assert len(set(spans)) == len(spans)  # no span is repeated, unlike character offsets
    first = pieces[0]
    assert (first.start, first.end) == (0, len(first.data)) and first.data == "ロ".encode()[:len(first.data)]
    assert "\\x" in partial[0].display and "ロ" not in partial[0].display
    # the tokenizers library itself reports character offsets, repeating one span for both halves
    enc = load_tokenizer().encode("ロボット", add_special_tokens=False)
    assert len(set(enc.offsets)) < len(enc.offsets)


def test_special_unknown_and_padding(vocab):
    ids = [1, 1, 36, 1181, 0, 5000, -7, 1, 1, 1]
    view = tokens_view(ids, vocab)
    s = view.stats
    assert (s.length, s.special, s.unknown, s.pad_total, s.pad_left, s.pad_right) == (10, 6, 2, 5, 2, 3)
    pieces = view.page().pieces
    assert [p.position for p in pieces if p.unknown] == [5, 6]
    assert pieces[4].special and pieces[4].display == "<|endoftext|>"
    unknown = [f for f in view.findings if f.code == "token-unknown-id"]
    assert unknown and unknown[0].severity is Severity.ERROR and unknown[0].at == {"position": 5, "id": 5000}
    assert pieces[5].start == pieces[5].end == pieces[4].end  # an unknown id adds no bytes


def test_null_ids_and_huge_ids_never_raise(vocab):
    view = tokens_view([None, 2 ** 70, 36], vocab)
    assert {f.code for f in view.findings} >= {"token-null", "token-unknown-id"}
    assert view.ids == [None, 2 ** 70, 36] and view.text == "A"
    assert [p.id for p in view.page().pieces] == [None, 2 ** 70, 36]


def test_invalid_utf8_from_a_cut_sequence(vocab):
    ids = encode_text("ロボ", vocab).ids[:-1]  # drop the last piece: the bytes end mid-character
    view = tokens_view(ids, vocab)
    assert "token-invalid-utf8" in {f.code for f in view.findings}
    assert view.text.endswith("\ufffd")


def test_paging(vocab):
    ids = encode_text("hello world " * 200, vocab).ids
    view = tokens_view(ids, vocab, page_size=64)
    assert view.pages == -(-len(ids) // 64)
    last = view.page(-1)
    assert last.page == view.pages - 1 and last.pieces[-1].position == len(ids) - 1
    assert view.page(999).page == view.pages - 1
    assert view.page(1).pieces[0].start == int(view.ends[63])
    data = view.to_json()
    assert len(data["first_page"]["pieces"]) == 64 and data["pages"] == view.pages
    json.dumps(data, allow_nan=False)


def test_no_tokenizer_shows_ids_only():
    view = tokens_view([5, 6], None)
    assert view.tokenizer is None and view.text == "" and [p.id for p in view.page().pieces] == [5, 6]


def test_byte_level_alphabet():
    assert byte_level_decode("Ġhello") == b" hello"
    assert byte_level_decode("Ċ") == b"\n"
    from tokenizers import pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    assert sorted(b"".join(byte_level_decode(c) for c in alphabet)) == list(range(256))


def test_openai_encodings_offline_match_known_ids(cl100k):
    assert cl100k.encode("hello world") == [15339, 1917]
    assert tiktoken_encoding("o200k_base").encode("hello world") == [24912, 2375]
    view = encode_text("héllo 日本語 <|endoftext|>", cl100k)
    assert view.text == "héllo 日本語 <|endoftext|>"
    assert view.page().pieces[-1].special and view.stats.special == 1
    assert any(p.partial for p in view.page().pieces)  # cl100k splits 語 over two tokens
    assert tokens_view([100256, 100261], cl100k).stats.unknown == 2  # holes in the id space


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # bpe-openai's own loader uses a deprecated API
def test_bundled_tables_agree_with_the_package():
    from bpe_openai import registry

    for name in ("cl100k_base", "o200k_base"):
        ours, theirs = bundled_encoding(name), getattr(registry, name)()
        assert ours["pat_str"] == theirs["pat_str"] and ours["special_tokens"] == theirs["special_tokens"]
        assert len(ours["mergeable_ranks"]) == len(theirs["mergeable_ranks"])


def test_stored_ids_can_be_read_with_another_encoding():
    from dsinspect.inspect import open_address

    sample = open_address(Catalog(str(BUNDLED)), "demo-text@v1:0")
    stored = sample.view("tokens")
    other = sample.view("tokens", tokenizer="cl100k_base")
    assert other.tokenizer == "cl100k_base" and stored.tokenizer.startswith("tokenizer.json")
    assert other.ids == stored.ids and other.text != stored.text
    assert np.all(stored.ends[1:] >= stored.ends[:-1])

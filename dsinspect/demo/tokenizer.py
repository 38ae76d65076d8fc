"""Byte-level BPE tokenizer for the demo catalog, trained offline on the bundled corpus.

Run ``python -m dsinspect.demo.tokenizer`` once to (re)create the shipped ``data/tokenizer.json``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|user|>", "<|assistant|>"]

DATA_DIR = Path(__file__).resolve().parent / "data"
CORPUS_PATH = DATA_DIR / "corpus.txt"
TOKENIZER_PATH = DATA_DIR / "tokenizer.json"


def corpus_text() -> str:
    """Return the bundled corpus as one string (UTF-8, newline-normalised)."""
    return CORPUS_PATH.read_text(encoding="utf-8").replace("\r\n", "\n")


def documents() -> list[str]:
    """Split the corpus into documents (separated by blank lines), in file order."""
    parts = corpus_text().split("\n\n")
    return [p.strip("\n") for p in parts if p.strip()]


def train_tokenizer(corpus: str, vocab_size: int = 2048) -> Tokenizer:
    """Train a byte-level BPE on ``corpus`` in memory (one document per training item)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    docs = [p for p in corpus.replace("\r\n", "\n").split("\n\n") if p.strip()]
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


@lru_cache(maxsize=1)
def tokenizer_bytes() -> bytes:
    """Return the shipped tokenizer.json bytes (what a catalog would store verbatim)."""
    return TOKENIZER_PATH.read_bytes()


def load_tokenizer() -> Tokenizer:
    """Load the shipped tokenizer (a fresh object each call, so callers may configure it)."""
    return Tokenizer.from_str(tokenizer_bytes().decode("utf-8"))


def special_id(token: str) -> int:
    """Return the id of a special token in the shipped tokenizer."""
    tid = load_tokenizer().token_to_id(token)
    if tid is None:
        raise KeyError(token)
    return tid


def main() -> None:
    """Train on corpus.txt and write data/tokenizer.json."""
    tok = train_tokenizer(corpus_text())
    tok.save(str(TOKENIZER_PATH), pretty=True)
    print(f"wrote {TOKENIZER_PATH} (vocab {tok.get_vocab_size()})")


if __name__ == "__main__":
    main()

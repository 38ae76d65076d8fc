"""Rollout versions of odd shapes for the rollout-view tests (model, CLI, TUI): a table written to a catalog
as an ordinary version, its token columns decoded by the demo tokenizer (a plain module, not a conftest)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dsinspect.demo.tokenizer import load_tokenizer, tokenizer_bytes
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog

EOS, PAD, USER, ASSISTANT = 0, 1, 2, 3
JSON_COLUMNS = ("turns", "rewards", "messages")


def encode(text: str) -> list[int]:
    return load_tokenizer().encode(text).ids


MARKUP_PIECES = ("[bold red]", "x", "[/]", "<|endoftext|>")


def markup_tokenizer() -> bytes:
    """A word-level tokenizer.json whose tokens are markup: id 0 is "[bold red]", 1 "x", 2 "[/]", 3 an EOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({p: i for i, p in enumerate(MARKUP_PIECES)} | {"[UNK]": 4}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="removed")
    return tok.to_str().encode("utf-8")


def write_rollouts(catalog: Catalog, name: str, table: pa.Table, key: str | None = "rollout_id",
                   checks: dict | None = None, tokenizer: bool | bytes = True) -> Any:
    """`table` as a version of `name`: int lists are tokens (decoded by the demo tokenizer, or the
    tokenizer.json bytes given), number lists arrays, `turns`/`rewards` JSON text, other strings text,
    the rest scalars; meanings inferred by name."""
    data = tokenizer if isinstance(tokenizer, bytes) else tokenizer_bytes()
    blob = {"kind": "huggingface", "blob": catalog.put_blob(name, data, ".json")} if tokenizer else None
    fields = []
    for f in table.schema:
        t = f.type
        options: dict[str, Any] = {}
        if pa.types.is_list(t) and pa.types.is_integer(t.value_type) and "mask" not in f.name:
            role = "tokens"
            if blob:
                options["tokenizer"] = blob
            if checks and f.name in ("response_tokens", "responses", "completion_ids"):
                options["checks"] = checks
        elif pa.types.is_list(t):
            role = "array"
        elif pa.types.is_string(t):
            role = "json" if f.name in JSON_COLUMNS else "text"
        else:
            role = "scalar"
        fields.append(Field(f.name, t, role, options=options))
    return catalog.write_version(name, table.to_pylist(), fields, key=key)


def ints(rows: list[list[int]]) -> pa.Array:
    return pa.array(rows, pa.list_(pa.int32()))


def floats(rows: list[list[float]]) -> pa.Array:
    return pa.array(rows, pa.list_(pa.float32()))

"""A rollout table as flat numpy arrays on one axis, the response tokens, so each finding is a vectorised
comparison and never a Python loop over rows.

Lists are read from their Arrow buffers (offsets, items, validity bits): no `to_numpy`/`to_pylist`
(pyarrow's `to_numpy` imports pandas). Every per-token column (log-probs, loss mask, per-token
advantage) is laid on the response axis whichever layout it was stored in: one entry per response token,
per prompt+response token, or per prompt+response token shifted by one (OpenRLHF's masks and log-probs
over `sequences[1:]`); the layout is told by the lengths.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from dsinspect.arrays import ranges
from dsinspect.inspect.rollouts import Meaning, RolloutColumns
from dsinspect.loaders.format.token_counts import list_parts

__all__ = ["Layout", "TokenLists", "Aligned", "RolloutArrays", "token_lists", "scalars", "categories", "gather",
           "rows_and_positions", "split_sequences", "segment_reduce", "choose_layout", "primitive", "validity"]


class Layout(str, enum.Enum):
    RESPONSE = "response"      # one entry per response token (verl, TRL)
    FULL = "full"              # one per prompt+response token
    SHIFTED = "shifted"        # one per prompt+response token but the first (OpenRLHF: sequences[1:])


@dataclass(frozen=True)
class TokenLists:
    """A list column: row i holds `items[starts[i]:starts[i] + lengths[i]]`; `valid[i]` False for a null."""

    starts: np.ndarray
    lengths: np.ndarray
    items: np.ndarray
    valid: np.ndarray


@dataclass(frozen=True)
class Aligned:
    """A per-token column on the response axis: `values[k]` belongs to response token k (flat), and counts
    only where `ok` (its row is valid and its length fits `layout`)."""

    values: np.ndarray
    ok: np.ndarray
    layout: Layout
    row_ok: np.ndarray
    mismatched: np.ndarray     # rows whose length fits none of the layouts the column could have


@dataclass
class RolloutArrays:
    """The response axis of a table (flat response tokens, each row's begin, length and effective length)
    and its per-token columns aligned on it, built on first use."""

    table: pa.Table
    columns: RolloutColumns
    pad_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    _cache: dict = field(default_factory=dict, repr=False)   # meaning -> Aligned; ("lists", meaning) -> TokenLists

    def __post_init__(self) -> None:
        self.n = self.table.num_rows
        response = self.columns.get(Meaning.RESPONSE_TOKENS)
        self.response = token_lists(self.table.column(response)) if response else None
        prompt = self.columns.get(Meaning.PROMPT_TOKENS)
        self.prompt = token_lists(self.table.column(prompt)) if prompt else None
        if self.response is None:
            return
        self.lengths = self.response.lengths
        self.begins = np.cumsum(self.lengths) - self.lengths
        self.tokens = gather(self.response.items, self.response.starts, self.lengths)
        self.effective, self.ends_with_eos = _effective_lengths(self.tokens, self.begins, self.lengths,
                                                                self.pad_id, self.eos_ids)

    @property
    def prompt_lengths(self) -> np.ndarray | None:
        return None if self.prompt is None else self.prompt.lengths

    @cached_property
    def in_response(self) -> np.ndarray:
        """Flat mask of the tokens before each row's trailing padding."""
        if np.array_equal(self.effective, self.lengths):
            return np.ones(len(self.tokens), bool)
        within = np.arange(len(self.tokens), dtype=np.int64) - np.repeat(self.begins, self.lengths)
        return within < np.repeat(self.effective, self.lengths)

    @cached_property
    def final_eos(self) -> np.ndarray:
        """Flat mask of each row's final EOS token (the last before its padding)."""
        flags = np.zeros(len(self.tokens), bool)
        ends = self.ends_with_eos
        flags[self.begins[ends] + self.effective[ends] - 1] = True
        return flags

    def lists(self, meaning: Meaning) -> TokenLists | None:
        """`meaning`'s list column as it is stored (None without one)."""
        key = ("lists", meaning)
        if key not in self._cache:
            name = self.columns.get(meaning)
            column = self.table.column(name) if name else None
            self._cache[key] = token_lists(column) if column is not None and _is_list(column.type) else None
        return self._cache[key]

    def aligned(self, meaning: Meaning) -> Aligned | None:
        """`meaning`'s per-token column on the response axis (None without that column or a response)."""
        if meaning not in self._cache:
            lists = self.lists(meaning)
            self._cache[meaning] = None if lists is None or self.response is None else self._align(lists)
        return self._cache[meaning]

    def _align(self, lists: TokenLists) -> Aligned:
        considered = lists.valid & self.response.valid
        layout, fits = choose_layout(lists.lengths, considered, self.prompt_lengths, self.lengths)
        row_ok = considered & fits
        shift = _shift(layout, self.prompt_lengths, self.n)
        starts = np.where(row_ok, lists.starts + shift, 0)
        total = len(self.tokens)
        if row_ok.all():
            values, ok = gather(lists.items, starts, self.lengths), np.ones(total, bool)
        elif len(lists.items) == 0:
            values, ok = np.full(total, np.nan), np.zeros(total, bool)
        else:  # the rows that do not fit read from the start, clipped, and do not count
            take = np.minimum(ranges(starts, self.lengths), len(lists.items) - 1)
            values, ok = lists.items[take], np.repeat(row_ok, self.lengths)
        return Aligned(values, ok, layout, row_ok, considered & ~fits)


def choose_layout(lengths: np.ndarray, considered: np.ndarray, prompt: np.ndarray | None,
                  response: np.ndarray) -> tuple[Layout, np.ndarray]:
    """The layout that fits the most considered rows (ties: response, full, shifted), and which rows fit
    it. Without prompt lengths only the response layout can be told."""
    candidates = {Layout.RESPONSE: lengths == response}
    if prompt is not None:
        candidates[Layout.FULL] = lengths == prompt + response
        candidates[Layout.SHIFTED] = (lengths == prompt + response - 1) & (prompt >= 1)
    best = max(candidates, key=lambda k: (int(np.count_nonzero(candidates[k] & considered)),
                                          -list(Layout).index(k)))
    return best, candidates[best]


def _shift(layout: Layout, prompt: np.ndarray | None, n: int) -> np.ndarray:
    if layout is Layout.RESPONSE:
        return np.zeros(n, np.int64)
    return prompt if layout is Layout.FULL else prompt - 1


def _effective_lengths(tokens: np.ndarray, begins: np.ndarray, lengths: np.ndarray, pad_id: int | None,
                       eos_ids: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each response's length without its trailing padding, and whether its last token is an EOS.
    When the pad id is itself an EOS (many tokenizers pad with EOS), the first trailing pad is the EOS."""
    effective = lengths.copy()
    if pad_id is not None and len(tokens):
        nonempty = np.flatnonzero(lengths > 0)
        padded = nonempty[tokens[begins[nonempty] + lengths[nonempty] - 1] == pad_id]  # only these can shrink
        sizes = lengths[padded]
        sub = gather(tokens, begins[padded], sizes)
        within = np.arange(len(sub), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        last = np.where(sub != pad_id, within + 1, 0)
        effective[padded] = segment_reduce(np.maximum, last, np.cumsum(sizes) - sizes, sizes, 0)
        if pad_id in eos_ids:
            effective = np.where(effective < lengths, effective + 1, effective)
    ends = np.zeros(len(lengths), bool)
    nonempty = effective > 0
    if eos_ids and len(tokens):
        ends[nonempty] = np.isin(tokens[begins[nonempty] + effective[nonempty] - 1], eos_ids)
    return effective, ends


def gather(items: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """`items[starts[i]:starts[i] + lengths[i]]` end to end: a view when the rows lie end to end already
    (a list column's own layout), else one gather."""
    if len(starts) == 0:
        return items[:0]
    if np.array_equal(starts[1:], starts[:-1] + lengths[:-1]):
        return items[starts[0]:starts[0] + int(lengths.sum())]
    return items[ranges(starts, lengths)]


def segment_reduce(ufunc: np.ufunc, values: np.ndarray, begins: np.ndarray, lengths: np.ndarray,
                   empty: float) -> np.ndarray:
    """`ufunc.reduce` over each row's segment of `values` (`empty` for a row of none)."""
    out = np.full(len(lengths), empty, dtype=np.result_type(values.dtype, type(empty)))
    nonempty = lengths > 0
    if nonempty.any():
        out[nonempty] = ufunc.reduceat(values, begins[nonempty])
    return out


def rows_and_positions(hits: np.ndarray, begins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat response-token indices (sorted) as (row, position in the row): found by bisection, so no
    per-token row array is ever made."""
    rows = np.searchsorted(begins, hits, side="right") - 1
    # an empty row shares its begin with the next: searchsorted(side=right) already skipped it
    return rows, hits - begins[rows]


def token_lists(column: pa.ChunkedArray | pa.Array) -> TokenLists:
    """A list column's offsets, items and validity as numpy. Items that are null become NaN in a float
    list (a null log-prob is no number); bool items become 0/1."""
    array = _one_array(column)
    if pa.types.is_fixed_size_list(array.type):
        array = array.cast(pa.list_(array.type.value_type))
    starts, lengths = list_parts(array)
    child = array.values
    items, item_valid = primitive(child)
    if not item_valid.all() and items.dtype.kind == "f":
        items = np.where(item_valid, items, np.nan)
    return TokenLists(starts, lengths, items, validity(array))


def scalars(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A numeric column as float64 values and validity; a list column (verl's per-token scores) as the
    sum of each row's items."""
    array = _one_array(column)
    if _is_list(array.type):
        lists = token_lists(array)
        flat = lists.items[ranges(lists.starts, lists.lengths)].astype(np.float64)
        begins = np.cumsum(lists.lengths) - lists.lengths
        return segment_reduce(np.add, flat, begins, lists.lengths, 0.0), lists.valid
    values, valid = primitive(array)
    return values.astype(np.float64), valid


def categories(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """Each row's category code (int64, -1 for null) and the distinct values, in first-seen order."""
    import pyarrow.compute as pc  # ~100 ms of import, paid by the checks that compare categories

    array = _one_array(column)
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    codes, valid = primitive(array.indices)
    return np.where(valid, codes.astype(np.int64), -1), array.dictionary.to_pylist()


def primitive(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A fixed-width array's values (a zero-copy view but for bools, unpacked) and validity."""
    n, at = len(array), array.offset
    valid = validity(array)
    if pa.types.is_null(array.type) or array.buffers()[1] is None:
        return np.zeros(n, np.float64), valid
    if pa.types.is_boolean(array.type):
        bits = np.unpackbits(np.frombuffer(array.buffers()[1], np.uint8), bitorder="little")
        return bits[at:at + n].astype(np.uint8), valid
    dtype = np.dtype(array.type.to_pandas_dtype())  # a numpy type: no pandas import
    return np.frombuffer(array.buffers()[1], dtype)[at:at + n], valid


def validity(array: pa.Array) -> np.ndarray:
    """True for each row that is not null."""
    n, at = len(array), array.offset
    if array.null_count == 0:
        return np.ones(n, bool)
    if pa.types.is_null(array.type) or array.buffers()[0] is None:
        return np.zeros(n, bool)
    bits = np.unpackbits(np.frombuffer(array.buffers()[0], np.uint8), bitorder="little")
    return bits[at:at + n].astype(bool)


def split_sequences(table: pa.Table, sequences: str = "sequences", response_length: str = "response_length",
                    total_length: str | None = "total_length") -> pa.Table:
    """`table` with `prompt_tokens` and `response_tokens` cut from a prompt+response list (OpenRLHF keeps
    one `sequences` list per sample, the response its last `response_length` tokens before
    `total_length`, padding after). Vectorised: one gather of the items for each new column."""
    lists = token_lists(table.column(sequences))
    response, _ = scalars(table.column(response_length))
    total = lists.lengths.astype(np.float64)
    if total_length is not None and total_length in table.column_names:
        total, _ = scalars(table.column(total_length))
    end, resp = total.astype(np.int64), response.astype(np.int64)
    if np.any(resp > end) or np.any(end > lists.lengths):
        raise ValueError(f"{response_length} or {total_length} longer than {sequences} in some row")
    child = pa.array(lists.items)
    cut = lists.starts + end - resp
    prompt = _list_from(lists.starts, cut, child, lists.valid)
    answer = _list_from(cut, lists.starts + end, child, lists.valid)
    return table.append_column("prompt_tokens", prompt).append_column("response_tokens", answer)


def _list_from(begin: np.ndarray, end: np.ndarray, child: pa.Array, valid: np.ndarray) -> pa.Array:
    """Rows `child[begin[i]:end[i]]` as a list array: the segments are gathered where they are not
    contiguous, since Arrow offsets cannot skip items."""
    lengths = end - begin
    values = child.take(pa.array(ranges(begin, lengths)))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    mask = pa.array(~valid) if not valid.all() else None
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask)


def _one_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)

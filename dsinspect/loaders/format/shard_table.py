"""A manifest's shard entries as columns: what a 10^5-shard version costs to hold and to parse.

A `Shard` object per entry costs ~1 KB and microseconds each to build and check; at 10^5 shards
that is seconds and ~100 MB before a Loader reads a row. `ShardTable` keeps the same entries as
columns (hex digests in one string, counts in int64 arrays) and is a `Sequence[Shard]`: indexing
builds one `Shard` when asked. It also renders the entries as the manifest's pretty file and its
canonical JSON (docs/FORMAT.md) without a Python object per entry, and parses the pretty file's
`shards` array the same way (`from_pretty`), checked to be exactly what `json.dumps` would have
written for the values it read; anything else goes the slow, general way (`Manifest._parse`).
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Iterator, Sequence, overload

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dsinspect.errors import ManifestError
from dsinspect.loaders.format.shard_entry import Shard

__all__ = ["ShardTable", "PRETTY_START", "PRETTY_END"]

PRETTY_START = b'\n  "shards": [\n'  # how Manifest.to_file_bytes opens a non-empty shard list...
PRETTY_END = b"\n  ]\n}\n"            # ...and ends the file (`shards` sorts last)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]+")  # token field names the fast parse takes (no escapes, no spaces)
_INT64_MAX = (1 << 63) - 1


class ShardTable(Sequence):
    """Shard entries in columns; `table[i]` is the i-th entry as a `Shard`."""

    __slots__ = ("_sha", "_index", "_has_index", "rows", "bytes", "tokens", "_text")

    def __init__(self, sha: str, index: str, has_index: np.ndarray, rows: np.ndarray, nbytes: np.ndarray,
                 tokens: dict[str, np.ndarray]):
        """Columns already checked: `sha` and `index` 64 hex digits a shard (an absent index as 64
        zeros, marked False in `has_index`), counts as int64 arrays, `tokens` by field name."""
        self._sha, self._index, self._has_index = sha, index, has_index
        self.rows, self.bytes, self.tokens = rows, nbytes, dict(sorted(tokens.items()))  # as JSON sorts keys
        self._text: tuple[bytes, int, int] | None = None  # the file parsed and where the array is (`canonical`)

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def of(cls, shards: Iterable) -> "ShardTable":
        """The table of `Shard` objects (each checked when it was made)."""
        if isinstance(shards, ShardTable):
            return shards
        shards = list(shards)
        names = sorted({name for s in shards for name, _ in s.tokens})
        tokens = {}
        for name in names:
            counts = [s.token_count(name) for s in shards]
            if any(n is None for n in counts):
                raise ManifestError(f"the token count of {name!r} is on some shards and not on others")
            tokens[name] = _int64(counts, f"tokens of {name!r}")
        return cls("".join(s.sha256 for s in shards), "".join(s.index_sha256 or "0" * 64 for s in shards),
                   np.array([s.index_sha256 is not None for s in shards], bool),
                   _int64([s.rows for s in shards], "rows"), _int64([s.bytes for s in shards], "bytes"), tokens)

    @classmethod
    def from_pretty(cls, raw: bytes, start: int, end: int) -> "ShardTable | None":
        """The entries of a pretty manifest's `shards` array (`raw[start:end]`, between PRETTY_START
        and PRETTY_END, the last thing in the file), or None unless they are exactly what `pretty()`
        writes for the values read (so `json.loads` would have read the same values); None sends
        the caller the general way."""
        body = memoryview(raw)[start:end]
        text = np.frombuffer(body, np.uint8)
        first = re.match(rb"    \{\n.*?\n    \}", bytes(body[:4096]), re.S)
        try:
            entry = json.loads(first.group(0)) if first else None
        except ValueError:
            return None
        if not isinstance(entry, dict) or not isinstance(entry.get("tokens", {}), dict):
            return None
        names = sorted(entry.get("tokens", {}))
        if not all(_PLAIN_NAME.fullmatch(n) for n in names):
            return None
        with_index = "index_sha256" in entry
        values = _read_entries(text, _template_lines(names, with_index))
        if values is None:
            return None
        n = len(values["rows"])
        table = cls(values["sha256"], values["index_sha256"] if with_index else "0" * (64 * n),
                    np.full(n, with_index), values["rows"], values["bytes"], {name: values[name] for name in names})
        table._text = (raw, start, end)  # the canonical array: this text without its whitespace (`canonical`)
        return table

    # -- the Sequence --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int): ...
    @overload
    def __getitem__(self, i: slice) -> "ShardTable": ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            picked = range(len(self))[i]
            return ShardTable.of(self[k] for k in picked)
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"shard {i} of {n}")
        i = int(i) % n if i < 0 else int(i)
        return _shard(self.sha256(i), int(self.bytes[i]), int(self.rows[i]), self.index_sha256(i),
                      tuple((name, int(c[i])) for name, c in self.tokens.items()))

    def __iter__(self) -> Iterator:
        """Each entry as a `Shard` (~0.5 us each: callers that need one column read it, e.g. `rows`)."""
        index = [self.index_sha256(i) for i in range(len(self))]
        names = list(self.tokens)
        counts = zip(*(c.tolist() for c in self.tokens.values())) if names else iter(lambda: (), None)
        for sha, nbytes, rows, idx, tokens in zip(self.sha256s(), self.bytes.tolist(), self.rows.tolist(), index,
                                                  counts):
            yield _shard(sha, nbytes, rows, idx, tuple(zip(names, tokens)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ShardTable):
            return (self._sha == other._sha and self._index == other._index
                    and np.array_equal(self._has_index, other._has_index) and np.array_equal(self.rows, other.rows)
                    and np.array_equal(self.bytes, other.bytes) and self.tokens.keys() == other.tokens.keys()
                    and all(np.array_equal(c, other.tokens[k]) for k, c in self.tokens.items()))
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards, {int(self.rows.sum()) if len(self) else 0} rows)"

    # -- columns -------------------------------------------------------------------------------

    def sha256(self, i: int) -> str:
        return self._sha[64 * i:64 * i + 64]

    def index_sha256(self, i: int) -> str | None:
        return self._index[64 * i:64 * i + 64] if self._has_index[i] else None

    def sha256s(self) -> list[str]:
        return [self._sha[k:k + 64] for k in range(0, len(self._sha), 64)]

    def total(self, column: np.ndarray) -> int:
        """A column's sum as a Python int (exact past int64)."""
        if not len(column):
            return 0
        if int(column.max()) <= _INT64_MAX // len(column):
            return int(column.sum())
        return sum(column.tolist())

    # -- rendering -----------------------------------------------------------------------------

    def canonical(self) -> Iterator[bytes]:
        """The `shards` array as canonical JSON (sorted keys, no whitespace), UTF-8, in pieces. Read
        from a pretty file (`from_pretty`): its text without spaces and line breaks (no value or
        name holds one), a few MB at a time; else rendered from the columns."""
        if self._text is None:
            yield ("[" + ",".join(self._render(pretty=False)) + "]").encode("utf-8")
            return
        raw, start, end = self._text
        yield b"["
        for at in range(start, end, _CHUNK):
            yield raw[at:min(end, at + _CHUNK)].translate(None, b" \n")
        yield b"]"

    def forget_text(self) -> None:
        """Let go of the file read (the manifest's bytes) once the version id is computed."""
        self._text = None

    def pretty(self) -> str:
        """The `shards` array as `json.dumps(..., indent=2, sort_keys=True)` writes it inside a manifest."""
        if not len(self):
            return "[]"
        return "[\n" + ",\n".join(self._render(pretty=True)) + "\n  ]"

    def _render(self, pretty: bool) -> list[str]:
        """Each entry's JSON from one %-template (keys sorted as json.dumps sorts them)."""
        template = {has: _entry_template(list(self.tokens), has, pretty) for has in (True, False)}
        columns = [c.tolist() for c in self.tokens.values()]
        nbytes, rows, has_index = self.bytes.tolist(), self.rows.tolist(), self._has_index.tolist()
        sha, index = self._sha, self._index
        out = []
        for i in range(len(self)):
            counts = tuple(c[i] for c in columns)
            if has_index[i]:
                out.append(template[True] % (nbytes[i], index[64 * i:64 * i + 64], rows[i], sha[64 * i:64 * i + 64],
                                             *counts))
            else:
                out.append(template[False] % (nbytes[i], rows[i], sha[64 * i:64 * i + 64], *counts))
        return out


def _entry_template(names: list[str], with_index: bool, pretty: bool) -> str:
    """One entry as json.dumps writes it (pretty: indent=2, two levels in), values as % fields."""
    def obj(items: list[tuple[str, str]], depth: int) -> str:
        if not pretty:
            return "{" + ",".join(f"{key}:{value}" for key, value in items) + "}"
        pad, inner = "  " * depth, "  " * (depth + 1)
        return "{\n" + ",\n".join(f"{inner}{key}: {value}" for key, value in items) + f"\n{pad}}}"

    def key(name: str) -> str:
        return json.dumps(name, ensure_ascii=False).replace("%", "%%")

    items = [(key("bytes"), "%d")] + ([(key("index_sha256"), '"%s"')] if with_index else [])
    items += [(key("rows"), "%d"), (key("sha256"), '"%s"')]
    if names:
        items.append((key("tokens"), obj([(key(n), "%d") for n in names], 3)))
    return ("    " if pretty else "") + obj(items, 2)


def _template_lines(names: list[str], with_index: bool) -> list[tuple[bytes, str | None, bytes]]:
    """One pretty entry line by line: (text before the value, the value's name or None, text after)."""
    lines = [(b"    {", None, b""), (b'      "bytes": ', "bytes", b",")]
    if with_index:
        lines.append((b'      "index_sha256": "', "index_sha256", b'",'))
    lines += [(b'      "rows": ', "rows", b","), (b'      "sha256": "', "sha256", b'",' if names else b'"')]
    if names:
        lines.append((b'      "tokens": {', None, b""))
        lines += [(f'        "{n}": '.encode(), n, b"," if k + 1 < len(names) else b"") for k, n in enumerate(names)]
        lines.append((b"      }", None, b""))
    return lines + [(b"    }", None, b"")]  # entries are joined by ",\n"


def _read_entries(text: np.ndarray, lines: list[tuple[bytes, str | None, bytes]]) -> dict | None:
    """The values of a run of entries laid out line by line as `lines` say (a line: its literal
    start, a value, its literal end; entries joined by ",\\n"), every byte checked, with numpy;
    None when the text is laid out any other way."""
    per = len(lines)
    kind = np.int32 if len(text) < 2**31 else np.int64  # positions: half the memory below 2 GB
    breaks = [np.flatnonzero(text[at:at + _CHUNK] == 10).astype(kind) + kind(at) for at in range(0, len(text), _CHUNK)]
    count = sum(map(len, breaks))
    if (count + 1) % per:
        return None
    starts = np.empty(count + 1, kind)
    ends = np.empty(count + 1, kind)
    starts[0], ends[-1] = 0, len(text)
    if breaks:
        np.concatenate(breaks, out=ends[:-1])
    np.add(ends[:-1], 1, out=starts[1:])
    starts, ends = starts.reshape(-1, per), ends.reshape(-1, per)
    out: dict = {}
    for j, (before, name, after) in enumerate(lines):
        start, end = starts[:, j], ends[:, j]
        if j == per - 1:  # the line closing an entry: "    }," but for the last
            if not _literal(text, end[:-1] - 1, b","):
                return None
            end = np.concatenate([end[:-1] - 1, end[-1:]])
        first, last = start + len(before), end - len(after)
        if (last < first).any() or not _literal(text, start, before) or not _literal(text, last, after):
            return None
        if name is None:
            if (last != first).any():
                return None
            continue
        out[name] = _hex(text, first, last - first) if name.endswith("sha256") else _integers(text, first, last - first)
        if out[name] is None:
            return None
    return out


def _literal(text: np.ndarray, at: np.ndarray, literal: bytes) -> bool:
    """Whether `literal` stands at each of the positions `at` (each within the text)."""
    if not literal or not len(at):
        return True
    if at.min() < 0 or at.max() + len(literal) > len(text):
        return False
    return bool((sliding_window_view(text, len(literal))[at] == np.frombuffer(literal, np.uint8)).all())


def _hex(text: np.ndarray, at: np.ndarray, width: np.ndarray) -> str | None:
    """64 lowercase hex digits at each of `at`, concatenated; None unless every one is."""
    if (width != 64).any():
        return None
    digits = sliding_window_view(text, 64)[at]  # n x 64 bytes copied, no index array
    return digits.tobytes().decode("ascii") if _HEX_BYTES[digits].all() else None


def _integers(text: np.ndarray, at: np.ndarray, width: np.ndarray) -> np.ndarray | None:
    """JSON integers >= 0 of `width` digits at `at` (no leading zero, below 2^63), else None."""
    if (width < 1).any() or (width > 19).any() or (at + width).min() < 19:
        return None  # (every value follows a key: the 19 bytes before its end are in the text)
    digits = sliding_window_view(text, 19)[at + width - 19] - np.uint8(48)  # right-aligned; wraps below '0'
    inside = np.arange(19) >= 19 - width[:, None]
    if (digits[inside] > 9).any() or ((text[at] == 48) & (width > 1)).any():
        return None  # not a digit, or a leading zero
    digits[~inside] = 0
    value = digits.astype(np.uint64) @ _POW10  # < 10^19 < 2^64: no wrap
    if (value > np.uint64(_INT64_MAX)).any():
        return None
    return value.astype(np.int64)


_CHUNK = 1 << 22  # bytes searched for line breaks at a time (a mask of the whole text would be its size again)
_POW10 = np.array([10 ** k for k in range(18, -1, -1)], np.uint64)
_HEX_BYTES = np.zeros(256, bool)
_HEX_BYTES[np.frombuffer(b"0123456789abcdef", np.uint8)] = True


def _int64(values: Sequence, what: str) -> np.ndarray:
    """Integers as int64; ManifestError past int64 (no real shard has 2^63 rows or bytes)."""
    try:
        out = np.array([int(v) for v in values] if values and isinstance(values[0], str) else values, np.int64)
    except OverflowError:
        raise ManifestError(f"shard {what} beyond 2^63 - 1") from None
    return out.reshape(len(values))


def _shard(sha256: str, nbytes: int, rows: int, index: str | None, tokens: tuple):
    """A `Shard` from checked columns, without checking again (microseconds a shard otherwise)."""
    shard = object.__new__(Shard)
    shard.__dict__.update(sha256=sha256, bytes=nbytes, rows=rows, index_sha256=index, tokens=tokens)
    return shard

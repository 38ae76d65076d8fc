"""One stored sample: every field's raw bytes, canonical bytes and hash, the row hash recomputed and
compared with the stored one, and each field's decoded view, built only when asked for."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import pyarrow as pa

from dsinspect.errors import IntegrityError, NotFoundError, UserError
from dsinspect.inspect.floats import narrow
from dsinspect.inspect.hexdump import PAGE_SIZE, WIDTH, HexPage, hex_page
from dsinspect.inspect.images import image_view
from dsinspect.inspect.structured import array_view, bytes_view, json_view, scalar_view
from dsinspect.inspect.text import text_view
from dsinspect.inspect.tokens import tokens_view
from dsinspect.inspect.trajectory import trajectory_view
from dsinspect.inspect.video import video_view
from dsinspect.inspect.views import ErrorView, Finding, NullView, Severity, View, no_json, reason_of, safely
from dsinspect.inspect.vocab import TIKTOKEN_ENCODINGS, Vocab, tokenizer_vocab
from dsinspect.loaders.format.arrow_errors import NOT_CONVERTIBLE
from dsinspect.loaders.format.canonical import combine_row_hash, encode_column, field_hashes
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field
from dsinspect.loaders.format.roles import Role
from dsinspect.loaders.store.address import Address, parse_address
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["FieldInfo", "RowHashCheck", "Sample", "open_sample", "open_address", "TOKENIZER_CHOICES"]

TOKENIZER_CHOICES = ("stored", *TIKTOKEN_ENCODINGS)
_RETURN_NAMES = ("episode_return", "return", "ep_return", "total_reward")
_LENGTH_NAMES = ("length", "episode_length", "ep_length", "num_steps", "steps")


@dataclass(frozen=True)
class FieldInfo:
    """What is known of a field without decoding it. `size` counts `Sample.raw(name)`: the value's own
    bytes for binary and string fields, its canonical encoding for the rest (`raw_is_canonical`)."""

    name: str
    role: str
    type: str
    nullable: bool
    null: bool
    size: int
    raw_is_canonical: bool
    canonical_size: int
    hash: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RowHashCheck:
    stored: str | None
    recomputed: str

    @property
    def ok(self) -> bool:
        return self.stored == self.recomputed

    def to_json(self) -> dict[str, Any]:
        return {"stored": self.stored, "recomputed": self.recomputed, "ok": self.ok}


@dataclass
class Sample(View):
    kind: ClassVar[str] = "sample"
    dataset: str
    version_id: str
    index: int
    num_rows: int
    fields: list[FieldInfo]
    row_hash: RowHashCheck
    findings: list[Finding] = field(default_factory=list)
    version: DatasetVersion = no_json(default=None)
    table: pa.Table = no_json(default=None)
    _canonical: dict[str, bytes] = no_json(default_factory=dict)
    _views: dict[tuple, View] = no_json(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.dataset}@{self.version_id[:12]}:{self.index}"

    def field(self, name: str) -> FieldInfo:
        for info in self.fields:
            if info.name == name:
                return info
        raise NotFoundError(f"{self.dataset} has no field {name!r} (fields: {', '.join(f.name for f in self.fields)})")

    def raw(self, name: str) -> bytes:
        """The value's bytes: binary as stored, strings as UTF-8, anything else its canonical encoding."""
        info = self.field(name)
        if info.null:
            return b""
        if info.raw_is_canonical:
            return self._canonical[name]
        return _value_bytes(self.table.column(name))

    def canonical(self, name: str) -> bytes:
        self.field(name)
        return self._canonical[name]

    def hex(self, name: str, page: int = 0, page_size: int = PAGE_SIZE, canonical: bool = False,
            width: int = WIDTH) -> HexPage:
        return hex_page(self.canonical(name) if canonical else self.raw(name), page, page_size, width)

    def value(self, name: str) -> Any:
        """The value as Python data (strings that are not valid UTF-8 come back with U+FFFD)."""
        self.field(name)
        try:
            return self.table.column(name)[0].as_py()
        except NOT_CONVERTIBLE:  # not valid UTF-8, or a value Arrow cannot turn into Python
            return self.raw(name).decode("utf-8", "replace")

    def view(self, name: str, tokenizer: str | None = None) -> View:
        """The decoded view of one field, built on first request; never raises for broken data.
        `tokenizer` overrides a tokens field's stored tokenizer ("cl100k_base", "o200k_base")."""
        info = self.field(name)
        if tokenizer not in (None, *TOKENIZER_CHOICES):
            raise UserError(f"unknown tokenizer {tokenizer!r}: choose {', '.join(TOKENIZER_CHOICES)}")
        key = (name, tokenizer if info.role == Role.TOKENS.value else None)
        if key not in self._views:
            self._views[key] = self._decode(info, tokenizer)
        return self._views[key]

    def to_json(self, decode: bool = True, fields: Sequence[str] | None = None, raw: bool = False,
                page: int = 0, tokenizer: str | None = None) -> dict[str, Any]:
        """The sample for scripts: hashes always; decoded views unless `decode` is False; first-page
        hex dumps of the raw and canonical bytes with `raw`."""
        chosen = [self.field(n) for n in fields] if fields else self.fields
        out = {**super().to_json(), "address": self.address}
        out["fields"] = [self._field_json(info, decode, raw, page, tokenizer) for info in chosen]
        return out

    def _field_json(self, info: FieldInfo, decode: bool, raw: bool, page: int, tokenizer: str | None) -> dict:
        item: dict[str, Any] = info.to_json()
        if decode:
            item["view"] = self.view(info.name, tokenizer).to_json()
        if raw:
            item["raw_hex"] = self.hex(info.name, page).to_json()
            item["canonical_hex"] = self.hex(info.name, page, canonical=True).to_json()
        return item

    # -- decoding ------------------------------------------------------------------------------

    def _decode(self, info: FieldInfo, tokenizer: str | None) -> View:
        if info.null:
            return NullView(info.role)
        raw = self.raw(info.name)
        decoders: dict[str, Callable[[], View]] = {
            Role.TOKENS.value: lambda: self._tokens(info.name, tokenizer),
            Role.TEXT.value: lambda: text_view(raw),
            Role.IMAGE.value: lambda: image_view(raw),
            Role.VIDEO.value: lambda: video_view(raw),
            Role.TRAJECTORY.value: lambda: self._trajectory(info.name),
            Role.JSON.value: lambda: json_view(raw),
            Role.SCALAR.value: lambda: scalar_view(self._shown(info.name), info.type),
            Role.BYTES.value: lambda: bytes_view(raw),
            Role.ARRAY.value: lambda: array_view(self._shown(info.name)),
        }
        decode = decoders.get(info.role)
        if decode is None:
            return ErrorView(info.role, f"no viewer for role {info.role!r}", raw)
        return safely(info.role, raw, decode)

    def _shown(self, name: str) -> Any:
        """The value with float32/float16 numbers marked to show their own digits (floats.py)."""
        return narrow(self.value(name), self.table.column(name).type)

    def _tokens(self, name: str, override: str | None) -> View:
        vocab, note = self._vocab(self.version.manifest.field(name), override)
        return tokens_view(self.value(name), vocab, note=note)

    def _vocab(self, f: Field, override: str | None) -> tuple[Vocab | None, Finding | None]:
        spec = dict(f.options.get("tokenizer") or {})
        if override in TIKTOKEN_ENCODINGS:
            spec = {"kind": "tiktoken", "name": override}
        kind = spec.get("kind")
        if not spec:
            return None, Finding(Severity.WARNING, "token-no-tokenizer",
                                 f"field {f.name!r} names no tokenizer: ids only")
        try:
            vocab = tokenizer_vocab(self.version.catalog, self.dataset, spec)
        except Exception as e:  # noqa: BLE001 - a missing or broken tokenizer leaves the ids visible
            return None, Finding(Severity.ERROR, "token-tokenizer-unavailable",
                                 f"the {kind} tokenizer could not be loaded: {reason_of(e)}")
        if vocab is None:
            return None, Finding(Severity.WARNING, "token-tokenizer-kind", f"unknown tokenizer kind {kind!r}: ids only")
        return vocab, None

    def _trajectory(self, name: str) -> View:
        view = trajectory_view(self.value(name) or {})
        for names, label, actual in ((_RETURN_NAMES, "return", view.episode_return),
                                     (_LENGTH_NAMES, "length", view.length)):
            sibling = next((i for i in self.fields
                            if i.name in names and i.role == Role.SCALAR.value and not i.null), None)
            if sibling is None or actual is None:
                continue
            stored = self.value(sibling.name)
            if isinstance(stored, (int, float)) and not abs(stored - actual) <= 1e-4 * max(1.0, abs(actual)):
                view.findings.append(Finding(Severity.ERROR, f"trajectory-{label}-mismatch",
                                             f"field {sibling.name!r} says {stored} but the trajectory's {label} is "
                                             f"{actual:.6g}", {"field": sibling.name}))
        return view


# -- opening -------------------------------------------------------------------------------------

def open_address(catalog: Any, address: str | Address) -> Sample:
    """The sample an address `NAME[@REF]:INDEX` names."""
    addr = parse_address(address) if isinstance(address, str) else address
    if addr.index is None:
        raise UserError(f"address {str(address)!r} names no sample: add :INDEX, e.g. {addr.name}@{addr.ref}:0")
    return open_sample(catalog.resolve(addr), addr.index)


def open_sample(version: DatasetVersion, index: int) -> Sample:
    """Read one row (one row group read) and hash it; nothing is decoded yet."""
    index = version.check_index(index)
    try:
        table = version.row_table(index)  # verified: damage in transit is re-read away
    except IntegrityError:
        table = version.row_table(index, verify=False)  # damaged as stored: shown, and flagged below
    infos, canonical, named = [], {}, []
    for f in version.fields:
        col = table.column(f.name)
        canonical[f.name] = encode_column(col)[0]
        digest = field_hashes(col)[0]
        named.append((f.name, digest))
        infos.append(_info(f, col, canonical[f.name], digest))
    stored = table.column(HASH_COLUMN)[0].as_py() if HASH_COLUMN in table.column_names else None
    check = RowHashCheck(stored.hex() if stored else None, combine_row_hash(named).hex())
    return Sample(version.name, version.id, index, version.num_rows, infos, check, _row_findings(check),
                  version, table, canonical)


def _row_findings(check: RowHashCheck) -> list[Finding]:
    if check.stored is None:
        return [Finding(Severity.ERROR, "row-hash-missing", "the shard stores no row hash for this row")]
    if not check.ok:
        return [Finding(Severity.ERROR, "row-hash-mismatch", f"stored row hash {check.stored} does not match "
                        f"{check.recomputed} recomputed from the data: the row is not what was written")]
    return []


def _is_bytes_like(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t))


def _value_bytes(col: pa.ChunkedArray) -> bytes:
    """A binary or string value's bytes, without UTF-8 validation (zero-copy cast to binary)."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_fixed_size_binary(arr.type):
        return arr[0].as_py() or b""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    target = pa.large_binary() if large else pa.binary()
    return arr.view(target)[0].as_py() or b""


def _info(f: Field, col: pa.ChunkedArray, canonical: bytes, digest: bytes) -> FieldInfo:
    null = canonical[:1] == b"\x00"
    own_bytes = _is_bytes_like(f.type)
    size = 0 if null else (len(_value_bytes(col)) if own_bytes else len(canonical))
    return FieldInfo(f.name, f.role.value, str(f.type), f.nullable, null, size, not own_bytes,
                     len(canonical), digest.hex())

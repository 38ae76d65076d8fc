"""The run spec: everything that fixes which sample a rank sees at a step, as a small JSON file.

Its *order* part (sources, seed, shuffle, mixture) has its own hash, apart from world size and
batch size, so a loader state can move to another number of ranks or another batch size.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from dsinspect.errors import UserError
from dsinspect.loaders.format.manifest import canonical_json, sha256_hex
from dsinspect.loaders.format.pathnames import check_sha256
from dsinspect.loaders.format.token_counts import document_lengths
from dsinspect.loaders.order.packing import Packing, SequenceSpec, pad_bounds, pad_sequences, sequence_count
from dsinspect.loaders.store.address import check_name

if TYPE_CHECKING:
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["RunSpec", "Source", "Shuffle", "LastBatch", "Start", "SPEC_FORMAT"]

SPEC_FORMAT = "dsinspect.runspec/1"


class Shuffle(str, enum.Enum):
    NONE = "none"      # stored order
    GLOBAL = "global"  # a full permutation per epoch (random access: local or cached data)
    WINDOW = "window"  # shuffle shards, then samples within windows of k shards (bounded cache)
    SLIDING = "sliding"  # shards pass through a resident set of k; samples shuffled across it (bounded cache)


class LastBatch(str, enum.Enum):
    DROP = "drop"  # an epoch ends at its last full global batch; the (shuffled) tail waits a turn
    PAD = "pad"    # the last global batch is filled with repeats flagged as padding


@dataclass(frozen=True)
class Source:
    """One dataset version in the run, with its shard sizes (the order needs them, not the data):
    rows per shard, and for a run that packs documents into sequences, the packed field's tokens (and
    for `pad` packing the sequences each shard makes: the one count the manifest cannot give)."""

    name: str
    version: str
    shard_rows: tuple[int, ...]
    weight: float = 1.0
    shard_tokens: tuple[int, ...] | None = None
    shard_sequences: tuple[int, ...] | None = None

    @cached_property
    def rows(self) -> int:
        return sum(self.shard_rows)

    def to_json(self) -> dict:
        out = {"name": self.name, "version": self.version, "shard_rows": list(self.shard_rows), "weight": self.weight}
        if self.shard_tokens is not None:  # absent for row runs: their order hashes stay as they were
            out["shard_tokens"] = list(self.shard_tokens)
        if self.shard_sequences is not None:  # pad packing only
            out["shard_sequences"] = list(self.shard_sequences)
        return out


@dataclass(frozen=True)
class Start:
    """Where this spec's stretch of the run begins: a fresh run starts at (0, 0, 0); a resumed one
    (perhaps with another world size) at the step, epoch and in-epoch position it resumed from."""

    step: int = 0
    epoch: int = 0
    position: int = 0


@dataclass(frozen=True)
class RunSpec:
    sources: tuple[Source, ...]
    seed: int = 0
    batch_size: int = 1
    world_size: int = 1
    shuffle: Shuffle = Shuffle.GLOBAL
    window_shards: int = 4  # window: shards per window; sliding: shards resident at once
    last_batch: LastBatch = LastBatch.DROP
    epoch_size: int | None = None
    mixture_block: int = 1024
    start: Start = field(default_factory=Start)
    sequences: SequenceSpec | None = None  # None: one row is one sample; else packed sequences (docs/PRETRAINING.md)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shuffle", _enum(Shuffle, self.shuffle, "shuffle"))
        object.__setattr__(self, "last_batch", _enum(LastBatch, self.last_batch, "last_batch"))
        object.__setattr__(self, "sources", tuple(self.sources))
        _check(bool(self.sources), "a run needs at least one source")
        if self.sequences is not None:
            self._check_sequences()
        for k, s in enumerate(self.sources):
            _check(s.rows > 0, f"source {s.name}@{s.version[:12]} has no rows")
            if self.sequences is not None:
                _check(self.source_length(k) > 0, f"source {s.name}@{s.version[:12]} holds {sum(s.shard_tokens):,} "
                       f"tokens: not one sequence of {self.sequences.width:,}")
            _check(s.weight > 0 and s.weight != float("inf"),
                   f"source {s.name} has weight {s.weight}; weights must be positive and finite")
        for name in ("batch_size", "world_size", "window_shards", "mixture_block"):
            _check(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, f"{name} must be an integer >= 1")
        _check(isinstance(self.seed, int) and self.seed >= 0, "seed must be a non-negative integer")
        if self.epoch_size is not None:
            _check(len(self.sources) > 1, "epoch_size applies to mixtures; one source's epoch is its row count")
            _check(isinstance(self.epoch_size, int) and self.epoch_size >= 1, "epoch_size must be an integer >= 1")
        _check(self.mixture_block >= len(self.sources), "mixture_block must be at least the number of sources")
        if self.last_batch is LastBatch.DROP:
            _check(self.global_batch <= self.epoch_length,
                   f"a global batch of {self.global_batch} is larger than the epoch ({self.epoch_length} samples) "
                   "with last_batch=drop: nothing would be read (use pad or a smaller batch)")
        _check(min(self.start.step, self.start.epoch, self.start.position) >= 0
               and self.start.position < self.epoch_length, "start must lie inside an epoch")

    def _check_sequences(self) -> None:
        _check(isinstance(self.sequences, SequenceSpec), "sequences must be a SequenceSpec")
        _check(self.shuffle not in (Shuffle.WINDOW, Shuffle.SLIDING), "packed sequences shuffle globally or not at "
               f"all (shuffle={self.shuffle.value} keeps rows of a few shards together; sequences span shards)")
        for s in self.sources:
            _check(s.shard_tokens is not None and len(s.shard_tokens) == len(s.shard_rows)
                   and all(isinstance(n, int) and n >= 0 for n in s.shard_tokens),
                   f"source {s.name}@{s.version[:12]}: a run of packed sequences needs the tokens of each shard")
            if self.sequences.packing is not Packing.PAD:
                _check(s.shard_sequences is None, f"source {s.name}@{s.version[:12]}: shard_sequences are for pad "
                       f"packing, not {self.sequences.packing.value}")
                continue
            _check(s.shard_sequences is not None and len(s.shard_sequences) == len(s.shard_rows),
                   f"source {s.name}@{s.version[:12]}: pad packing needs the sequences of each shard")
            for i, (n, t, d) in enumerate(zip(s.shard_sequences, s.shard_tokens, s.shard_rows)):
                least, most = pad_bounds(t, d, self.sequences)
                _check(isinstance(n, int) and least <= n <= most,
                       f"source {s.name}@{s.version[:12]}: shard {i} cannot make {n!r} pad sequences of "
                       f"{self.sequences.width:,} tokens from {d:,} documents of {t:,} tokens ({least:,} to {most:,})")

    def require_rows(self, reader: str) -> None:
        """Refuse a packed-sequence spec where `reader` reads rows: it would read sequence indices as rows."""
        if self.sequences is not None:
            raise UserError(f"this run packs documents into sequences; {reader} reads rows (PackedLoader reads "
                            "packed batches: docs/PRETRAINING.md)")

    # -- derived sizes -------------------------------------------------------------------------

    def source_length(self, k: int) -> int:
        """Samples in one epoch of source k: its rows, or the sequences its documents pack into."""
        return self._source_lengths[k]

    @cached_property
    def _source_lengths(self) -> tuple[int, ...]:
        if self.sequences is None:
            return tuple(s.rows for s in self.sources)
        return tuple(sequence_count(s.shard_tokens, s.shard_rows, self.sequences, s.shard_sequences)
                     for s in self.sources)

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    @cached_property
    def epoch_length(self) -> int:
        """Positions per epoch: the rows of a single source; for a mixture epoch_size or all rows."""
        return self.epoch_size or sum(self.source_length(k) for k in range(len(self.sources)))

    @property
    def is_mixture(self) -> bool:
        return len(self.sources) > 1

    # -- serialisation -------------------------------------------------------------------------

    def order_json(self) -> dict[str, Any]:
        """The part that fixes the order of samples, whatever the world size and batch size."""
        out = {"sources": [s.to_json() for s in self.sources], "seed": self.seed, "shuffle": self.shuffle.value,
               "window_shards": self.window_shards, "epoch_size": self.epoch_size,
               "mixture_block": self.mixture_block}
        if self.sequences is not None:  # absent for row runs: their order hashes stay as they were
            out["sequences"] = self.sequences.to_json()
        return out

    @property
    def order_hash(self) -> str:
        return sha256_hex(canonical_json(self.order_json()))

    def to_json(self) -> dict[str, Any]:
        return {"format": SPEC_FORMAT, "order": self.order_json(), "order_hash": self.order_hash,
                "batch_size": self.batch_size, "world_size": self.world_size, "last_batch": self.last_batch.value,
                "start": {"step": self.start.step, "epoch": self.start.epoch, "position": self.start.position}}

    @property
    def hash(self) -> str:
        return sha256_hex(canonical_json(self.to_json()))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"

    @property
    def start_step(self) -> int:
        """The step this spec's segment starts at (what a run record names its spec file by)."""
        return self.start.step

    @classmethod
    def from_json(cls, data: Any, where: str = "run spec") -> "RunSpec":
        try:
            if data.get("format") != SPEC_FORMAT:
                raise UserError(f"{where}: not a dsinspect run spec "
                                f"(format {data.get('format')!r}, expected {SPEC_FORMAT!r})")
            order, start = data["order"], data.get("start", {})
            spec = cls(sources=tuple(Source(*_source_names(s, i), tuple(int(r) for r in s["shard_rows"]),
                                            float(s["weight"]), _counts(s.get("shard_tokens")),
                                            _counts(s.get("shard_sequences"), "shard_sequences"))
                                     for i, s in enumerate(order["sources"])),
                       sequences=None if order.get("sequences") is None else
                       SequenceSpec.from_json(order["sequences"], "order.sequences"),
                       seed=order["seed"], batch_size=data["batch_size"], world_size=data["world_size"],
                       shuffle=order["shuffle"], window_shards=order["window_shards"], last_batch=data["last_batch"],
                       epoch_size=order["epoch_size"], mixture_block=order["mixture_block"],
                       start=Start(int(start.get("step", 0)), int(start.get("epoch", 0)),
                                   int(start.get("position", 0))))
        except UserError as e:
            raise UserError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise UserError(f"{where}: malformed run spec ({e.__class__.__name__}: {e})") from None
        if data.get("order_hash", spec.order_hash) != spec.order_hash:
            raise UserError(f"{where}: order_hash does not match the order it describes (edited by hand?)")
        return spec

    @classmethod
    def loads(cls, text: str, where: str = "run spec") -> "RunSpec":
        try:
            return cls.from_json(json.loads(text), where)
        except (json.JSONDecodeError, RecursionError) as e:  # RecursionError: a nesting bomb
            raise UserError(f"{where}: not valid JSON ({e})") from None

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def create(cls, catalog: "Catalog", addresses: str | Sequence[str] | Mapping[str, float],
               **options: Any) -> "RunSpec":
        """A spec over one address or a weighted mixture ({address: weight}); pins version ids."""
        if isinstance(addresses, str):
            addresses = {addresses: 1.0}
        elif not isinstance(addresses, Mapping):
            addresses = {a: 1.0 for a in addresses}
        sources = []
        packing = options.get("sequences")
        for address, weight in addresses.items():
            v = catalog.resolve(address)
            tokens = None if packing is None else _shard_tokens(v, packing)
            counted = _pad_counts(v, packing) if packing is not None and packing.packing is Packing.PAD else None
            sources.append(Source(v.name, v.id, tuple(v.manifest.shard_rows.tolist()), float(weight), tokens,
                                  counted))
        return cls(tuple(sources), **options)

    def replace(self, **changes: Any) -> "RunSpec":
        return replace(self, **changes)


def _shard_tokens(version: Any, packing: SequenceSpec) -> tuple[int, ...]:
    """Tokens of the packed field in each shard of `version`, from its manifest (docs/FORMAT.md)."""
    where = f"{version.name}@{version.id[:12]}"
    try:
        f = version.manifest.field(packing.field)
    except KeyError:
        raise UserError(f"{where} has no field {packing.field!r} to pack into sequences") from None
    if f.role.value != "tokens":
        raise UserError(f"{where}: field {packing.field!r} is {f.role.value}, not tokens: "
                        "only tokens pack into sequences")
    counts = [s.token_count(packing.field) for s in version.manifest.shards]
    if any(n is None for n in counts):
        raise UserError(f"{where} was written before manifests counted tokens per shard: write it again "
                        f"(e.g. `dsinspect export` then `ingest`) to pack {packing.field!r} into sequences")
    return tuple(counts)


def _pad_counts(version: Any, packing: SequenceSpec) -> tuple[int, ...]:
    """The sequences each shard of `version` makes under `pad` packing, from its documents' lengths:
    the packed field of every shard, read once here so that no reader ever needs them to locate a
    sequence (an index of one number a shard, kept in the spec)."""
    return tuple(pad_sequences(document_lengths(version.read_shard(shard, columns=[packing.field])
                                                .column(packing.field)), packing)
                 for shard in range(len(version.manifest.shards)))


def _counts(value: Any, what: str = "shard_tokens") -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
        raise UserError(f"{what} must be a list of integers, not {value!r:.40}")
    return tuple(value)


def _source_names(source: Mapping, i: int) -> tuple[str, str]:
    """A source's dataset name and version id, refused unless each is a safe file name: a spec file
    is user input, and both become catalog paths (datasets/NAME/versions/ID.json)."""
    where = f"order.sources[{i}]"
    return (check_name(_text(source["name"], "source name"), f"{where}.name (dataset name)"),
            check_sha256(_text(source["version"], "source version"), f"{where}.version (version id)"))


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{what} must be a string, not {value!r:.40}")
    return value


def _enum(kind: type[enum.Enum], value: Any, name: str):
    try:
        return kind(value)
    except ValueError:
        raise UserError(f"{name} must be one of {', '.join(k.value for k in kind)}, not {value!r}") from None


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)

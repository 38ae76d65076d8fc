"""A rollout as one thing: its prompt and response tokens decoded with the stored tokenizer, each token with
the values the RL stack kept for it (log-probs, their gap, advantage, loss mask) and the findings at it,
its turns, reward and advantage; and a group of rollouts (the responses to one prompt) side by side.

Every face (CLI, TUI, web) draws these views and colours a token through `shade` and `scale`, so a token
has the same colour everywhere. Pure: no UI code. Per-token columns are laid on the response through
`rollout_arrays` (whichever of the three layouts they are stored in); the findings are those of
`rollout_dataset.check_version` over the rollout's group, so a group-level bug (equal rewards) shows on
each of its rows.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dsinspect.errors import NotFoundError, UserError
from dsinspect.inspect.rollout_arrays import Layout, RolloutArrays, scalars
from dsinspect.inspect.rollout_dataset import check_options, check_version, columns_of, read_rollouts
from dsinspect.inspect.rollout_findings import RolloutFinding
from dsinspect.inspect.rollout_turns import Turn, part_of_text, part_of_tokens, turns_of
from dsinspect.inspect.rollouts import Meaning, RolloutColumns
from dsinspect.inspect.text import text_view
from dsinspect.inspect.views import Finding, View, jsonable
from dsinspect.inspect.vocab import Vocab, tokenizer_vocab
from dsinspect.loaders.format.manifest import HASH_COLUMN, Field
from dsinspect.loaders.store.version import DatasetVersion

__all__ = ["COLOR_BY", "LABELS", "DIVERGING", "TokenCell", "Turn", "RolloutView", "GroupView", "rollout_view",
           "group_view", "group_of", "find_rollout", "shade", "scale", "legend", "MAX_GROUP_ROWS"]

COLOR_BY = ("logprob_gap", "sampler_logprobs", "learner_logprobs", "ref_logprobs", "advantage", "loss_mask")
LABELS = {"logprob_gap": "|sampler − learner| log-prob", "sampler_logprobs": "sampler log-prob",
          "learner_logprobs": "learner log-prob", "ref_logprobs": "reference log-prob", "advantage": "advantage",
          "loss_mask": "loss mask"}
DIVERGING = frozenset({"advantage"})   # shaded around 0 (0.5); the others from 0 (nothing of note) up to 1
MIN_GAP_SCALE = 2 * math.log(2.0)      # the gap scale reaches at least twice the default finding threshold
MAX_GROUP_ROWS = 64                    # a group view builds at most this many rows (all are counted)
_CHECK_LIMIT = 4096                    # a larger "group" is no GRPO group: only the row itself is checked
_ALL = 1 << 31                         # every row and position of a finding (a group is small)
_LISTS = {"sampler_logprobs": Meaning.SAMPLER_LOGPROBS, "learner_logprobs": Meaning.LEARNER_LOGPROBS,
          "ref_logprobs": Meaning.REF_LOGPROBS, "advantage": Meaning.ADVANTAGE, "loss_mask": Meaning.LOSS_MASK}


@dataclass(frozen=True)
class TokenCell:
    """One token of a part. `values` holds each COLOR_BY name the rollout has a value of at this token
    (None where it has none, NaN and inf as stored); `findings` the codes of findings at this position."""

    position: int
    id: int
    piece: str
    special: bool
    padding: bool
    in_loss: bool | None
    values: dict[str, float | None]
    findings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "values": jsonable(self.values), "findings": list(self.findings)}


@dataclass
class RolloutView(View):
    """One rollout. Without tokens (text only) `prompt` and `response` are empty and the texts stand alone;
    `advantage` is the per-rollout value (None when it is per token: then in each cell's values, and a
    per-rollout advantage is also in each response cell's values, as GRPO applies it to every token)."""

    kind: ClassVar[str] = "rollout"
    dataset: str
    version_id: str
    index: int
    key: Any
    group: Any
    policy_version: int | None
    reward: float | None
    rewards: dict | None
    advantage: float | None
    finish_reason: str | None
    prompt: list[TokenCell]
    response: list[TokenCell]
    turns: list[Turn]
    color_by: tuple[str, ...]
    findings: list[Finding]
    columns: dict[str, str]
    row_hash: str
    prompt_text: str | None = None       # as stored, invisible code points made visible
    response_text: str | None = None
    tokenizer: str | None = None         # what decoded the pieces (None: ids only)
    advantage_per_token: bool = False
    layouts: dict[str, str] = field(default_factory=dict)   # per-token column -> response / full / shifted
    skipped: dict[str, str] = field(default_factory=dict)   # check -> why it did not run
    num_rows: int = 0

    @property
    def address(self) -> str:
        return f"{self.dataset}@{self.version_id[:12]}:{self.index}"

    @property
    def cells(self) -> list[TokenCell]:
        return [*self.prompt, *self.response]


@dataclass
class GroupView(View):
    """The responses to one prompt, in version order: `rows` holds the first MAX_GROUP_ROWS of `size`;
    `advantages` the per-rollout advantage, or the mean over the loss mask when it is per token."""

    kind: ClassVar[str] = "rollout-group"
    dataset: str
    version_id: str
    group: Any
    rows: list[RolloutView]
    rewards: list[float | None]
    advantages: list[float | None]
    zero_advantage: bool
    findings: list[Finding]
    size: int = 0
    indices: list[int] = field(default_factory=list)   # every row of the group
    prompt_shared: bool = True                          # all rows shown have the same prompt tokens (or text)
    skipped: dict[str, str] = field(default_factory=dict)


# -- colour -----------------------------------------------------------------------------------------

def shade(value: float | None, color_by: str, lo: float, hi: float) -> float | None:
    """Where `value` sits on `color_by`'s scale, in [0, 1]; None for no value or NaN. Log-probs: 0 is
    certain (0.0) and 1 the least likely (`lo`); the gap: 0 none, 1 at `hi`; advantage: 0.5 is zero, 0 and 1
    the scale's ends; loss mask: 0 or 1."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    value = float(value)
    if color_by == "loss_mask":
        return 0.0 if value == 0 else 1.0
    if color_by == "advantage":
        reach = max(abs(lo), abs(hi)) or 1.0
        return _clip(0.5 + 0.5 * value / reach)
    if color_by == "logprob_gap":
        return _clip(abs(value) / (hi or MIN_GAP_SCALE))
    if color_by in COLOR_BY:
        return _clip(value / lo) if lo < 0 else (1.0 if value < 0 else 0.0)
    raise ValueError(f"no colour by {color_by!r}: one of {', '.join(COLOR_BY)}")


def scale(views: RolloutView | GroupView | Iterable[RolloutView], color_by: str) -> tuple[float, float]:
    """The (lo, hi) every token of `views` is shaded on for `color_by` (padding left out), so rows shown
    side by side share one scale."""
    if isinstance(views, RolloutView):
        views = [views]
    elif isinstance(views, GroupView):
        views = views.rows
    found = [c.values.get(color_by) for v in views for c in v.cells if not c.padding]
    finite = np.array([x for x in found if x is not None and math.isfinite(x)], np.float64)
    if color_by == "loss_mask":
        return 0.0, 1.0
    if color_by == "logprob_gap":
        return 0.0, max(MIN_GAP_SCALE, float(finite.max()) if len(finite) else 0.0)
    if color_by == "advantage":
        reach = float(np.abs(finite).max()) if len(finite) else 0.0
        return (-reach, reach) if reach > 0 else (-1.0, 1.0)
    if color_by not in COLOR_BY:
        raise ValueError(f"no colour by {color_by!r}: one of {', '.join(COLOR_BY)}")
    low = float(finite.min()) if len(finite) else 0.0
    return (low if low < 0 else -1.0), 0.0


def legend(color_by: str, lo: float, hi: float, steps: int = 5) -> list[tuple[float, float]]:
    """(value, shade) at `steps` points across the scale, for a key beside the tokens."""
    if color_by == "loss_mask":
        return [(0.0, 0.0), (1.0, 1.0)]
    if color_by in DIVERGING or color_by == "logprob_gap":
        points = np.linspace(lo, hi, steps)
    else:
        points = np.linspace(0.0, lo, steps)
    return [(float(p), shade(float(p), color_by, lo, hi)) for p in points]


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


# -- opening ----------------------------------------------------------------------------------------

def rollout_view(version: DatasetVersion, index: int, *, overrides: dict | None = None,
                 fields: Sequence[Field] | None = None) -> RolloutView:
    """Row `index` of a rollout version, with the findings of its group's check. `overrides`: check
    options over those the data declares; `fields`: meanings given at read time (`read_rollouts`)."""
    index = version.check_index(index)
    columns = columns_of(version, fields)
    rows = _group_members(version, columns, index)
    built = _Rows(version, rows, overrides or {}, fields)
    return built.view(rows.index(index))


def group_view(version: DatasetVersion, group: Any, *, overrides: dict | None = None,
               fields: Sequence[Field] | None = None) -> GroupView:
    """Every rollout of group `group` (a value of the group column; "3" finds an integer group 3)."""
    columns = columns_of(version, fields)
    name = columns.get(Meaning.GROUP)
    if name is None:
        raise UserError(f"{version.address}: no group column (a rollout's group is its GRPO prompt group); "
                        "show one rollout by its index instead")
    rows = _matching(version, name, group)
    if not rows:
        raise NotFoundError(f"{version.address}: no rollout in group {group!r} ({name})")
    built = _Rows(version, rows, overrides or {}, fields)
    views = [built.view(i) for i in range(min(len(rows), MAX_GROUP_ROWS))]
    findings = [f.as_finding() for f in built.report.findings]
    prompts = {tuple(c.id for c in v.prompt) if v.prompt else v.prompt_text for v in views}
    return GroupView(version.name, version.id, views[0].group, views, [v.reward for v in views],
                     [_advantage_of(v) for v in views],
                     any(f.code == "rollout-zero-advantage-group" for f in findings), findings, len(rows),
                     list(rows), len(prompts) <= 1, dict(built.report.skipped))


def group_of(version: DatasetVersion, index: int, fields: Sequence[Field] | None = None) -> Any:
    """The group of row `index` (None without a group column or value): one value read."""
    name = columns_of(version, fields).get(Meaning.GROUP)
    if name is None:
        return None
    return version.take([version.check_index(index)], [name]).column(0)[0].as_py()


def find_rollout(version: DatasetVersion, key_value: Any) -> int:
    """The index of the rollout whose key (the dataset's key field) is `key_value` ("12" finds 12)."""
    key = version.manifest.key
    if key is None:
        raise UserError(f"{version.address} has no key field: address a rollout by its index")
    rows = _matching(version, key, key_value, first=True)
    if not rows:
        raise NotFoundError(f"{version.address}: no rollout with {key} = {key_value!r}")
    return rows[0]


def _group_members(version: DatasetVersion, columns: RolloutColumns, index: int) -> list[int]:
    name = columns.get(Meaning.GROUP)
    if name is None:
        return [index]
    value = version.take([index], [name]).column(0)[0]
    if not value.is_valid:
        return [index]
    rows = _matching(version, name, value)
    return rows if len(rows) <= _CHECK_LIMIT else [index]


def _matching(version: DatasetVersion, name: str, value: Any, first: bool = False) -> list[int]:
    """The rows whose column `name` equals `value`, reading only that column."""
    out: list[int] = []
    for start, table in version.iter_tables([name]):
        column = table.column(0)
        wanted = _coerce(value, column.type)
        if wanted is None:
            return []
        hits = pc.indices_nonzero(pc.fill_null(pc.equal(column, wanted), False)).to_numpy()
        out += (hits + start).tolist()
        if first and out:
            return out[:1]
    return out


def _coerce(value: Any, type_: pa.DataType) -> pa.Scalar | None:
    """`value` as a scalar of `type_` (a typed "3" as the integer 3); None when it cannot be one."""
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    try:
        return pa.scalar(value, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    try:
        return pa.scalar(str(value)).cast(type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
        return None


def _advantage_of(view: RolloutView) -> float | None:
    if not view.advantage_per_token:
        return view.advantage
    chosen = [c.values.get("advantage") for c in view.response if c.in_loss or (c.in_loss is None and not c.padding)]
    chosen = [x for x in chosen if x is not None]
    return float(np.mean(chosen)) if chosen else None


# -- building -----------------------------------------------------------------------------------------

class _Rows:
    """Some rows of a version read once (their rollout columns, key and row hashes), checked together,
    their per-token columns laid on the response; `view(i)` builds row i's view."""

    def __init__(self, version: DatasetVersion, rows: Sequence[int], overrides: dict,
                 fields: Sequence[Field] | None = None):
        self.version, self.rows = version, list(rows)
        self.key = version.manifest.key
        table, columns = read_rollouts(version, self.rows, fields)  # an OpenRLHF sequence comes split
        extra = [c for c in ([self.key] if self.key else []) + [HASH_COLUMN] if c not in table.column_names]
        more = version.take(self.rows, extra)
        for name in extra:
            table = table.append_column(name, more.column(name))
        self.table, self.columns = table, columns
        everything = {**overrides, "rows_shown": _ALL, "positions_shown": _ALL}
        self.report = check_version(version, self.rows, fields=fields, **everything)
        self.options = check_options(fields or version.fields, None, **{
            k: v for k, v in overrides.items() if k not in ("staleness_bound", "learner_version")})
        self.vocabs = {m: self._vocab(m) for m in (Meaning.PROMPT_TOKENS, Meaning.RESPONSE_TOKENS)}
        vocab = self.vocabs[Meaning.RESPONSE_TOKENS]
        pad = self.options.pad_id if self.options.pad_id is not None else (vocab.pad_id if vocab else None)
        self.data = RolloutArrays(self.table, columns, pad, self.options.eos_ids)
        self.special = set(self.options.special_ids)
        self.scalars = {m: self._scalars(m) for m in (Meaning.REWARD, Meaning.ADVANTAGE)}
        self._pieces: dict[tuple[Meaning, int], tuple[str, bytes]] = {}

    def _vocab(self, meaning: Meaning) -> Vocab | None:
        """The stored tokenizer of the part's field (of the sequence it was cut from, when it was)."""
        stored = {f.name for f in self.version.fields}
        name = self.columns.get(meaning)
        if name is not None and name not in stored:
            name = self.columns.get(Meaning.SEQUENCE_TOKENS)
        if name is None or name not in stored:
            return None
        spec = self.version.manifest.field(name).options.get("tokenizer")
        if not isinstance(spec, dict):
            return None
        try:
            return tokenizer_vocab(self.version.catalog, self.version.name, spec)
        except Exception:  # noqa: BLE001 - a tokenizer that cannot be loaded leaves the ids visible
            return None

    def _scalars(self, meaning: Meaning) -> tuple[np.ndarray, np.ndarray] | None:
        name = self.columns.get(meaning)
        if name is None or (meaning is Meaning.ADVANTAGE and self.data.lists(meaning) is not None):
            return None
        return scalars(self.table.column(name))

    def value(self, meaning: Meaning, i: int) -> Any:
        name = self.columns.get(meaning)
        return None if name is None else self.table.column(name)[i].as_py()

    def view(self, i: int) -> RolloutView:
        index = self.rows[i]
        at = _positions_of(self.report.findings, index)
        prompt = self._cells(i, "prompt", at.get("prompt", {}))
        response = self._cells(i, "response", at.get("response", {}))
        texts = {m: self.value(m, i) for m in (Meaning.PROMPT_TEXT, Meaning.RESPONSE_TEXT)}
        per_token_advantage = self.data.lists(Meaning.ADVANTAGE) is not None
        vocab = self.vocabs[Meaning.RESPONSE_TOKENS] or self.vocabs[Meaning.PROMPT_TOKENS]
        return RolloutView(
            self.version.name, self.version.id, index,
            self.table.column(self.key)[i].as_py() if self.key else None,
            self.value(Meaning.GROUP, i), self.value(Meaning.POLICY_VERSION, i),
            self._scalar(Meaning.REWARD, i), self._rewards(i),
            None if per_token_advantage else self._scalar(Meaning.ADVANTAGE, i),
            _finish(self.value(Meaning.FINISH_REASON, i)), prompt, response,
            self._turns(i, prompt, response, texts),
            tuple(n for n in COLOR_BY if any(c.values.get(n) is not None for c in (*prompt, *response))),
            _row_findings(self.report.findings, index),
            {m.value: c for m, c in self.columns.columns.items()}, _hex(self.table.column(HASH_COLUMN)[i].as_py()),
            _visible(texts[Meaning.PROMPT_TEXT]), _visible(texts[Meaning.RESPONSE_TEXT]),
            vocab.name if vocab else None, per_token_advantage, self._layouts(), dict(self.report.skipped),
            self.version.num_rows)

    def _scalar(self, meaning: Meaning, i: int) -> float | None:
        got = self.scalars.get(meaning)
        if got is None or not got[1][i]:
            return None
        return float(got[0][i])

    def _rewards(self, i: int) -> dict | None:
        out: dict[str, Any] = {}
        stored = self.value(Meaning.REWARDS, i)
        if isinstance(stored, str):
            try:
                stored = json.loads(stored)
            except ValueError:
                stored = {"(not JSON)": stored}
        if isinstance(stored, dict):
            out.update(stored)
        for name in self.columns.reward_functions:
            out[name] = self.table.column(name)[i].as_py()
        return out or None

    def _layouts(self) -> dict[str, str]:
        out = {}
        for name, meaning in _LISTS.items():
            aligned = self.data.aligned(meaning) if self.data.response is not None else None
            if aligned is not None:
                out[name] = aligned.layout.value
        return out

    # -- tokens ------------------------------------------------------------------------------------

    def _ids(self, part: str, i: int) -> list[int]:
        lists = self.data.prompt if part == "prompt" else self.data.response
        if lists is None or not lists.valid[i]:
            return []
        start = int(lists.starts[i])
        return lists.items[start:start + int(lists.lengths[i])].tolist()

    def _cells(self, i: int, part: str, marks: dict[int, list[str]]) -> list[TokenCell]:
        ids = self._ids(part, i)
        if not ids:
            return []
        meaning = Meaning.PROMPT_TOKENS if part == "prompt" else Meaning.RESPONSE_TOKENS
        vocab = self.vocabs[meaning]
        values = self._values(i, part, len(ids))
        padding = self._padding(i, part, ids, vocab)
        mask = values.get("loss_mask")
        cells = []
        for p, token in enumerate(ids):
            shown = {name: column[p] for name, column in values.items()}
            in_loss = None if mask is None or mask[p] is None else bool(mask[p] != 0)
            special = token in self.special or (vocab is not None and token in vocab.special)
            cells.append(TokenCell(p, int(token), self._piece(meaning, vocab, token)[0], special, bool(padding[p]),
                                   in_loss, shown, tuple(marks.get(p, ()))))
        return cells

    def _values(self, i: int, part: str, n: int) -> dict[str, list[float | None]]:
        """Each COLOR_BY name's values over the part's tokens (names without any value left out)."""
        out: dict[str, list[float | None]] = {}
        for name, meaning in _LISTS.items():
            got = self._list_values(meaning, i, part, n)
            if got is not None:
                out[name] = got
        advantage = self._scalar(Meaning.ADVANTAGE, i) if "advantage" not in out else None
        if part == "response" and advantage is not None:
            out["advantage"] = [advantage] * n
        sampler, learner = out.get("sampler_logprobs"), out.get("learner_logprobs")
        if sampler is not None and learner is not None:
            out["logprob_gap"] = [None if s is None or x is None else _gap(s, x) for s, x in zip(sampler, learner)]
        return {name: out[name] for name in COLOR_BY if name in out and any(v is not None for v in out[name])}

    def _list_values(self, meaning: Meaning, i: int, part: str, n: int) -> list[float | None] | None:
        if self.data.response is None:
            return None
        aligned = self.data.aligned(meaning)
        if aligned is None or not aligned.row_ok[i]:
            return None
        if part == "response":
            begin = int(self.data.begins[i])
            return [float(x) for x in aligned.values[begin:begin + n]]
        if aligned.layout is Layout.RESPONSE:
            return None
        lists = self.data.lists(meaning)
        start, shift = int(lists.starts[i]), int(aligned.layout is Layout.SHIFTED)
        return [None if p < shift else float(lists.items[start + p - shift]) for p in range(n)]

    def _padding(self, i: int, part: str, ids: list[int], vocab: Vocab | None) -> np.ndarray:
        flags = np.zeros(len(ids), bool)
        if part == "response":
            flags[int(self.data.effective[i]):] = True
            return flags
        pad = self.options.pad_id if self.options.pad_id is not None else (vocab.pad_id if vocab else None)
        lead = 0
        while pad is not None and lead < len(ids) and ids[lead] == pad:  # verl left-pads its prompts
            lead += 1
        flags[:lead] = True
        return flags

    def _piece(self, meaning: Meaning, vocab: Vocab | None, token: int) -> tuple[str, bytes]:
        """A token's piece as shown (invisible code points as ⟨U+200B⟩, a partial character's bytes as
        \\xNN) and its exact bytes; ⟨id⟩ without a tokenizer, ⟨id?⟩ for an id the tokenizer lacks."""
        key = (meaning, token)
        if key not in self._pieces:
            data = vocab.piece(token) if vocab is not None else None
            if vocab is None:
                self._pieces[key] = (f"⟨{token}⟩", b"")
            elif data is None:
                self._pieces[key] = (f"⟨{token}?⟩", b"")
            else:
                self._pieces[key] = (_visible(data.decode("utf-8", "backslashreplace")), data)
        return self._pieces[key]

    def _turns(self, i: int, prompt: list[TokenCell], response: list[TokenCell], texts: dict) -> list[Turn]:
        value = self.value(Meaning.TURNS, i)
        if value is None:
            return []
        if prompt or response:
            parts = [part_of_tokens(name, [self._piece(m, self.vocabs[m], c.id)[1] for c in cells], _visible)
                     for name, m, cells in (("prompt", Meaning.PROMPT_TOKENS, prompt),
                                            ("response", Meaning.RESPONSE_TOKENS, response))]
        else:
            parts = [part_of_text(name, texts[m] or "", _visible)
                     for name, m in (("prompt", Meaning.PROMPT_TEXT), ("response", Meaning.RESPONSE_TEXT))]
        return turns_of(value, *parts)


def _positions_of(findings: list[RolloutFinding], index: int) -> dict[str, dict[int, list[str]]]:
    """axis -> position -> the codes of the findings at it, for version row `index`."""
    out: dict[str, dict[int, list[str]]] = {}
    for f in findings:
        positions = f.at().get(index)
        if positions and f.axis:
            for p in positions:
                out.setdefault(f.axis, {}).setdefault(int(p), []).append(f.code)
    return out


def _row_findings(findings: list[RolloutFinding], index: int) -> list[Finding]:
    """The findings that name row `index`, `at` holding its positions and what they count."""
    out = []
    for f in findings:
        at = f.at()
        if index in at:
            positions = at[index]
            out.append(Finding(f.severity, f.code, f.message,
                               {"positions": None if positions is None else list(positions), "axis": f.axis,
                                "column": f.column, "rows": f.count}))
    return out


def _gap(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or (math.isinf(a) and a == b):
        return math.nan
    return abs(a - b)


def _finish(value: Any) -> str | None:
    if isinstance(value, bool):  # OpenRLHF's `truncated`
        return "length" if value else "stop"
    return None if value is None else _visible(str(value))


def _visible(text: str | None) -> str | None:
    return None if text is None else text_view(text).visible


def _hex(value: bytes | None) -> str:
    return value.hex() if value else ""

"""Findings about RL rollouts as data: which rows (and which of their tokens) show a known RL data bug,
bounded so a million-row table gives a short answer. The checks that make them are in `rollout_checks`;
docs/RL.md says what causes each one in real RL stacks.

Positions count response tokens (0 is the first generated token) whatever layout the column is stored
in, except `rollout-loss-mask-on-prompt`, whose positions count prompt tokens (`axis` says which).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from dsinspect.inspect.rollout_arrays import rows_and_positions
from dsinspect.inspect.rollouts import RolloutColumns
from dsinspect.inspect.views import Finding, Severity

__all__ = ["Code", "SEVERITY", "RolloutFinding", "CheckOptions", "RolloutReport", "Skip", "token_finding",
           "row_finding"]


class Code(str, enum.Enum):
    LOSS_MASK_ON_PROMPT = "rollout-loss-mask-on-prompt"
    LOSS_MASK_ON_PADDING = "rollout-loss-mask-on-padding"
    LOGPROB_GAP = "rollout-logprob-gap"
    ZERO_ADVANTAGE_GROUP = "rollout-zero-advantage-group"
    TRUNCATED = "rollout-truncated"
    MISSING_EOS = "rollout-missing-eos"
    SPECIAL_TOKEN = "rollout-special-token"
    NONFINITE_REWARD = "rollout-nonfinite-reward"
    NONFINITE_REWARDS = "rollout-nonfinite-rewards"
    NONFINITE_ADVANTAGE = "rollout-nonfinite-advantage"
    STALE = "rollout-stale"
    TOKEN_LENGTH_MISMATCH = "rollout-token-length-mismatch"


SEVERITY = {
    Code.LOSS_MASK_ON_PROMPT: Severity.ERROR,      # the model is trained to produce its prompt
    Code.LOSS_MASK_ON_PADDING: Severity.ERROR,     # gradient from tokens nobody sampled
    Code.LOGPROB_GAP: Severity.WARNING,            # off-policy beyond what importance sampling corrects
    Code.ZERO_ADVANTAGE_GROUP: Severity.INFO,      # legitimate, but compute that teaches nothing
    Code.TRUNCATED: Severity.WARNING,              # the reward judged an unfinished answer
    Code.MISSING_EOS: Severity.ERROR,              # "stop" without the token that stops
    Code.SPECIAL_TOKEN: Severity.WARNING,          # chat-template tokens generated mid-answer
    Code.NONFINITE_REWARD: Severity.ERROR,
    Code.NONFINITE_REWARDS: Severity.ERROR,
    Code.NONFINITE_ADVANTAGE: Severity.ERROR,
    Code.STALE: Severity.ERROR,                    # breaks the staleness bound the run declared
    Code.TOKEN_LENGTH_MISMATCH: Severity.ERROR,    # a per-token column that does not line up with the tokens
}


class Skip(Exception):
    """A check that cannot run on this table or these options; the reason is reported, not hidden."""


@dataclass(frozen=True)
class CheckOptions:
    """What the checks need to know beyond the table. A check whose input is missing is skipped, with the
    reason in the report. `logprob_gap` defaults to ln 2: a ratio of 2 between the two policies' token
    probabilities, where verl's default `rollout_is_threshold` (2.0) starts truncating a weight."""

    pad_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    special_ids: tuple[int, ...] = ()             # the tokenizer's special ids (pad and EOS may be among them)
    max_response_tokens: int | None = None        # the sampler's length limit (max_tokens)
    logprob_gap: float = math.log(2.0)
    learner_version: int | None = None
    staleness_bound: int | None = None            # policy_version >= learner_version - bound is fresh
    unscored_nan_rewards: bool = False            # TRL writes NaN where a reward function returned None
    rows_shown: int = 20
    positions_shown: int = 64

    def __post_init__(self) -> None:
        for name in ("eos_ids", "special_ids"):
            value = getattr(self, name)
            object.__setattr__(self, name, (int(value),) if isinstance(value, (int, np.integer))
                               else tuple(int(v) for v in value))
        if not self.logprob_gap > 0:
            raise ValueError(f"logprob_gap must be > 0, not {self.logprob_gap}")
        for name in ("max_response_tokens", "staleness_bound", "rows_shown", "positions_shown"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, not {value}")


@dataclass(frozen=True)
class RolloutFinding:
    """One kind of bug in a table: `count` rows have it; `rows` lists the first of them and `positions`
    (None for a finding about whole rows) their token positions, the first few of each."""

    code: str
    severity: Severity
    message: str
    count: int
    rows: tuple[int, ...]
    positions: tuple[tuple[int, ...], ...] | None = None
    tokens: int | None = None             # token positions over all `count` rows
    axis: str | None = None               # "response" or "prompt": what the positions count
    column: str | None = None

    def at(self) -> dict[int, tuple[int, ...] | None]:
        """{row: positions} for the listed rows."""
        return {r: (None if self.positions is None else self.positions[i]) for i, r in enumerate(self.rows)}

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity.value, "message": self.message,
                "count": self.count, "rows": list(self.rows), "tokens": self.tokens, "axis": self.axis,
                "column": self.column,
                "positions": None if self.positions is None else [list(p) for p in self.positions]}

    def as_finding(self) -> Finding:
        """The shared `Finding` every face renders, its `at` holding the rows and positions."""
        at = {k: v for k, v in self.to_json().items() if k not in ("code", "severity", "message")}
        return Finding(self.severity, self.code, self.message, at)


@dataclass
class RolloutReport:
    findings: list[RolloutFinding] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)   # code -> why that check did not run
    columns: RolloutColumns = field(default_factory=RolloutColumns)

    def by_code(self, code: Code | str) -> list[RolloutFinding]:
        return [f for f in self.findings if f.code == Code(code).value]

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_json() for f in self.findings], "skipped": dict(self.skipped),
                "columns": self.columns.to_json()}


def token_finding(code: Code, hits: np.ndarray, begins: np.ndarray, options: CheckOptions, message: str,
                  axis: str = "response", column: str | None = None, offset: int = 0) -> RolloutFinding | None:
    """A finding from sorted flat token indices on an axis whose rows begin at `begins` (None if no hit).
    `message` may use {rows} and {tokens}; `offset` is added to each position."""
    if len(hits) == 0:
        return None
    rows, positions = rows_and_positions(hits, begins)
    firsts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
    ends = np.append(firsts[1:], len(rows))
    shown = range(min(len(firsts), options.rows_shown))
    listed = tuple(tuple(int(p) + offset for p in positions[firsts[i]:ends[i]][:options.positions_shown])
                   for i in shown)
    return RolloutFinding(code.value, SEVERITY[code], message.format(rows=len(firsts), tokens=len(hits)),
                          len(firsts), tuple(int(rows[firsts[i]]) for i in shown), listed, len(hits), axis, column)


def row_finding(code: Code, mask: np.ndarray, options: CheckOptions, message: str, column: str | None = None,
                positions: Iterable[tuple[int, ...]] | None = None) -> RolloutFinding | None:
    """A finding from a per-row mask (None if no row is set); `message` may use {rows}. `positions`, when
    given, holds one tuple per set row, in row order."""
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return None
    shown = tuple(int(r) for r in rows[:options.rows_shown])
    listed = None if positions is None else tuple(p for p, _ in zip(positions, shown))
    return RolloutFinding(code.value, SEVERITY[code], message.format(rows=len(rows)), len(rows), shown, listed,
                          None, None if positions is None else "response", column)

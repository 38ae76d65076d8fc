"""RL trajectories (a struct of per-step lists): a per-step table, return and length, reward and
return series for plotting, and consistency checks reported as findings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from dsinspect.inspect.views import Finding, Severity, View, no_json

__all__ = ["StepRow", "TrajectoryPage", "TrajectoryView", "trajectory_view", "ALIASES", "STEP_PAGE"]

STEP_PAGE = 50
ALIASES = {
    "observation": ("observation", "observations", "obs", "state", "states"),
    "action": ("action", "actions", "act"),
    "reward": ("reward", "rewards", "rew"),
    "terminated": ("terminated", "terminals", "terminal", "done", "dones", "is_terminal"),
    "truncated": ("truncated", "truncations", "timeouts", "timeout"),
}


@dataclass(frozen=True)
class StepRow:
    step: int
    observation: str            # a short summary: the first values, or shape and mean
    action: Any
    reward: float | None
    cumulative: float | None    # the return up to and including this step
    terminated: bool | None
    truncated: bool | None
    extra: dict[str, Any] = field(default_factory=dict)  # other per-step columns, summarised

    def to_json(self) -> dict[str, Any]:
        from dsinspect.inspect.views import jsonable

        return {k: jsonable(getattr(self, k)) for k in self.__dataclass_fields__}


@dataclass
class TrajectoryPage(View):
    kind: ClassVar[str] = "trajectory-page"
    page: int
    pages: int
    page_size: int
    rows: list[StepRow]


@dataclass
class TrajectoryView(View):
    """`columns` maps each role (observation, action, ...) to the struct child that plays it."""

    kind: ClassVar[str] = "trajectory"
    length: int
    episode_return: float | None
    columns: dict[str, str]
    column_lengths: dict[str, int]
    observation_shape: list[int] | None
    rewards: list[float | None]
    returns: list[float | None]
    terminated_at: int | None       # first step flagged terminated
    truncated_at: int | None
    findings: list[Finding] = field(default_factory=list)
    page_size: int = STEP_PAGE
    value: dict[str, Any] = no_json(default_factory=dict)

    @property
    def pages(self) -> int:
        return max(1, -(-self.length // self.page_size))

    def page(self, n: int = 0) -> TrajectoryPage:
        """Page `n` of the per-step table (clamped into range; negative counts from the end)."""
        n = min(max(n + self.pages if n < 0 else n, 0), self.pages - 1)
        first = n * self.page_size
        rows = [self._row(t) for t in range(first, min(self.length, first + self.page_size))]
        return TrajectoryPage(n, self.pages, self.page_size, rows)

    def _row(self, t: int) -> StepRow:
        get = lambda role: _at(self.value.get(self.columns.get(role, "")), t)  # noqa: E731
        extra = {k: _summary(_at(v, t)) for k, v in self.value.items()
                 if k not in self.columns.values() and isinstance(v, list)}
        return StepRow(t, _summary(get("observation")), get("action"), _at(self.rewards, t),
                       _at(self.returns, t), get("terminated"), get("truncated"), extra)


def trajectory_view(value: Mapping[str, Any], page_size: int = STEP_PAGE) -> TrajectoryView:
    """View a trajectory struct value ({child name: per-step list})."""
    value = dict(value)
    columns = {role: next((n for n in names if n in value), None) for role, names in ALIASES.items()}
    columns = {role: name for role, name in columns.items() if name is not None}
    lists = {k: v for k, v in value.items() if isinstance(v, list)}
    lengths = {k: len(v) for k, v in lists.items()}
    length = _length(columns, lengths)
    findings = _length_findings(columns, lengths, length)
    rewards, returns, ret = _rewards(lists.get(columns.get("reward", "")), findings)
    term = lists.get(columns.get("terminated", ""))
    trunc = lists.get(columns.get("truncated", ""))
    findings += _flag_findings(columns, term, trunc, length)
    shape = _shape(lists.get(columns.get("observation", "")))
    return TrajectoryView(length, ret, columns, lengths, shape, rewards, returns, _first_true(term),
                          _first_true(trunc), findings, page_size, value)


def _length(columns: dict[str, str], lengths: dict[str, int]) -> int:
    for role in ("action", "reward", "terminated", "truncated"):
        if columns.get(role) in lengths:
            return lengths[columns[role]]
    return max(lengths.values(), default=0)


def _length_findings(columns: dict[str, str], lengths: dict[str, int], length: int) -> list[Finding]:
    findings = [Finding(Severity.WARNING, "trajectory-missing-column", f"no {role} column (looked for "
                        f"{', '.join(names)})") for role, names in ALIASES.items() if role not in columns]
    obs = columns.get("observation")
    for name, n in lengths.items():
        if n == length:
            continue
        if name == obs and n == length + 1:
            findings.append(Finding(Severity.INFO, "trajectory-final-observation",
                                    f"{name} has {n} entries for {length} steps: it includes the final observation"))
        else:
            findings.append(Finding(Severity.ERROR, "trajectory-length-mismatch",
                                    f"{name} has {n} entries but the episode has {length} steps",
                                    {"column": name, "entries": n, "steps": length}))
    return findings


def _rewards(rewards: list | None, findings: list[Finding]) -> tuple[list, list, float | None]:
    if rewards is None:
        return [], [], None
    # None or a non-number: no reward
    arr = np.array([float(r) if isinstance(r, (int, float)) else math.nan for r in rewards], dtype=np.float64)
    nulls = [t for t, r in enumerate(rewards) if r is None]
    if nulls:
        findings.append(Finding(Severity.ERROR, "trajectory-null-reward",
                                f"{len(nulls)} null reward(s), first at step {nulls[0]}", {"step": nulls[0]}))
    for name, mask in (("NaN", np.isnan(arr)), ("infinite", np.isinf(arr))):
        bad = np.flatnonzero(mask)
        bad = bad[~np.isin(bad, nulls)] if name == "NaN" and nulls else bad
        if len(bad):
            steps = ", ".join(map(str, bad[:10].tolist())) + ("…" if len(bad) > 10 else "")
            findings.append(Finding(Severity.ERROR, f"trajectory-{name.lower()}-reward",
                                    f"{len(bad)} {name} reward(s) at step(s) {steps}", {"step": int(bad[0])}))
    returns = np.cumsum(arr)
    ret = float(returns[-1]) if len(arr) else 0.0
    series = lambda a: [None if r is None else float(x) for x, r in zip(a, rewards)]  # noqa: E731
    return series(arr), [float(x) for x in returns], ret


def _flag_findings(columns: dict, term: list | None, trunc: list | None, length: int) -> list[Finding]:
    findings = []
    for name, flags in (("terminated", term), ("truncated", trunc)):
        steps = [t for t, f in enumerate(flags or []) if f]
        after = [t for t in steps if t < length - 1]
        if after:
            findings.append(Finding(Severity.ERROR, f"trajectory-step-after-{name}",
                                    f"the episode goes on after it was {name} at step {after[0]} "
                                    f"({length - 1 - after[0]} more step(s))", {"step": after[0]}))
    last_term = bool(term[length - 1]) if term and 0 < length <= len(term) else False
    last_trunc = bool(trunc[length - 1]) if trunc and 0 < length <= len(trunc) else False
    if length and (term is not None or trunc is not None) and not (last_term or last_trunc):
        findings.append(Finding(Severity.WARNING, "trajectory-no-terminal-flag",
                                f"the last step ({length - 1}) is neither terminated nor truncated",
                                {"step": length - 1}))
    if last_term and last_trunc:
        findings.append(Finding(Severity.INFO, "trajectory-both-flags",
                                "the last step is both terminated and truncated"))
    return findings


def _first_true(flags: list | None) -> int | None:
    return next((t for t, f in enumerate(flags or []) if f), None)


def _at(seq: Any, t: int) -> Any:
    return seq[t] if isinstance(seq, list) and 0 <= t < len(seq) else None


def _shape(obs: list | None) -> list[int] | None:
    if not obs:
        return None
    try:
        return [len(obs), *np.asarray(obs[0], dtype=np.float64).shape]
    except (TypeError, ValueError):
        return [len(obs)]


def _summary(value: Any) -> Any:
    """A step value for a table cell: scalars as they are, vectors shortened, arrays as shape and mean."""
    if not isinstance(value, list):
        return value
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return repr(value)[:60]
    if arr.ndim == 1:
        shown = ", ".join(f"{x:.3g}" for x in arr[:4])
        return f"[{shown}{', …' if len(arr) > 4 else ''}]" + (f" ({len(arr)})" if len(arr) > 4 else "")
    return f"{'x'.join(map(str, arr.shape))} mean {np.nanmean(arr):.3g}" if arr.size else "[]"

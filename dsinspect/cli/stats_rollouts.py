"""The rollout part of `dsinspect stats`: a version of LLM rollouts' findings (rows by index and by key,
with token positions), the checks skipped and why, and the four run-level statistics as text histograms."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dsinspect.cli.output import out, print_whole

if TYPE_CHECKING:
    from dsinspect.inspect.rollout_findings import RolloutFinding
    from dsinspect.inspect.rollout_summary import RolloutSummary

__all__ = ["print_rollouts", "SEVERITIES", "at_least"]

SEVERITIES = ("error", "warning", "info")   # worst first
BAR = 40                                     # characters of the longest histogram bar


def at_least(summary: RolloutSummary, severity: str) -> list[RolloutFinding]:
    """The findings of `severity` or worse."""
    worst = SEVERITIES[:SEVERITIES.index(severity) + 1]
    return [f for f in summary.report.findings if f.severity.value in worst]


def print_rollouts(s: RolloutSummary) -> None:
    read, report = s.read, s.report
    out.print(f"\n[bold]{s.address}: LLM rollouts[/] ({read.table.num_rows:,}; meanings "
              f"{_counted(read.meaning_from)}{f'; key {s.key}' if s.key else ''})", highlight=False)
    out.print("checks: " + _options(s), markup=False)
    if report.findings:
        _findings(s)
    else:
        out.print("no finding", markup=False)
    for code, why in report.skipped.items():
        out.print(f"[dim]not checked: {code}: {why}[/]")
    _statistics(s.statistics or {})


def _counted(sources: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for source in sources.values():
        counts[source] = counts.get(source, 0) + 1
    return ", ".join(f"{n} {source}" for source, n in counts.items()) or "none"


def _options(s: RolloutSummary) -> str:
    options, origin = s.read.options, s.read.option_from
    shown = []
    for name in ("pad_id", "eos_ids", "special_ids", "max_response_tokens", "logprob_gap", "learner_version",
                 "staleness_bound", "unscored_nan_rewards"):
        value = getattr(options, name)
        if value is None or value == () or (value is False and name not in origin):
            continue
        text = f"{value:.3g}" if isinstance(value, float) else str(list(value) if isinstance(value, tuple) else value)
        shown.append(f"{name} {text} ({origin.get(name, 'default')})")
    return "; ".join(shown) or "none"


def _findings(s: RolloutSummary) -> None:
    from rich.table import Table

    table = Table("severity", "code", "rollouts", "what", f"rows{f' ({s.key})' if s.key else ''}: positions",
                  title_justify="left")
    for f, keys in zip(s.report.findings, s.keys):
        table.add_row(f.severity.value, f.code, f"{f.count:,}", f.message, _where(f, keys, s.key))
    print_whole(table, markup=False)


def _where(f: RolloutFinding, keys: list[Any], key: str | None) -> str:
    parts = []
    for i, row in enumerate(f.rows):
        name = f"{row} ({keys[i]})" if key else str(row)
        if f.positions is not None:
            name += f": {'prompt ' if f.axis == 'prompt' else ''}{_spans(f.positions[i]) or '-'}"
        parts.append(name)
    more = f.count - len(f.rows)
    return "; ".join(parts + ([f"… {more:,} more (--check rows_shown=N)"] if more else []))


def _spans(positions: tuple[int, ...]) -> str:
    """0, 1, 2, 5 as "0-2, 5"."""
    spans: list[list[int]] = []
    for p in positions:
        if spans and p == spans[-1][1] + 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _statistics(stats: dict[str, Any]) -> None:
    by_version = stats.get("reward_by_policy_version")
    if by_version:
        from rich.table import Table

        table = Table("policy version", "rollouts", "rewarded", "mean", "min", "max", title="reward by policy version",
                      title_justify="left")
        for v in by_version:
            table.add_row(str(v["policy_version"]), f"{v['rollouts']:,}", f"{v['rewarded']:,}",
                          *(_num(v[k]) for k in ("mean", "min", "max")))
        out.print(table, markup=False)
    lengths = stats.get("response_length")
    if lengths and lengths.get("count"):
        out.print(f"response length (tokens before padding): {lengths['count']:,} rollouts, min {lengths['min']}, "
                  f"mean {_num(lengths['mean'])}, p50 {_num(lengths['p50'])}, p90 {_num(lengths['p90'])}, "
                  f"p99 {_num(lengths['p99'])}, max {lengths['max']}", markup=False)
        _histogram(lengths["histogram"], integers=True)
    gap = stats.get("logprob_gap")
    if gap and gap["tokens"]:
        out.print(f"log-prob gap |sampler - learner| over {gap['tokens']:,} tokens the loss sees: mean "
                  f"{_num(gap['mean'])}, max {_num(gap['max'])}; {gap['above']:,} ({gap['share_above']:.2%}) above "
                  f"{gap['threshold']:.3g}, {gap['nonfinite']:,} non-finite", markup=False)
        _histogram(gap["histogram"], integers=False)
    zero = stats.get("zero_advantage_groups")
    if zero:
        share = f" ({zero['share']:.1%})" if zero["share"] is not None else ""
        out.print(f"zero-advantage groups: {zero['zero_advantage']:,} of {zero['groups']:,}{share}", markup=False)
    missing = [name.replace("_", " ") for name in ("reward_by_policy_version", "response_length", "logprob_gap",
                                                   "zero_advantage_groups") if stats.get(name) is None]
    if missing:
        out.print(f"[dim]not computed (their columns are missing): {', '.join(missing)}[/]")


def _histogram(histogram: dict[str, list], integers: bool) -> None:
    """One line a bin: its range, its count and a bar; a run of empty bins is one line."""
    edges, counts = histogram["edges"], histogram["counts"]
    top = max(counts) or 1
    lines, i = [], 0
    while i < len(counts):
        j = i + 1
        while not counts[i] and j < len(counts) and not counts[j]:
            j += 1
        lines.append((_bin(edges[i], edges[j], integers, j == len(counts)), counts[i]))
        i = j
    width = max(len(label) for label, _ in lines)
    digits = len(f"{top:,}")
    for label, n in lines:
        bar = "█" * round(n / top * BAR) or ("▏" if n else "")
        out.print(f"  {label:>{width}}  {n:>{digits},}  {bar}", markup=False)


def _bin(lo: float, hi: float, integers: bool, last: bool) -> str:
    """A bin's range: the integers in it (a length histogram's range ends past its largest value),
    else [lo, hi) (the last bin closed)."""
    if integers:
        first, end = math.ceil(lo), math.ceil(hi) - 1
        return str(first) if first >= end else f"{first}-{end}"
    return f"[{lo:.3g}, {hi:.3g}{']' if last else ')'}"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"

"""`dsinspect runs [DIR]`: the run records in DIR (default CATALOG/runs), or one record in detail."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from dsinspect.cli.output import catalog_from, catalog_option, emit_json, err, fail, json_option, out

if TYPE_CHECKING:
    from rich.table import Table

    from dsinspect.inspect.runs import RunGrid, RunSummary
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["runs", "run_path", "COMMANDS"]

GAPS_SHOWN = 20  # gap ranges printed for one run; --json lists them all


@click.command()
@click.argument("directory", metavar="[DIR]", required=False)
@click.option("--steps", metavar="A:B", default=None, help="One run: draw the grid over these steps only.")
@click.option("--columns", type=click.IntRange(1, 400), default=60, show_default=True,
              help="One run: step columns of the grid (a long run is bucketed: a bucket with any gap is a gap).")
@catalog_option
@json_option
@click.pass_context
def runs(ctx: click.Context, directory: str | None, steps: str | None, columns: int, catalog_url: str | None,
         as_json: bool) -> None:
    """Run records: sources, world sizes, segments, steps covered, superseded lines, gaps and the
    time ranks waited for data per step.

    DIR is a folder of run records (default: CATALOG/runs) or one run record (a path, or its name in
    CATALOG/runs); one record is shown in detail: its segments, its gaps and a grid of steps × ranks.
    A record that cannot be read is listed with its reason, and the command exits 1."""
    from dsinspect.inspect.runs import default_runs_dir, is_run_record, list_runs, open_run, path_exists
    from dsinspect.loaders.audit.logcheck import parse_steps

    if directory:  # the catalog is opened only to look a bare name up in it
        where = directory if "/" in directory or path_exists(directory) else run_path(
            catalog_from(ctx, catalog_url), directory)
    else:
        catalog = catalog_from(ctx, catalog_url)
        catalog.check_exists()
        where = default_runs_dir(catalog.url)
    wanted = parse_steps(steps)  # a malformed range: one line before anything is read
    if is_run_record(where):
        view = open_run(where)
        summary, grid = view.summary(), view.grid(wanted, columns=columns)
        if as_json:
            return emit_json({**summary.to_json(), "grid": grid.to_json()})
        return _print_run(summary, grid)
    found, broken = list_runs(where) if directory or path_exists(where) else ([], [])  # before any run: none
    if as_json:
        emit_json({"directory": where, "runs": [s.to_json() for s in found],
                   "broken": [{"name": n, "reason": r} for n, r in broken]})
    elif found:
        out.print(_runs_table(where, found))
    elif not broken:
        out.print(f"no run records in {where}", markup=False, soft_wrap=True)
    for name, reason in broken:
        err.print(f"dsinspect: runs: broken: {name}: {reason}", markup=False, soft_wrap=True)
    if broken:
        fail(f"{where}: {len(broken)} run record{'s' * (len(broken) > 1)} cannot be read", 1)


def run_path(catalog: Catalog, given: str) -> str:
    """`given` as typed when it exists; else the run record it names in `<catalog>/runs`."""
    from dsinspect.inspect.runs import run_location

    return run_location(catalog.url, given)


def _runs_table(where: str, found: list[RunSummary]) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"run records in {where}"), title_justify="left")
    for col in ("run", "sources", "ranks", "segments", "steps", "lines", "superseded", "gaps", "wait/step"):
        table.add_column(col, justify="right" if col in ("lines", "superseded", "wait/step") else "left")
    for s in found:
        abandoned = sum(not seg.kept for seg in s.segments)
        table.add_row(Text(s.name), Text(", ".join(s.sources)), _world_sizes(s.world_sizes),
                      f"{len(s.segments)}" + (f" ({abandoned} abandoned)" if abandoned else ""), _steps(s.steps),
                      f"{s.lines:,}", f"{s.superseded:,}", _gaps_cell(s), _wait(s.wait_per_step))
    return table


def _print_run(s: RunSummary, grid: RunGrid) -> None:
    from rich.table import Table
    from rich.text import Text

    out.print(Text.assemble(("run ", "bold"), (s.name, "bold"), f"  {s.path}"))
    out.print(Text(f"sources {', '.join(s.sources) or '-'} · ranks {_world_sizes(s.world_sizes)} · steps "
                   f"{_steps(s.steps)} · {s.lines:,} kept lines · {s.superseded:,} superseded · wait/step "
                   f"{_wait(s.wait_per_step)}"))
    table = Table(title="segments (by start time)", title_justify="left")
    for col in ("segment", "parent", "start", "world", "batch", "lines", "steps", "kept", "started", "wait/step"):
        table.add_column(col, justify="right" if col in ("start", "world", "batch", "lines", "wait/step") else "left")
    for seg in s.segments:
        table.add_row(seg.id, seg.parent or "-", f"{seg.start:,}", str(seg.world_size), str(seg.batch_size),
                      f"{seg.lines:,}", _steps(seg.steps), "yes" if seg.kept else Text("abandoned", "yellow"),
                      seg.started or "-", _wait(seg.wait_per_step))
    out.print(table)
    if s.gaps:
        out.print(Text(f"gaps: {len(s.gaps)} range(s), {s.missing:,} (step, rank) pair(s) with no kept line",
                       "bold red"))
        for gap in s.gaps[:GAPS_SHOWN]:
            out.print(Text(f"  {gap}"))
        if len(s.gaps) > GAPS_SHOWN:
            out.print(Text(f"  … {len(s.gaps) - GAPS_SHOWN} more (--json lists them all)"))
    else:
        out.print(Text("gaps: none", "green"))
    _print_grid(grid)


def _print_grid(grid: RunGrid) -> None:
    from rich.text import Text

    from dsinspect.inspect.runs import GLYPHS

    if not grid.columns:
        out.print(Text("no step of the range asked for is in this run", "dim"))
        return
    first, last = grid.columns[0][0], grid.columns[-1][1]
    per = f"{grid.bucket:,} steps per column" if grid.bucket > 1 else "one step per column"
    out.print(Text(f"steps {first:,}..{last:,} × ranks ({per}):  " + "  ".join(
        f"{GLYPHS[k]} {k}" for k in ("kept", "gap", "superseded")), "dim"))
    label = max(len(f"rank {r}") for r in grid.ranks)
    styles = {"kept": "green", "gap": "bold red", "superseded": "yellow", "diverged": "bold red", "none": ""}
    for rank, row in zip(grid.ranks, grid.cells):
        line = Text(f"rank {rank}".rjust(label) + " │")
        for cell in row:
            line.append(GLYPHS[cell], styles[cell])
        out.print(line, no_wrap=True, overflow="ignore", crop=False)
    if grid.all_ranks > len(grid.ranks):
        out.print(Text(f"(ranks {grid.ranks[0]}..{grid.ranks[-1]} of {grid.all_ranks}; --json has the grid)", "dim"))


def _world_sizes(sizes: list[int]) -> str:
    collapsed: list[int] = []
    for n in sizes:
        if not collapsed or collapsed[-1] != n:
            collapsed.append(n)
    return " → ".join(map(str, collapsed)) or "-"


def _steps(steps: Any) -> str:
    return f"{steps[0]:,}..{steps[1]:,}" if steps else "-"


def _gaps_cell(s: RunSummary) -> Any:
    from rich.text import Text

    if not s.gaps:
        return Text("none", "green")
    more = f" (+{len(s.gaps) - 1} more)" if len(s.gaps) > 1 else ""
    return Text(f"{s.missing:,}: {s.gaps[0]}{more}", "bold red")


def _wait(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


COMMANDS = [runs]

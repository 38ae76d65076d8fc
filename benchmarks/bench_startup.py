"""Start-up time of the package and the CLI, the working tree against a "before" revision. Not a test.

Each measurement is a fresh process (`python -c "import dsinspect"`, `python -m dsinspect --help`, ...),
timed from spawn to exit (wall) and by the CPU time it used (user + system, which load on a shared
machine inflates less); the median of `--runs` is kept. The two trees run alternately, so load that
comes and goes on a shared machine falls on both. The before revision is checked out with `git worktree
add` into a temp directory and put first on PYTHONPATH (the commands run from a neutral directory, so
an editable install of the working tree does not shadow it; each run checks which tree it imported).
`dsinspect ls` reads the bundled sample catalog of its own tree ($DSINSPECT_CATALOG is unset). `dsinspect
replay --spec runs/exp1 ...` answers from a run record the working tree writes first (README's "Reading for
training" loader, rank 3 of 4 over demo-text@v1); a tree that cannot run a command (an old revision without
run records) shows n/a for it.

Prints the medians side by side with their ratios (now / before: < 1 is faster) and the load average
before and after; --json writes benchmarks/results/startup-<date>[-<label>].json.

Run: python benchmarks/bench_startup.py                  (~3 min: 2 trees x 7 commands x 11 runs)
     python benchmarks/bench_startup.py --runs 21 --json
     python benchmarks/bench_startup.py --before HEAD~3
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from result_file import new_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

# what is measured: a label and the arguments after `python`
COMMANDS = [
    ("python -c pass (floor)", ["-c", "pass"]),
    ("import dsinspect", ["-c", "import dsinspect"]),
    ("import dsinspect.loaders", ["-c", "import dsinspect.loaders"]),
    ("the reader: Catalog, Loader", ["-c", "from dsinspect.loaders import Catalog, Loader"]),
    ("dsinspect --help", ["-m", "dsinspect", "--help"]),
    ("dsinspect ls", ["-m", "dsinspect", "ls"]),
    ("dsinspect replay --spec RUN", ["-m", "dsinspect", "replay", "--spec", "runs/exp1", "--step", "3", "--rank", "3"]),
]

# the run record `dsinspect replay --spec runs/exp1` reads, as the README's example writes it
RUN_RECORD = """
import dsinspect
from dsinspect.loaders import Loader, RunSpec

catalog = dsinspect.open_catalog()
spec = RunSpec.create(catalog, "demo-text@v1", seed=0, batch_size=8, world_size=4, shuffle="global")
with Loader(spec, rank=3, catalog=catalog, record_dir="runs/exp1") as loader:
    for batch in loader:
        pass
"""


def main() -> None:
    args = _parse()
    rev = _git("rev-parse", "--short", args.before)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        before_tree = Path(tmp) / "before"
        _git("worktree", "add", "--detach", "--quiet", str(before_tree), rev)
        try:
            trees = {"before": before_tree, "now": ROOT}
            for name, tree in trees.items():
                _check_imports_from(tree, tmp, name)
            subprocess.run([sys.executable, "-c", RUN_RECORD], cwd=tmp, env=_env(ROOT, tmp), check=True)
            runnable = _runnable(trees, tmp)
            load_before = os.getloadavg()
            medians = _measure(trees, runnable, args.runs, cwd=tmp)
            load_after = os.getloadavg()
        finally:
            _git("worktree", "remove", "--force", str(before_tree))
    record = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "python": sys.version.split()[0], "cpus": os.cpu_count(), "runs": args.runs,
        "before": rev, "now": _git("rev-parse", "--short", "HEAD") + ("+dirty" if _dirty() else ""),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "median_seconds": medians,  # {command: {"before"|"now": {"wall": s, "cpu": s}}}
    }
    _print(record)
    if args.json:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = new_result("startup", "-" + args.label if args.label else "")
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="4d5688a", help="the revision to compare with (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=11, help="fresh processes per command and tree (median kept)")
    parser.add_argument("--json", action="store_true", help="also write benchmarks/results/startup-<date>.json")
    parser.add_argument("--label", default="", help="with --json: write startup-<date>-<label>.json")
    return parser.parse_args()


def _runnable(trees: dict[str, Path], cwd: str) -> set[tuple[str, str]]:
    """(command, tree) pairs that exit 0 (each run once; this also warms the shard and bytecode caches)."""
    ok = set()
    for label, argv in COMMANDS:
        for name, tree in trees.items():
            done = subprocess.run([sys.executable, *argv], cwd=cwd, env=_env(tree, cwd), capture_output=True, text=True)
            if done.returncode == 0:
                ok.add((label, name))
            else:
                last = (done.stderr.strip().splitlines() or ["?"])[-1]
                print(f"bench_startup: {label!r} fails in the {name} tree (n/a): {last}", file=sys.stderr)
    return ok


def _measure(trees: dict[str, Path], runnable: set[tuple[str, str]], runs: int,
             cwd: str) -> dict[str, dict[str, dict[str, float] | None]]:
    """{command: {tree: {"wall": median s, "cpu": median s} or None}}, the trees taking turns run by run."""
    times: dict[str, dict[str, list[tuple[float, float]]]] = {label: {name: [] for name in trees}
                                                               for label, _ in COMMANDS}
    for _ in range(runs):
        for label, argv in COMMANDS:
            for name, tree in trees.items():
                if (label, name) in runnable:
                    times[label][name].append(_run(argv, tree, cwd))
    return {label: {name: {"wall": round(statistics.median(w for w, _ in t), 4),
                           "cpu": round(statistics.median(c for _, c in t), 4)} if t else None
                    for name, t in by_tree.items()}
            for label, by_tree in times.items()}


def _run(argv: list[str], tree: Path, cwd: str) -> tuple[float, float]:
    """(wall, cpu) seconds of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=cwd, env=_env(tree, cwd), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _env(tree: Path, cwd: str) -> dict[str, str]:
    """The tree first on the path, and bytecode cached (under `cwd`, not in the trees) even where
    PYTHONDONTWRITEBYTECODE is set, so the timed runs are warm as on any install: without it every
    run would compile the package's sources again."""
    drop = ("DSINSPECT_CATALOG", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(tree)
    env["PYTHONPYCACHEPREFIX"] = str(Path(cwd) / "pycache")
    return env


def _check_imports_from(tree: Path, cwd: str, name: str) -> None:
    """The package a run imports is the tree's own, not an installed copy."""
    found = subprocess.run([sys.executable, "-c", "import dsinspect; print(dsinspect.__file__)"], cwd=cwd,
                           env=_env(tree, cwd), capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"bench_startup: the {name} tree imports dsinspect from {found}, not from {tree}")


def _print(record: dict) -> None:
    print(f"start-up, median of {record['runs']} fresh processes (seconds); before {record['before']}, "
          f"now {record['now']}; python {record['python']}, {record['cpus']} CPUs")
    print(f"{'':28} {'wall: before':>12} {'now':>7} {'ratio':>6}   {'cpu: before':>11} {'now':>7} {'ratio':>6}")
    for label, m in record["median_seconds"].items():
        b, n = m["before"], m["now"]
        print(f"{label:28} {_cell(b, 'wall', 12)} {_cell(n, 'wall', 7)} {_ratio(b, n, 'wall')}   "
              f"{_cell(b, 'cpu', 11)} {_cell(n, 'cpu', 7)} {_ratio(b, n, 'cpu')}")
    la, lb = record["load_average_before"], record["load_average_after"]
    print(f"load average (1, 5, 15 min): {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} before, "
          f"{lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f} after")


def _cell(m: dict | None, kind: str, width: int) -> str:
    return f"{m[kind]:{width}.3f}" if m else f"{'n/a':>{width}}"


def _ratio(b: dict | None, n: dict | None, kind: str) -> str:
    return f"{n[kind] / b[kind]:5.2f}x" if b and n else f"{'':6}"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def _dirty() -> bool:
    return bool(_git("status", "--porcelain", "--untracked-files=no"))


if __name__ == "__main__":
    main()

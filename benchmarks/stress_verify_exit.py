"""Stress: `dsinspect verify` run many times as a fresh process; every run must exit 0, cleanly.

    python benchmarks/stress_verify_exit.py [--runs 1000] [--jobs 2] [--address demo-images@v2 ...]
                                            [--engine inline|pool] [--tree DIR] [--busy N] [--direct]

Issue #14: about 1.4% of `dsinspect verify` runs aborted at exit (`terminate called without an
active exception`, exit 134) after printing a complete, passing report. Root cause: verify handed
Arrow the shard as a Python `bytes` object (`pa.BufferReader(bytes)`, a PyBuffer); Arrow's CPU pool
threads decode row groups and may drop the last reference to that buffer after `read_row_group`
returned. Releasing a PyBuffer takes the GIL; a thread that asks for it while the interpreter
finalizes is ended by CPython with pthread_exit, whose forced unwinding through Arrow's noexcept
C++ frames calls std::terminate. Now the shard's bytes live in Arrow's own memory pool
(dsinspect/loaders/store/verify.py `_read_hashing`), so no Arrow thread ever needs the GIL.

Runs go round-robin over the addresses; `--jobs` run at once. The race needs a descheduled Arrow
worker: on this 2-core machine the old code aborted 2 times in 549 runs while ~6 engineers' test
suites held the load at 7-8, and 0 times in 2,900 runs at load 2-4 (1,000 CLI; 400 CLI and 1,500
`--direct` with `--busy 2`), so a clean stress run alone proves little; tests/test_verify_exit.py pins
the condition instead. `--busy N` adds N spinning processes for the duration. `--tree
DIR` runs another checkout (PYTHONPATH), e.g. the old code in a `git worktree`, for the rate before
the fix. Prints the exit codes counted, the
first failures' stderr, and exits 1 if any run did not exit 0 with an empty stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# `--direct`: verify_version and exit, no report drawn: the shortest gap between the last row group
# read and interpreter shutdown, the window the abort needs (both aborts seen here came this way)
DIRECT = ("import sys, dsinspect; from dsinspect.loaders.store.verify import verify_version; "
          "sys.exit(0 if verify_version(dsinspect.open_catalog().resolve(sys.argv[1])).ok else 1)")


def run_once(address: str, engine: str, env: dict, cwd: str, direct: bool = False) -> tuple[int, str]:
    argv = ([sys.executable, "-c", DIRECT, address] if direct
            else [sys.executable, "-m", "dsinspect", "verify", address, "--engine", engine])
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    return done.returncode, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--address", action="append", help="default: demo-images@v2 (repeat for several)")
    parser.add_argument("--engine", default="inline", choices=["inline", "pool"])
    parser.add_argument("--tree", default=str(REPO), help="the checkout to run (default: this one)")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes to run meanwhile (load)")
    parser.add_argument("--direct", action="store_true", help="verify_version in a bare process, not the CLI")
    args = parser.parse_args()
    addresses = args.address or ["demo-images@v2"]
    tree = str(Path(args.tree).resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("DSINSPECT_CATALOG", "DSINSPECT_INJECT_FAULTS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    env["PYTHONFAULTHANDLER"] = "1"  # a crash shows where each thread was
    env["DSINSPECT_CATALOG"] = str(Path(tree) / "sample_data")
    start = time.perf_counter()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        codes, failures = _run_all(args, addresses, env, tree)
    finally:
        for p in spinners:  # only the processes started here
            p.kill()
            p.wait()
    seconds = time.perf_counter() - start
    print(f"{args.runs} runs of verify {' '.join(addresses)} --engine {args.engine} ({tree}) in {seconds:.0f} s "
          f"with {args.jobs} at once, {args.busy} busy: exit codes {dict(sorted(codes.items()))}, "
          f"{len(failures)} not clean ({100 * len(failures) / max(args.runs, 1):.2f}%)")
    for text in failures[:3]:
        print("---\n" + text[-2000:])
    return 1 if failures else 0


def _run_all(args, addresses: list[str], env: dict, tree: str) -> tuple[Counter, list[str]]:
    codes: Counter = Counter()
    failures: list[str] = []
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_once, addresses[i % len(addresses)], args.engine, env, tree, args.direct)
                   for i in range(args.runs)]
        for i, future in enumerate(futures, 1):
            code, stderr = future.result()
            codes[code] += 1
            if code != 0 or stderr.strip():
                failures.append(f"run {i} ({addresses[(i - 1) % len(addresses)]}): exit {code}\n{stderr.strip()}")
            if i % 50 == 0:
                print(f"{i}/{args.runs} runs, exit codes {dict(codes)}", flush=True)
    return codes, failures


if __name__ == "__main__":
    sys.exit(main())

"""Where a benchmark writes its figures: `benchmarks/results/<name>-<date><tail>.json`, or with `-2`,
`-3`, ... after it when that file is there already. A second run on the same day never overwrites
the first, whose figures the notes in benchmarks/README.md may cite by its name."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def new_result(name: str, tail: str = "") -> Path:
    RESULTS.mkdir(exist_ok=True)
    stem = f"{name}-{dt.date.today().isoformat()}{tail}"
    for n in itertools.count(1):
        path = RESULTS / (f"{stem}.json" if n == 1 else f"{stem}-{n}.json")
        if not path.exists():
            return path
    raise AssertionError("unreachable")

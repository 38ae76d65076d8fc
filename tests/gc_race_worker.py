"""One process beside others in one catalog (tests/test_gc_race.py): ingests in a loop, or gc with no grace.

    python tests/gc_race_worker.py ingest CATALOG DATASET ME ROUNDS SRC_DIR OUT.json
    python tests/gc_race_worker.py gc CATALOG STOP_FILE OUT.json

`ingest` writes a fresh JSONL source of its own each round and ingests it (inline, 3 parts), noting
each version id it published, or the error that ended a round; `gc` removes every garbage item with
no grace, over and over, until STOP_FILE exists.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dsinspect.errors import DsinspectError
from dsinspect.loaders.ingest import run_ingest
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.gc import find_garbage, remove_garbage


def ingest(url: str, dataset: str, me: str, rounds: int, src: Path) -> dict:
    catalog, published, errors = Catalog(url), [], []
    for r in range(rounds):
        directory = src / f"{me}-{r}"
        directory.mkdir(parents=True)
        for f in range(3):
            rows = (json.dumps({"id": i, "text": f"{me} round {r} file {f} row {i}"}) for i in range(40))
            (directory / f"part-{f}.jsonl").write_text("\n".join(rows) + "\n")
        try:
            published.append(run_ingest(catalog, str(directory), dataset, engine="inline", key="id").version.id)
        except DsinspectError as e:
            errors.append(f"round {r}: {type(e).__name__}: {e}")
    return {"published": published, "errors": errors}


def gc(url: str, stop: Path) -> dict:
    catalog, rounds = Catalog(url), 0
    while not stop.exists():
        remove_garbage(catalog, find_garbage(catalog, grace_hours=0))
        rounds += 1
    return {"rounds": rounds}


if __name__ == "__main__":
    role, out = sys.argv[1], Path(sys.argv[-1])
    if role == "ingest":
        result = ingest(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), Path(sys.argv[6]))
    else:
        result = gc(sys.argv[2], Path(sys.argv[3]))
    out.write_text(json.dumps(result))

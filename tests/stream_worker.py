"""A process appending to a stream, or following one (tests/test_stream.py). No pytest in here.

argv: catalog URL, "write" WRITER APPENDS ROWS | "follow" STOP OUT.json
- write: APPENDS commits of ROWS rollouts each, ids `WRITER-APPEND-ROW`; after each commit returns, one
  line `COMMIT_NUMBER IDS_JSON` on stdout, flushed (what the writer knows is committed: a kill between a
  commit and its line loses only the line).
- follow: reads commits in order as they appear until the file STOP exists (then once more); each
  commit's rows read back from its shards at once (a commit is whole when it is seen); writes
  [(seq, ids)] to OUT.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dsinspect.loaders import Catalog, Field
from dsinspect.loaders.stream import open_stream

FIELDS = [Field("rollout_id", pa.string(), "scalar", False), Field("response", pa.list_(pa.int32()), "tokens", False),
          Field("reward", pa.float32(), "scalar", False)]


def main() -> None:
    catalog = Catalog(sys.argv[1])
    stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    if sys.argv[2] == "write":
        name, appends, rows = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        for a in range(appends):
            ids = [f"{name}-{a}-{r}" for r in range(rows)]
            commit = stream.append([{"rollout_id": i, "response": list(range(r % 7 + 1)), "reward": 1.0}
                                    for r, i in enumerate(ids)], writer=name)
            print(commit.seq, json.dumps(ids), flush=True)
        return
    stop, out = Path(sys.argv[3]), sys.argv[4]
    seen, seq, last = [], 0, False
    while not last:
        last = stop.exists()
        for commit in stream.commits(seq):
            ids = []
            for shard in commit.shards:  # every shard of a visible commit is there, whole
                with catalog.fs.open(catalog.layout.shard("rollouts", shard.sha256), "rb") as f:
                    ids += pq.read_table(f, columns=["rollout_id"]).column(0).to_pylist()
            seen.append((commit.seq, ids))
            seq = commit.seq + 1
        time.sleep(0.01)
    with open(out, "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()

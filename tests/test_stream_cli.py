"""`dsinspect append FILE NAME` and `dsinspect snapshot NAME` (cli/stream_cmd.py): JSON Lines and Parquet
rows appended to a stream as commits, a prefix snapshotted as a version; rows that do not fit the
stream's fields, a missing stream or a snapshot past the head are one line, exit 2, and commit nothing."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from stream_worker import FIELDS

from dsinspect.loaders import Catalog
from dsinspect.loaders.store.gc import find_garbage
from dsinspect.loaders.stream import open_stream


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_append_files_as_commits_and_snapshot_a_prefix(tmp_path, cli):
    catalog = Catalog(str(tmp_path / "catalog"))
    open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    write_jsonl(tmp_path / "a.jsonl", [{"rollout_id": f"a{i}", "response": [i, 2], "reward": 0.5} for i in range(3)])
    pq.write_table(pa.table({"reward": pa.array([1.0, 0.0], pa.float32()), "rollout_id": ["b0", "b1"],
                             "response": pa.array([[7], [8, 9]], pa.list_(pa.int32()))}), tmp_path / "b.parquet")
    code, out, err = cli("append", tmp_path / "a.jsonl", "rollouts", "--writer", "sampler-1", "--json",
                         "--catalog", catalog.url)
    assert code == 0, err
    assert {k: json.loads(out)[k] for k in ("seq", "rows", "writer")} == {"seq": 0, "rows": 3, "writer": "sampler-1"}
    code, out, err = cli("append", tmp_path / "b.parquet", "rollouts", "--catalog", catalog.url)
    assert code == 0 and "commit 1 (2 rows)" in out, err
    code, out, err = cli("snapshot", "rollouts", "--until", "1", "--tag", "first", "--json", "--catalog", catalog.url)
    assert code == 0, err
    first = catalog.resolve("rollouts@first")
    assert json.loads(out)["id"] == first.id and [first.row(i)["rollout_id"] for i in range(3)] == ["a0", "a1", "a2"]
    code, out, err = cli("snapshot", "rollouts", "--json", "--catalog", catalog.url)
    assert code == 0 and json.loads(out)["rows"] == 5, err
    assert catalog.resolve("rollouts").row(4) == {"rollout_id": "b1", "response": [8, 9], "reward": 0.0}


def test_what_does_not_fit_is_one_line_and_commits_nothing(tmp_path, cli):
    catalog = Catalog(str(tmp_path / "catalog"))
    write_jsonl(tmp_path / "a.jsonl", [{"rollout_id": "a", "response": [1], "reward": 1.0}])
    code, _, err = cli("append", tmp_path / "a.jsonl", "rollouts", "--catalog", catalog.url)
    assert code == 2 and "has no stream" in err and len(err.strip().splitlines()) == 1, err
    stream = open_stream(catalog, "rollouts", FIELDS, key="rollout_id")
    write_jsonl(tmp_path / "extra.jsonl", [{"rollout_id": "a", "response": [1], "reward": 1.0, "policy": 3}])
    write_jsonl(tmp_path / "wrong.jsonl", [{"rollout_id": "a", "response": "not tokens", "reward": 1.0}])
    pq.write_table(pa.table({"rollout_id": ["a"], "reward": [1.0]}), tmp_path / "short.parquet")
    for name in ("extra.jsonl", "wrong.jsonl", "short.parquet", "missing.jsonl"):
        code, _, err = cli("append", tmp_path / name, "rollouts", "--catalog", catalog.url)
        assert code == 2 and name in err and len(err.strip().splitlines()) == 1, (name, err)
    assert stream.head() == 0 and find_garbage(catalog, grace_hours=0) == []  # nothing half-written stays
    code, _, err = cli("snapshot", "rollouts", "--catalog", catalog.url)
    assert code == 2 and "has no commit to snapshot" in err, err
    code, _, err = cli("append", tmp_path / "a.jsonl", "rollouts", "--catalog", catalog.url)
    assert code == 0, err
    code, _, err = cli("snapshot", "rollouts", "--until", "2", "--catalog", catalog.url)
    assert code == 2 and "has 1 commits, not 2" in err, err

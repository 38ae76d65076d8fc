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
from dsinspect.loaders.stream import open_stream, snapshot


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


def trl_rows(start: int, n: int) -> list[dict]:
    """TRL-shaped rollouts: chat messages as a list of structs, token ids, both log-probs (a gap at 2)."""
    return [{"rollout_id": i, "prompt": [{"role": "user", "content": f"<b>{i}</b> [bold]x[/]"}],
             "prompt_ids": [1, 2, 3], "completion_ids": [4, 5, 0], "sampling_per_token_logps": [-0.1, -0.2, -0.3],
             "old_per_token_logps": [-0.1, -0.2, -0.3 - (i % 2) * 2.0], "advantage": 0.5 - i % 2, "step": 3}
            for i in range(start, start + n)]


def test_append_create_makes_the_stream_from_the_file_and_nested_messages_arrive_as_json(tmp_path, cli):
    from dsinspect.inspect.rollout_dataset import check_version, rollout_columns

    catalog = Catalog(str(tmp_path / "catalog"))
    write_jsonl(tmp_path / "a.jsonl", trl_rows(0, 4))
    code, _, err = cli("append", tmp_path / "a.jsonl", "trl", "--catalog", catalog.url)
    assert code == 2 and "has no stream: add --create" in err and err.count("\n") == 1
    code, _, err = cli("append", tmp_path / "a.jsonl", "trl", "--key", "rollout_id", "--catalog", catalog.url)
    assert code == 2 and "describe a new stream: add --create" in err
    code, _, err = cli("append", tmp_path / "a.jsonl", "trl", "--create", "--key", "rollout_id",
                       "--meaning", "step=policy_version", "--catalog", catalog.url)
    assert code == 0, err
    stream = open_stream(catalog, "trl")
    fields = {f.name: f for f in stream.spec.fields}
    assert stream.spec.key == "rollout_id" and fields["prompt"].role.value == "json"
    assert {n: f.options.get("rollout") for n, f in fields.items()} == {
        "rollout_id": None, "prompt": "prompt_text", "prompt_ids": "prompt_tokens", "completion_ids": "response_tokens",
        "sampling_per_token_logps": "sampler_logprobs", "old_per_token_logps": "learner_logprobs",
        "advantage": "advantage", "step": "policy_version"}
    nested = pa.Table.from_pylist(trl_rows(4, 2))  # Parquet with the messages still nested
    assert pa.types.is_list(nested.schema.field("prompt").type)
    pq.write_table(nested, tmp_path / "b.parquet")
    code, _, err = cli("append", tmp_path / "b.parquet", "trl", "--catalog", catalog.url)
    assert code == 0, err
    version = snapshot(stream)
    assert version.row(5)["prompt"] == '[{"content":"<b>5</b> [bold]x[/]","role":"user"}]'
    assert version.row(1)["prompt"] == '[{"content":"<b>1</b> [bold]x[/]","role":"user"}]'  # JSONL alike
    assert rollout_columns(version.fields) is not None
    (gap,) = [f for f in check_version(version).findings if f.code == "rollout-logprob-gap"]
    assert gap.rows == (1, 3, 5) and gap.positions == ((2,), (2,), (2,))


def test_a_stream_of_rollouts_is_created_with_its_meanings_declared(tmp_path):
    from dsinspect.loaders import Field

    catalog = Catalog(str(tmp_path / "catalog"))
    fields = [Field("rollout_id", pa.string(), "scalar"), Field("completion_ids", pa.list_(pa.int32()), "tokens"),
              Field("reward", pa.float32(), "scalar")]
    stream = open_stream(catalog, "rollouts", fields, key="rollout_id")
    assert {f.name: f.options.get("rollout") for f in stream.spec.fields} == {
        "rollout_id": None, "completion_ids": "response_tokens", "reward": "reward"}
    assert open_stream(catalog, "rollouts", fields, key="rollout_id").spec == stream.spec  # the same fields again
    plain = open_stream(catalog, "plain", FIELDS, key="rollout_id")  # no response column: not rollouts
    assert all("rollout" not in f.options for f in plain.spec.fields)

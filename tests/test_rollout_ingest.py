"""Rollouts dumped the way verl, TRL and OpenRLHF write them, through `dsinspect ingest` and through a stream
(`dsinspect append`, `dsinspect snapshot`): each column's meaning recorded in its field's options, each
injected RL data bug found by `dsinspect stats` at exactly its rows and token positions, none on the clean
dumps; `--meaning` at ingest; chat messages (lists of structs) ingested as JSON text."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_inprocess import run_cli
from ingest_helpers import ingest_with_cli
from rollout_dumps import ALL_CODES, DUMPS, Dump, found, verl_batch

from dsinspect.loaders import Catalog
from dsinspect.loaders.format.rollout_fields import rollout_columns
from dsinspect.loaders.stream import open_stream

pytest.importorskip("duckdb")


def rollout_stats(catalog: Catalog, address: str, *flags: str) -> dict:
    done = run_cli("--catalog", catalog.url, "stats", address, "--json", *flags)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["rollouts"]


def ingest(catalog: Catalog, dump: Dump, directory, name: str | None = None):
    paths = dump.write(directory)
    flags = [f for field, meaning in dump.meanings.items() for f in ("--meaning", f"{field}={meaning}")]
    source = paths[0] if len(paths) == 1 else directory
    return ingest_with_cli(catalog.url, source, name or dump.name, *flags, *(["--key", dump.key] if dump.key else []))


@pytest.mark.parametrize("bugs", [True, False], ids=["injected", "clean"])
@pytest.mark.parametrize("make", DUMPS, ids=lambda make: make.__name__)
def test_an_ingested_dump_declares_its_meanings_and_each_bug_is_found_where_injected(make, bugs, tmp_path):
    dump, catalog = make(bugs), Catalog(str(tmp_path / "catalog"))
    version = ingest(catalog, dump, tmp_path / "dump")
    assert {f.name: f.options["rollout"] for f in version.fields if f.options.get("rollout")} == dump.declared
    report = rollout_stats(catalog, dump.name, *dump.check_flags())
    assert found(report) == dump.injected
    assert set(report["skipped"]) == set(ALL_CODES) - dump.checked
    if dump.key:  # rows named by the dataset's key too
        keys = pq.read_table(tmp_path / "dump" / dump.files[0][0], columns=[dump.key]).column(0).to_pylist()
        assert all(f["keys"] == [keys[r] for r in f["rows"]] for f in report["findings"])
        assert report["key"] == dump.key and keys[0] != 0


@pytest.mark.parametrize("bugs", [True, False], ids=["injected", "clean"])
@pytest.mark.parametrize("make", DUMPS, ids=lambda make: make.__name__)
def test_a_dump_appended_to_a_stream_is_checked_alike(make, bugs, tmp_path):
    """The stream is created with the fields ingest recorded (meanings included); each dump file is one
    commit; the snapshot of the commits has the same findings."""
    dump, catalog = make(bugs), Catalog(str(tmp_path / "catalog"))
    fields = ingest(catalog, dump, tmp_path / "first", f"{dump.name}-first").fields
    open_stream(catalog, dump.name, fields, key=dump.key)
    for path in dump.write(tmp_path / "dump"):
        done = run_cli("--catalog", catalog.url, "append", path, dump.name, "--writer", "sampler-0")
        assert done.returncode == 0, done.stderr
    done = run_cli("--catalog", catalog.url, "snapshot", dump.name)
    assert done.returncode == 0, done.stderr
    report = rollout_stats(catalog, dump.name, *dump.check_flags())
    assert found(report) == dump.injected
    assert set(report["skipped"]) == set(ALL_CODES) - dump.checked


def test_meanings_given_at_ingest_are_recorded_and_unset_ones_stay_unset(tmp_path):
    catalog = Catalog(str(tmp_path / "catalog"))
    dump = verl_batch()
    dump.write(tmp_path / "dump")
    version = ingest_with_cli(catalog.url, tmp_path / "dump", "verl", "--meaning", "uid=none",
                              "--meaning", "ref_log_prob=learner_logprobs", "--meaning", "old_log_probs=none")
    options = {f.name: f.options.get("rollout", "-") for f in version.fields}
    assert options["uid"] is None and options["old_log_probs"] is None  # declared: no meaning
    assert options["ref_log_prob"] == "learner_logprobs" and options["attention_mask"] == "-"
    columns = rollout_columns(version.fields)
    assert columns.get("group") is None and columns.get("learner_logprobs") == "ref_log_prob"
    report = rollout_stats(catalog, "verl", *dump.check_flags())
    assert report["skipped"]["rollout-zero-advantage-group"] == "no group column"
    done = run_cli("--catalog", catalog.url, "ingest", tmp_path / "dump", "verl", "--json")
    assert done.returncode == 0, done.stderr  # a new version, inferred afresh: uid is the group again
    assert rollout_columns(Catalog(catalog.url).resolve("verl").fields).get("group") == "uid"


@pytest.mark.parametrize("flag, said", [
    ("nope=reward", "--meaning nope=reward: no field 'nope' in the source (fields: prompts, "),
    ("uid=rewardz", "--meaning uid=rewardz: no meaning 'rewardz' (meanings: prompt_tokens, "),
    ("uid=reward", "--meaning uid=reward: field 'uid' in the source is string, which cannot hold reward"),
    ("uid", "--meaning 'uid': expected FIELD=MEANING (or FIELD=none)"),
])
def test_a_meaning_that_does_not_fit_is_one_line_and_nothing_is_written(flag, said, tmp_path):
    catalog = tmp_path / "catalog"
    verl_batch().write(tmp_path / "dump")
    done = run_cli("--catalog", catalog, "ingest", tmp_path / "dump", "verl", "--meaning", flag)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (catalog / "datasets" / "verl" / "versions").exists()


def test_a_tokenized_corpus_with_a_score_is_not_rollouts(tmp_path):
    """input_ids (every corpus's token column) and a score are not rollouts: nothing is declared, the
    version id is what it was before meanings were recorded."""
    rows = [{"id": i, "input_ids": [i, i + 1, 2], "score": i / 4, "text": f"doc {i}"} for i in range(8)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    version = ingest_with_cli(tmp_path / "catalog", tmp_path / "corpus.jsonl", "corpus")
    assert all("rollout" not in f.options for f in version.fields) and rollout_columns(version.fields) is None
    done = run_cli("--catalog", tmp_path / "catalog", "stats", "corpus", "--json")
    assert done.returncode == 0 and "rollouts" not in json.loads(done.stdout), done.stderr


MESSAGES = [
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2? ünï"}],
     "completion": [{"role": "assistant", "content": "4", "tool_calls": [{"name": "calc", "arguments": "2+2"}]}],
     "accuracy_reward": 1.0},
    {"prompt": [{"role": "user", "content": "3+3?"}], "completion": [{"role": "assistant", "content": "7"}],
     "accuracy_reward": 0.0},
    {"prompt": None, "completion": [], "accuracy_reward": 0.0},
]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_chat_messages_are_ingested_as_canonical_json_text(kind, tmp_path):
    """TRL's conversational prompt/completion (lists of {role, content} messages) fit no role: they are
    kept as JSON text (keys sorted, no spaces, UTF-8), the role `json`; the rollout meanings then read
    them as prompt and response text."""
    source = tmp_path / f"chat.{kind}"
    if kind == "jsonl":
        source.write_text("".join(json.dumps(r) + "\n" for r in MESSAGES))
    else:
        pq.write_table(pa.Table.from_pylist(MESSAGES), source)
    version = ingest_with_cli(tmp_path / "catalog", source, "chat")
    fields = {f.name: f for f in version.fields}
    assert (fields["prompt"].role.value, fields["prompt"].type) == ("json", pa.string())
    assert (fields["completion"].role.value, fields["completion"].type) == ("json", pa.string())
    assert version.row(0)["prompt"] == ('[{"content":"Be brief.","role":"system"},'
                                        '{"content":"2+2? ünï","role":"user"}]')
    assert json.loads(version.row(0)["completion"]) == [
        {"content": "4", "role": "assistant", "tool_calls": [{"arguments": "2+2", "name": "calc"}]}]
    assert json.loads(version.row(1)["completion"]) == [{"content": "7", "role": "assistant", "tool_calls": None}]
    assert version.row(2)["prompt"] is None and version.row(2)["completion"] == "[]"
    assert {f.name: f.options.get("rollout") for f in version.fields} == {
        "prompt": "prompt_text", "completion": "response_text", "accuracy_reward": "rewards"}


def test_a_nested_column_given_the_json_role_is_json_text(tmp_path):
    rows = [{"id": i, "episode": {"steps": [1, 2], "done": True}} for i in range(3)]
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    version = ingest_with_cli(tmp_path / "catalog", tmp_path / "e.jsonl", "e", "--role", "episode=json")
    assert version.row(1)["episode"] == '{"done":true,"steps":[1,2]}'

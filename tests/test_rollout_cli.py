"""`dsinspect stats` and `dsinspect query` on LLM rollouts (#34): on the sample catalog's demo stream every
injected finding at exactly its rows and token positions, named by row and by rollout_id; none on a
catalog holding only the clean groups; the per-rollout columns and the rollout_findings table of a query
against the rows read back; check options and meanings given on the command line; what does not fit is
one line and exit 2; --fail-on exits 1."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rollout_dumps import found
from stored_rows import stored_rows

from dsinspect.demo import rollouts as demo
from dsinspect.loaders import Catalog
from dsinspect.loaders.stream import open_stream

pytest.importorskip("duckdb")

V1_ROWS = 48   # demo-rollouts@v1: its first 6 commits of 8 rollouts


def stats(cli, catalog: Catalog, *args) -> dict:
    code, out, err = cli("--catalog", catalog.url, "stats", *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def injected():
    return demo.demo_rollouts().injected


def test_every_injected_finding_is_at_its_rows_and_positions_named_by_rollout_id(sample_copy, cli, injected):
    got = stats(cli, sample_copy, "demo-rollouts@v2")
    report = got["rollouts"]
    assert found(report) == injected and report["skipped"] == {}
    ids = stored_rows(sample_copy.resolve("demo-rollouts@v2")).column("rollout_id").to_pylist()
    assert report["key"] == "rollout_id"
    assert all(f["keys"] == [ids[r] for r in f["rows"]] for f in report["findings"])
    assert report["option_from"] == {"pad_id": "declared", "eos_ids": "declared", "special_ids": "declared",
                                     "max_response_tokens": "declared", "staleness_bound": "declared",
                                     "learner_version": "newest policy version"}
    assert set(report["meaning_from"].values()) == {"declared"}
    # v1 holds the first 48 rollouts: the findings among them, judged on their own
    early = stats(cli, sample_copy, "demo-rollouts@v1")["rollouts"]
    assert found(early) == {code: {r: p for r, p in rows.items() if r < V1_ROWS}
                            for code, rows in injected.items() if min(rows) < V1_ROWS}


def test_the_four_statistics_agree_with_the_rows(sample_copy, cli):
    table = stored_rows(sample_copy.resolve("demo-rollouts@v2"))
    statistics = stats(cli, sample_copy, "demo-rollouts@v2", "--bins", 5)["rollouts"]["statistics"]
    rows = table.to_pylist()
    by_version: dict[int, list[float]] = {}
    for row in rows:
        by_version.setdefault(row["policy_version"], []).append(row["reward"])
    assert [(v["policy_version"], v["rollouts"], v["rewarded"]) for v in statistics["reward_by_policy_version"]] == [
        (k, len(r), sum(map(math.isfinite, r))) for k, r in sorted(by_version.items())]
    lengths = [len(r["response_tokens"]) - r["response_tokens"][::-1].index(next(
        t for t in r["response_tokens"][::-1] if t != demo.PAD)) for r in rows]
    assert statistics["response_length"]["max"] == max(lengths) and sum(
        statistics["response_length"]["histogram"]["counts"]) == len(rows)
    assert statistics["response_length"]["mean"] == pytest.approx(np.mean(lengths))
    assert statistics["zero_advantage_groups"] == {"groups": demo.PROMPTS, "zero_advantage": 2, "share": 2 / 24}
    assert len(statistics["logprob_gap"]["histogram"]["counts"]) == 5


def test_a_catalog_of_the_clean_groups_has_no_finding(sample_copy, cli, tmp_path):
    """The demo's clean groups appended to a stream of the same fields (meanings and check options
    declared): every check runs, none finds anything; --fail-on info passes."""
    catalog = Catalog(str(tmp_path / "catalog"))
    fields = sample_copy.resolve("demo-rollouts@v2").fields
    open_stream(catalog, "clean", fields, key="rollout_id")
    rollouts = demo.demo_rollouts()
    rows = [{**row, "rewards": json.dumps(row["rewards"], sort_keys=True), "turns": json.dumps(row["turns"])}
            for i, row in enumerate(rollouts.rows) if i in set(rollouts.clean_rows)]
    schema = pa.schema([pa.field(f.name, f.type) for f in fields])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "clean.parquet")
    assert cli("--catalog", catalog.url, "append", tmp_path / "clean.parquet", "clean")[0] == 0
    assert cli("--catalog", catalog.url, "snapshot", "clean")[0] == 0
    report = stats(cli, catalog, "clean", "--fail-on", "info")["rollouts"]
    assert report["findings"] == [] and report["skipped"] == {}
    code, out, err = cli("--catalog", catalog.url, "query", "clean", "--sql",
                         "SELECT count(*) AS n, (SELECT count(*) FROM v WHERE len(rollout_codes) > 0) AS rows "
                         "FROM rollout_findings", "--json")
    assert code == 0 and json.loads(out)["rows"] == [{"n": 0, "rows": 0}], err


def test_query_has_the_findings_table_and_the_per_rollout_columns(sample_copy, cli, injected):
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-rollouts@v2", "--sql",
                         "SELECT code, _index, key, positions FROM rollout_findings", "--json", "--limit", 1000)
    assert code == 0, err
    table: dict[str, dict] = {}
    for row in json.loads(out)["rows"]:
        assert row["key"] == row["_index"]  # the demo's rollout_id is its row
        table.setdefault(row["code"], {})[row["_index"]] = None if row["positions"] is None else tuple(row["positions"])
    assert table == injected
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-rollouts@v2", "--limit", 200, "--json",
                         "--columns", "rollout_codes,rollout_response_len,rollout_logprob_gap_max,rollout_reward,"
                                      "rollout_policy_version,rollout_zero_advantage,rollout_logprob_gaps")
    assert code == 0, err
    got = json.loads(out)["rows"]
    rows = stored_rows(sample_copy.resolve("demo-rollouts@v2")).to_pylist()
    assert len(got) == len(rows) == 96
    for i, (q, row) in enumerate(zip(got, rows)):
        assert q["_index"] == i and set(q["rollout_codes"]) == {c for c, at in injected.items() if i in at}
        assert q["rollout_response_len"] == len(row["response_tokens"]) - row["response_tokens"].count(demo.PAD)
        assert q["rollout_policy_version"] == row["policy_version"]
        assert q["rollout_zero_advantage"] == (i in injected["rollout-zero-advantage-group"])
        if i in injected["rollout-token-length-mismatch"]:
            continue  # its log-probs do not line up: no gap is read
        n = q["rollout_response_len"]
        gaps = [abs(s - learner) for s, learner in zip(row["sampler_logprobs"][:n], row["learner_logprobs"][:n])]
        assert q["rollout_logprob_gaps"][:n] == pytest.approx(gaps) and q["rollout_logprob_gap_max"] == pytest.approx(
            max(gaps))
        assert all(g is None for g in q["rollout_logprob_gaps"][n:]) or i in injected["rollout-loss-mask-on-padding"]


def test_the_schema_lists_the_rollout_columns_and_a_query_names_them_alone(sample_copy, cli):
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-rollouts@v2", "--schema")
    assert code == 0 and "rollout_logprob_gap_max" in out and "and the table rollout_findings" in out, err
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-rollouts@v2", "--where",
                         "rollout_logprob_gap_max > 1 AND rollout_policy_version = 6", "--columns", "rollout_codes")
    assert code == 0 and "demo-rollouts@" in out and ":12 " in out and ":14 " in out and "2 rows of 2" in out, err
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-text", "--schema")
    assert code == 0 and "rollout" not in out, err


def test_the_text_report_names_rows_keys_positions_and_histograms(sample_copy, cli):
    code, out, err = cli("--catalog", sample_copy.url, "stats", "demo-rollouts@v2")
    assert code == 0, err
    for said in ("LLM rollouts (96; meanings 16 declared; key rollout_id)", "rollout-loss-mask-on-prompt",
                 "4 (4): prompt 6; 6 (6): prompt 0-6", "9 (9): 3-7; 11 (11): 3-7", "learner_version 7 (newest policy "
                 "version)", "reward by policy version", "response length (tokens before padding): 96 rollouts",
                 "zero-advantage groups: 2 of 24 (8.3%)", "log-prob gap |sampler - learner| over 343 tokens"):
        assert said in out, said
    assert "   3  48  " + "█" * 40 in out  # 48 responses of 3 tokens: the longest bar


def test_check_options_and_meanings_given_change_what_is_checked(sample_copy, cli, injected):
    report = stats(cli, sample_copy, "demo-rollouts@v2", "--check", "staleness_bound=none", "--check",
                   "logprob_gap=3", "--meaning", "group=none", "--check", "rows_shown=1")["rollouts"]
    assert report["skipped"] == {"rollout-zero-advantage-group": "no group column",
                                 "rollout-stale": "no learner_version and staleness_bound given"}
    codes = {f["code"] for f in report["findings"]}
    assert "rollout-logprob-gap" not in codes and codes == set(injected) - {
        "rollout-logprob-gap", "rollout-zero-advantage-group", "rollout-stale"}
    assert all(len(f["rows"]) == 1 for f in report["findings"])
    assert report["option_from"]["logprob_gap"] == "given" and report["meaning_from"].get("group") is None
    strict = stats(cli, sample_copy, "demo-rollouts@v2", "--check", "learner_version=7", "--check",
                   "staleness_bound=0", "--check", "rows_shown=100")["rollouts"]
    assert set(found(strict)["rollout-stale"]) == {r for r in range(96) if r // 4 < 12 or r // 4 == 14}


def test_fail_on_exits_1_naming_what_failed(sample_copy, cli):
    code, out, err = cli("--catalog", sample_copy.url, "stats", "demo-rollouts@v2", "--fail-on", "error")
    assert code == 1 and "rollout-stale" in out, err
    assert err.strip().splitlines() == [err.strip()] and "9 finding(s) of severity error or worse" in err, err
    code, _, err = cli("--catalog", sample_copy.url, "stats", "demo-text", "--fail-on", "error")
    assert code == 0, err  # nothing rollout-like to fail on


@pytest.mark.parametrize("args, said", [
    (("stats", "demo-rollouts@v2", "--check", "nope=1"), "--check nope=1: no check option 'nope' (options: pad_id,"),
    (("stats", "demo-rollouts@v2", "--check", "pad_id=-1"), "--check pad_id=-1: pad_id takes an integer >= 0"),
    (("stats", "demo-rollouts@v2", "--check", "eos_ids=[a]"), "--check 'eos_ids=[a]': the value is not JSON"),
    (("stats", "demo-rollouts@v2", "--check", "eos_ids=[1.5]"), "eos_ids takes a token id or a list of them"),
    (("stats", "demo-rollouts@v2", "--check", "logprob_gap=0"), "logprob_gap takes a number > 0 (nats), not 0"),
    (("stats", "demo-rollouts@v2", "--check", "pad_id"), "--check 'pad_id': expected NAME=VALUE"),
    (("stats", "demo-rollouts@v2", "--meaning", "nope=reward"), "--meaning nope=reward: no field 'nope' in demo-"),
    (("stats", "demo-rollouts@v2", "--meaning", "turns=reward"), "field 'turns' in demo-rollouts@"),
    (("stats", "demo-text", "--check", "pad_id=1"), "not LLM rollouts"),
    (("query", "demo-text", "--check", "pad_id=1"), "not LLM rollouts: --meaning and --check are about rollouts"),
    (("query", "demo-text", "--sql", "SELECT * FROM rollout_findings"), "is not LLM rollouts: it has no rollout_fin"),
])
def test_what_does_not_fit_is_one_line_and_exit_2(sample_copy, cli, args, said):
    code, out, err = cli("--catalog", sample_copy.url, *args)
    assert code == 2 and out == "" and said in err and err.strip().count("\n") == 0, (args, err)


def test_stats_of_a_float_column_with_nan_and_inf(sample_copy, cli):
    """The demo's reward holds NaN and +inf: the range, mean and histogram are over the finite values, the
    others counted apart (a NaN maximum made the histogram's bin width NaN: the command failed)."""
    columns = {c["name"]: c for c in stats(cli, sample_copy, "demo-rollouts@v2")["columns"]}
    reward = columns["reward"]
    assert (reward["min"], reward["max"], reward["nonfinite"]) == (0.0, 1.0, 2)
    assert sum(n for *_, n in reward["histogram"]) == 94 and columns["policy_version"]["nonfinite"] is None
    assert "rollout_id" in columns and "rollout_response_len" not in columns  # the rollouts' statistics are apart
    code, out, err = cli("--catalog", sample_copy.url, "stats", "demo-rollouts@v1", "demo-rollouts@v2", "--json")
    assert code == 0 and json.loads(out)["a"]["rollouts"] and json.loads(out)["b"]["rollouts"], err


def test_a_rollout_version_without_rows(sample_copy, cli, tmp_path):
    """No rows: the checks run on empty columns (a schema-less table failed every one of them)."""
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.write_version("none", [], sample_copy.resolve("demo-rollouts@v2").fields, key="rollout_id")
    report = stats(cli, catalog, "none")["rollouts"]
    assert report["findings"] == [] and report["statistics"]["rollouts"] == 0
    code, out, err = cli("--catalog", catalog.url, "query", "none", "--json", "--sql",
                         "SELECT count(*) AS n FROM rollout_findings")
    assert code == 0 and json.loads(out)["rows"] == [{"n": 0}], err

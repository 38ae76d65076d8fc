"""`dsinspect query`: SQL over a version, run by DuckDB, checked against pyarrow compute over the same
shards (DuckDB-independent expectations), on a copy of the sample catalog, a generated 10^6-row
version and a catalog on a real S3 server on loopback; DuckDB shut in (no file read or written
beyond the version's shards); bad SQL is one line and exit 2; derived values made once per shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("duckdb")

from cli_inprocess import run_cli  # noqa: E402
from stored_rows import stored_rows  # noqa: E402

from dsinspect.errors import IntegrityError, UserError  # noqa: E402
from dsinspect.inspect.query import VersionQuery  # noqa: E402
from dsinspect.loaders import Catalog, Field, WriteOptions  # noqa: E402


def indices(mask) -> list[int]:
    return np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)).tolist()


def test_a_condition_on_stored_and_derived_columns_finds_the_rows_pyarrow_finds(sample_copy, cli):
    text = sample_copy.resolve("demo-text")
    table = stored_rows(text)
    want = indices(pc.and_(pc.equal(table["lang"], "ja"), pc.greater(pc.list_value_length(table["tokens"]), 8)))
    assert want, "the sample catalog has such rows"
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-text", "--where",
                         "lang = 'ja' AND tokens_len > 8", "--limit", 1000, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert [r["_index"] for r in got["rows"]] == want and got["matches"] == len(want)
    assert [r["address"] for r in got["rows"]] == [f"{text.address}:{i}" for i in want]
    # text lengths in characters, not bytes: the emoji and CJK rows tell them apart
    chars = pc.utf8_length(table["text"]).to_pylist()
    code, out, _ = cli("--catalog", sample_copy.url, "query", "demo-text", "--where", "text_chars <> text_bytes",
                       "--columns", "text_chars", "--limit", 1000, "--json")
    rows = json.loads(out)["rows"]
    assert rows and all(r["text_chars"] == chars[r["_index"]] for r in rows)
    assert [r["_index"] for r in rows] == indices(pc.not_equal(pc.utf8_length(table["text"]),
                                                               pc.binary_length(table["text"])))


def test_image_sizes_and_orientation_agree_with_the_stored_fields(sample_copy, cli):
    images = stored_rows(sample_copy.resolve("demo-images"))
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-images", "--columns",
                         "image_width,image_height,image_format,width,height,format", "--limit", 1000, "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert len(rows) == images.num_rows
    assert all((r["image_width"], r["image_height"]) == (r["width"], r["height"]) for r in rows)
    assert all(r["image_format"].lower() == r["format"].replace("jpg", "jpeg") for r in rows)
    code, out, _ = cli("--catalog", sample_copy.url, "query", "demo-images", "--where", "image_orientation <> 1",
                       "--json")
    rotated = [r["_index"] for r in json.loads(out)["rows"]]
    assert rotated == indices(pc.match_substring(images["caption"], "stored rot"))


def test_sql_groups_and_orders_like_pyarrow(sample_copy, cli):
    rl = stored_rows(sample_copy.resolve("demo-rl"))
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-rl", "--sql",
                         "SELECT _index, trajectory_steps, trajectory_return FROM v ORDER BY trajectory_return DESC "
                         "LIMIT 5", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    best = np.argsort(-rl["episode_return"].to_numpy(), kind="stable")[:5].tolist()
    assert [r["_index"] for r in rows] == best
    assert [r["trajectory_steps"] for r in rows] == [rl["length"][i].as_py() for i in best]
    assert all(abs(r["trajectory_return"] - rl["episode_return"][r["_index"]].as_py()) < 1e-4 for r in rows)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "COPY (SELECT 1) TO '{out}'",
    "SELECT 1; COPY (SELECT 1) TO '{out}'",
    "ATTACH '{out}' AS x",
    "SET enable_external_access = true",
    "INSTALL httpfs",
    "CREATE TABLE t AS SELECT 1",
])
def test_the_query_reads_nothing_but_the_version_and_writes_nothing(sample_copy, cli, tmp_path, sql):
    target = tmp_path / "written.csv"
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-text", "--sql", sql.format(out=target))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("dsinspect: error: "), err
    assert "root:" not in err and not target.exists()


def test_a_condition_cannot_smuggle_a_second_statement_or_a_file(sample_copy, cli, tmp_path):
    target = tmp_path / "x.csv"
    for condition in [f"1=1); COPY (SELECT 1) TO '{target}'; SELECT (1", "1=1) UNION ALL SELECT * FROM "
                      "read_csv('/etc/passwd') --"]:
        code, _, err = cli("--catalog", sample_copy.url, "query", "demo-text", "--where", condition)
        assert code == 2 and err.count("\n") == 1, err
        assert not target.exists()


def test_bad_sql_is_one_line_and_exit_2(sample_copy, cli):
    for args in [("--where", "nope > 1"), ("--where", "lang = "), ("--sql", "SELEC 1"), ("--order-by", "zz"),
                 ("--sql", "SELECT 1", "--where", "1=1")]:
        code, out, err = cli("--catalog", sample_copy.url, "query", "demo-text", *args)
        assert code == 2 and out == "" and err.count("\n") == 1, (args, err)


@pytest.mark.parametrize("args, line", [
    (("--where", "tokenz_len > 5"), "bad query: no column 'tokenz_len' in demo-text@{id} (closest: tokens_len"),
    (("--order-by", "lang, tokn_len DESC"), "no column 'tokn_len'"),
    (("--columns", "langg"), "no column 'langg' in demo-text@{id} (closest: lang)"),
])
def test_an_unknown_column_is_named_with_close_ones_and_the_schema_hint(sample_copy, cli, args, line):
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-text", *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert line.format(id=sample_copy.resolve("demo-text").id[:12]) in err
    assert err.rstrip().endswith("`dsinspect query demo-text --schema` lists the columns") and "Binder" not in err


@pytest.mark.parametrize("args, line", [
    (("--where", "lang = = 'en'"), """where "lang = = 'en'": syntax error at or near "=" (character 8)"""),
    (("--where", "tokens_len >"), "where 'tokens_len >': incomplete at its end"),
    (("--where", "tokens_len > 5 AND (lang = 'en'"),
     """where "tokens_len > 5 AND (lang = 'en'": incomplete at its end (1 '(' not closed)"""),
    (("--order-by", "tokens_len DESC DESC"), "order by 'tokens_len DESC DESC': syntax error at or near \"DESC\" "
                                             "(character 17)"),
    (("--sql", "SELECT _index FROM v WHERE"),
     "sql 'SELECT _index FROM v WHERE': syntax error at or near \"WHERE\" (character 22)"),
])
def test_a_syntax_error_quotes_the_text_typed_not_the_wrapping(sample_copy, cli, args, line):
    code, out, err = cli("--catalog", sample_copy.url, "query", "demo-text", *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err == f"dsinspect: error: bad SQL: {line}\n"
    assert "LIMIT" not in err and "ORDER BY _index" not in err and "SELECT _index," not in err


def test_derived_values_are_made_once_per_shard_and_kept_in_the_catalog(tmp_path):
    catalog = Catalog(str(tmp_path / "c"))
    rows = 300
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "tokens": pa.array([list(range(i % 17)) for i in range(rows)], pa.list_(pa.int32()))})
    fields = [Field("id", pa.int64(), "scalar"), Field("tokens", pa.list_(pa.int32()), "tokens")]
    version = catalog.write_version("t", table, fields, options=WriteOptions(shard_rows=100))
    with VersionQuery(version) as q:
        assert q.where("tokens_len = 16", limit=1000).rows == [(i, 16, i) for i in range(16, rows, 17)]
    sidecars = sorted((tmp_path / "c" / "datasets" / "t" / "derived").rglob("*.parquet"))
    assert [p.stem for p in sidecars] == sorted(s.sha256 for s in version.manifest.shards)
    stamps = [p.stat().st_mtime_ns for p in sidecars]
    with VersionQuery(version) as q:  # read, not made again
        assert q.where("tokens_len = 0", count=True).total == len(range(0, rows, 17))
    assert [p.stat().st_mtime_ns for p in sidecars] == stamps
    # a sidecar of the wrong length is made again; a damaged shard is refused, naming it
    sidecars[0].write_bytes(sidecars[1].read_bytes()[:10])
    with VersionQuery(version) as q:
        assert q.where(count=True).total == rows
    shard = tmp_path / "c" / "datasets" / "t" / "shards" / f"{version.manifest.shards[2].sha256}.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    for p in sidecars:
        p.unlink()
    with pytest.raises(IntegrityError, match=version.manifest.shards[2].sha256[:16]):
        VersionQuery(version)


def test_a_sample_address_or_a_bad_limit_is_refused(sample_copy, cli):
    for args in [("demo-text:3",), ("demo-text", "--limit", "-1")]:
        code, _, err = cli("--catalog", sample_copy.url, "query", *args)
        assert code == 2 and err.count("\n") == 1, err
    with VersionQuery(sample_copy.resolve("demo-text")) as q, pytest.raises(UserError):
        q.where(offset=-1)


@pytest.mark.slow
def test_a_catalog_on_s3_answers_like_a_local_one(sample_copy, tmp_path):
    from s3_server import s3_server

    local_version = sample_copy.resolve("demo-text")
    rows = stored_rows(local_version)
    rows = rows.drop([c for c in rows.column_names if c.startswith("__")])  # the row hashes: the writer adds them
    with s3_server() as (server, url, _):
        version = Catalog(url).write_version("demo-text", rows, list(local_version.fields),
                                             options=WriteOptions(shard_rows=60))
        with VersionQuery(version) as q:
            got = q.where("tokens_len > 100 OR lang = 'ko'", limit=1000, columns=["doc_id"])
        with VersionQuery(local_version) as q:
            want = q.where("tokens_len > 100 OR lang = 'ko'", limit=1000, columns=["doc_id"])
        assert got.rows == want.rows and got.rows
        assert server.requests("PUT", contains="/derived/"), "the sidecars are kept in the bucket"


@pytest.mark.slow
def test_a_million_rows(tmp_path):
    rng = np.random.default_rng(5)
    n = 1_000_000
    lengths = rng.integers(0, 12, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    table = pa.table({"id": pa.array(np.arange(n), pa.int64()), "label": pa.array(rng.integers(0, 7, n), pa.int8()),
                      "tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 9, offsets[-1],
                                                                                                   dtype=np.int32)))})
    fields = [Field("id", pa.int64(), "scalar"), Field("label", pa.int8(), "scalar"),
              Field("tokens", pa.list_(pa.int32()), "tokens")]
    version = Catalog(str(tmp_path / "c")).write_version("m", table, fields,
                                                         options=WriteOptions(shard_rows=250_000))
    want = indices(pc.and_(pc.equal(table["label"], 3), pc.greater_equal(pc.list_value_length(table["tokens"]), 10)))
    with VersionQuery(version) as q:
        got = q.where("label = 3 AND tokens_len >= 10", limit=10_000, count=True, columns=["id"])
        assert got.total == len(want)
        assert [r[0] for r in got.rows] == want[:10_000] and got.truncated
        top = q.sql("SELECT label, count(*) AS n FROM v GROUP BY label ORDER BY label").rows
    assert top == [(k, int(c)) for k, c in zip(*np.unique(table["label"].to_numpy(), return_counts=True))]


def test_queries_on_the_in_memory_columns_answer_as_the_whole_view_does(sample_copy):
    """A query naming only scalars and derived values runs on the in-memory view; any other field,
    also a struct's member or a `*`, on the view joined with the shards: the same rows either way."""
    with VersionQuery(sample_copy.resolve("demo-rl")) as q:
        assert q._connection_for("SELECT _index FROM v WHERE trajectory_steps > 30") is q.con
        for sql in ["SELECT * FROM v", "SELECT _index FROM v WHERE len(trajectory.reward) > 30",
                    "SELECT _index FROM v WHERE len(V.Trajectory.reward) > 30"]:
            assert q._connection_for(sql) is q.full, sql
        fast = q.sql("SELECT _index FROM v WHERE trajectory_steps > 30 ORDER BY _index").rows
        whole = q.sql("SELECT _index FROM v WHERE len(trajectory.reward) > 30 ORDER BY _index").rows
        assert fast == whole and fast
        every = q.sql("SELECT * FROM v ORDER BY _index").rows
        assert [r[0] for r in every] == list(range(len(every)))


def piped_query(*args, columns=None):
    """`dsinspect query ARGS` into a pipe, as `... > file` has it: its stdout lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "DSINSPECT_CATALOG")}
    done = subprocess.run([sys.executable, "-m", "dsinspect", "query", *args], capture_output=True, text=True,
                          timeout=300, env={**env, **({"COLUMNS": str(columns)} if columns else {})})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_piped_table_is_whole_and_columns_is_honoured():
    schema = run_cli("query", "demo-video@v1", "--schema", "--json", unset=("COLUMNS", "DSINSPECT_CATALOG"))
    assert schema.returncode == 0, schema.stderr
    names = {c["name"] for c in json.loads(schema.stdout)}  # the column names (in this process: no width involved)
    lines = piped_query("demo-video@v1", "--limit", "1")
    assert len(lines) == 6, lines  # top rule, one header line, rule, the row, bottom rule, the count: none folded
    shown = [h.strip() for h in lines[1].split("┃") if h.strip()]
    assert shown[0] == "sample" and len(shown) > 8 and set(shown[1:]) <= names  # whole names, not pieces
    assert max(map(len, lines)) > 132  # wider than the old cut: the table needs it
    narrow = piped_query("demo-video@v1", "--limit", "1", columns=100)
    assert max(map(len, narrow)) <= 100 < max(map(len, lines))  # COLUMNS says how wide
    assert piped_query("demo-video@v1", "--limit", "1", columns=300) == lines  # room enough: the same table

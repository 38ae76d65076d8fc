"""`dsinspect stats`: per-column statistics of a version (and two side by side) against pyarrow compute
over the same shards, on a copy of the sample catalog."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.compute as pc
import pytest

pytest.importorskip("duckdb")

from stored_rows import stored_rows  # noqa: E402


def test_a_versions_statistics_are_what_pyarrow_computes(sample_copy, cli):
    version = sample_copy.resolve("demo-text")
    table = stored_rows(version)
    code, out, err = cli("--catalog", sample_copy.url, "stats", "demo-text", "--json", "--bins", 10)
    assert code == 0, err
    got = {c["name"]: c for c in json.loads(out)["columns"]}
    assert json.loads(out)["rows"] == table.num_rows
    counts = {d["values"].as_py(): d["counts"].as_py() for d in pc.value_counts(table["lang"])}
    assert dict(map(tuple, got["lang"]["values"])) == counts and got["lang"]["distinct"] == len(counts)
    lengths = pc.list_value_length(table["tokens"]).to_numpy()
    t = got["tokens_len"]
    assert (t["min"], t["max"]) == (lengths.min(), lengths.max()) and t["mean"] == pytest.approx(lengths.mean())
    assert [b[2] for b in t["histogram"]] == np.histogram(lengths, bins=10, range=(lengths.min(),
                                                                                  lengths.max()))[0].tolist()
    assert got["text"]["source"] == "in the shards" and got["text"]["nulls"] == table["text"].null_count
    assert got["tokens"]["nulls"] is None, "a list's nulls are not in the footers: unknown, not 0"
    assert got["text_chars"]["source"] == "derived from text"


def test_two_versions_share_their_bins_and_say_what_moved(sample_copy, cli):
    code, out, err = cli("--catalog", sample_copy.url, "stats", "demo-rl@v1", "demo-rl@v2", "--json")
    assert code == 0, err
    a, b = ({c["name"]: c for c in side["columns"]} for side in (json.loads(out)["a"], json.loads(out)["b"]))
    for name in ("trajectory_return", "trajectory_steps", "length"):
        assert [h[:2] for h in a[name]["histogram"]] == [h[:2] for h in b[name]["histogram"]]
    v1, v2 = (stored_rows(sample_copy.resolve(f"demo-rl@{t}")) for t in ("v1", "v2"))
    assert sum(h[2] for h in a["length"]["histogram"]) == v1.num_rows
    assert sum(h[2] for h in b["length"]["histogram"]) == v2.num_rows
    code, out, _ = cli("--catalog", sample_copy.url, "stats", "demo-rl@v1", "demo-rl@v2")
    assert code == 0 and "* trajectory_return" in out and "moved between the versions" in out


def test_bad_bins_or_address_is_one_line_and_exit_2(sample_copy, cli):
    for args in [("demo-text", "--bins", 0), ("no-such",), ("demo-text@nope",)]:
        code, out, err = cli("--catalog", sample_copy.url, "stats", *args)
        assert code == 2 and out == "" and err.count("\n") == 1, (args, err)


def test_the_table_separates_values_from_counts_and_explains_unknown_nulls(sample_copy, cli):
    code, out, err = cli("--catalog", sample_copy.url, "stats", "demo-text@v1")
    assert code == 0, err
    found = json.loads(cli("--catalog", sample_copy.url, "stats", "demo-text@v1", "--json")[1])
    lang = next(c for c in found["columns"] if c["name"] == "lang")
    (value, count), *_ = lang["values"]
    assert f"'{value}' ×{count:,}," in out  # each value with its count, never "en 84, mixed 54"
    tokens = next(line for line in out.splitlines() if line.startswith("│ tokens "))
    assert next(c for c in found["columns"] if c["name"] == "tokens")["nulls"] is None
    assert tokens.split("│")[3].strip() == "?"
    assert "nulls ?: unknown for a list or struct field kept in the shards" in " ".join(out.split())
    code, out, _ = cli("--catalog", sample_copy.url, "stats", "demo-rl@v1", "demo-rl@v2")
    trajectory = next(line for line in out.splitlines() if line.startswith("│   trajectory "))
    assert code == 0 and trajectory.split("│")[2].strip() == "? -> ?" and "nulls ?: unknown" in out

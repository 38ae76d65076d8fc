"""float32 (and float16) numbers are shown with the digits they have, the shortest text that gives
the same float32 back, wherever arrays are shown: the sample views (`show`, the TUI, the web), the
table cells, the query table. JSON stays exact (the float64 the float32 is)."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.inspect.cells import NARROW, WIDE, cell, column_cells
from dsinspect.inspect.structured import array_view
from dsinspect.loaders import Catalog, Field

STORED = np.float32(-0.00029598334)  # as a float64: -0.00029598333640024066
LONG = repr(float(STORED))
SHORT = str(STORED)


def test_the_digits_differ():  # what the tests below tell apart
    assert LONG == "-0.00029598333640024066" and SHORT == "-0.00029598334"
    assert np.float32(float(SHORT)) == STORED


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    buf = io.BytesIO()
    np.save(buf, np.array([[STORED, 0.1], [2.5, np.float32(1e-8)]], np.float32))
    rows = [{"id": 0, "emb": [float(STORED), float(np.float32(0.1)), 3.0], "score": float(STORED),
             "npy": buf.getvalue()}]
    fields = [Field("id", pa.int64(), "scalar"), Field("emb", pa.list_(pa.float32()), "array"),
              Field("score", pa.float32(), "scalar"), Field("npy", pa.binary(), "array")]
    cat = Catalog(str(tmp_path_factory.mktemp("f32") / "catalog"))
    cat.write_version("t", rows, fields, key="id")
    cat.write_version("h", [{"id": 0, "half": [float(np.float16(0.1))], "h": float(np.float16(0.1))}],
                      [Field("id", pa.int64(), "scalar"), Field("half", pa.list_(pa.float16()), "array"),
                       Field("h", pa.float16(), "scalar")], key="id")
    return cat


def test_show_gives_float32_its_own_digits(catalog, cli):
    code, out, err = cli("--catalog", catalog.url, "show", "t:0")
    assert code == 0, err
    assert LONG not in out and "0.10000000149" not in out and "1.0000000100e-08" not in out.lower()
    assert f"[{SHORT}, 0.1, 3.0]" in out  # the list<float32> field
    assert f"[{SHORT}, 0.1]" in out and "[2.5, 1e-08]" in out  # the float32 .npy file
    assert SHORT in out.split("score")[-1]  # the float32 scalar
    code, out, _ = cli("--catalog", catalog.url, "show", "t:0", "--json")
    text = json.dumps(json.loads(out))
    assert LONG in text  # JSON holds the exact float64 the float32 is
    code, out, err = cli("--catalog", catalog.url, "show", "h:0")
    assert code == 0 and "[0.1]" in out and "0.0999755859375" not in out, err  # float16's own digits


def test_cells_of_float32_columns(catalog):
    table = catalog.resolve("t").take([0], columns=["emb", "score"])
    assert column_cells(table.column("score"), NARROW) == [SHORT]
    assert column_cells(table.column("emb"), WIDE) == [f"[3] {SHORT}, 0.1, 3.0"]
    assert cell(table.column("emb")[0]) == f"[3] {SHORT}, 0.1, 3.0"  # an Arrow scalar: typed
    struct = pa.array([{"x": float(STORED)}], pa.struct([("x", pa.float32())]))
    assert column_cells(struct, WIDE) == [f"{{x: {SHORT}}}"]


def test_array_view_keeps_float64_digits_for_float64():
    buf = io.BytesIO()
    np.save(buf, np.array([float(STORED)], np.float64))
    assert array_view(buf.getvalue()).pretty == f"[{LONG}]"


def test_the_query_table_gives_float32_its_own_digits(catalog, cli):
    code, out, err = cli("--catalog", catalog.url, "query", "t", "--columns", "emb")
    assert code == 0, err
    assert SHORT in out and LONG not in out
    code, out, _ = cli("--catalog", catalog.url, "query", "t", "--columns", "emb", "--json")
    assert json.loads(out)["rows"][0]["emb"][0] == float(STORED)  # exact in JSON


def test_the_web_tables_show_float32_digits(catalog):
    """The web's dataset table and replay rows take each value as its Arrow scalar, not as a Python float."""
    from dsinspect.web.models.catalog import sample_table
    from dsinspect.web.models.replay import build_spec, encode_spec, replay_model

    row = sample_table(catalog, "t", 0)["rows"][0]
    assert SHORT in row["emb"] and row["score"] == SHORT and LONG not in json.dumps(row)
    assert row["npy"].startswith("<")  # a binary value is its size
    stored = replay_model(catalog, encode_spec(build_spec(catalog, "t", 0, 1, 1, "none")), 0, "0")["stored"]
    assert stored[0]["score"] == SHORT and SHORT in stored[0]["emb"] and LONG not in json.dumps(stored)


def test_query_and_stats_read_float16_columns(catalog, cli):
    """DuckDB cannot scan Arrow's float16 ("Unsupported Internal Arrow Type e"): the view widens it to float32."""
    code, out, err = cli("--catalog", catalog.url, "query", "h", "--where", "h > 0.09", "--columns", "half,h", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["h"] == float(np.float16(0.1)) and row["half"] == [float(np.float16(0.1))]
    code, out, err = cli("--catalog", catalog.url, "stats", "h", "--json")
    assert code == 0, err

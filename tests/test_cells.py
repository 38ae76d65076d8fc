"""dsinspect.inspect.cells: one formatter for a value in a table cell; the TUI (NARROW) and the web app
(WIDE) keep the cells they showed before it was shared."""

import pyarrow as pa
from rich.cells import cell_len

from dsinspect.inspect.cells import NARROW, WIDE, cell, clip, column_cells, repr_line


def test_wide_cells_as_the_web_tables_show_them():
    assert cell(None) == "null" and cell(b"\x00" * 1234) == "<1,234 bytes>"
    assert cell(list(range(20))) == "[20] 0, 1, 2, 3, 4, 5, 6, 7, …" and cell([]) == "[0] "
    assert cell({"obs": [1, 2], "reward": 1.0}) == "{obs: [2], reward: 1.0}"
    assert cell("a\nb") == "a\nb"  # a browser cell keeps the newline
    long = cell("x" * 100)
    assert len(long) == WIDE.width and long.endswith("x…")


def test_narrow_cells_as_the_tui_sample_table_shows_them():
    assert cell(list(range(20)), NARROW) == "[20] 0 1 2 3 4 5"
    assert cell({"obs": [1, 2], "reward": 1.0}, NARROW) == "{obs:2 reward}"
    assert cell("tabs\tand\nnewlines  here", NARROW) == "tabs and newlines here"
    assert cell("y" * 40, NARROW) == "y" * 23 + "…"


def cells(values: list, t: pa.DataType | None = None) -> list[str]:
    return column_cells(pa.chunked_array([pa.array(values, t)]), NARROW)


def test_column_cells_follow_the_arrow_type():
    assert cells([b"ab", None, b""]) == ["<2 bytes>", "null", "<0 bytes>"]
    assert cells([[1, 2], None]) == ["[2] 1 2", "null"]
    assert cells([{"obs": [1], "r": 1.0}, None]) == ["{obs:1 r}", "null"]
    assert cells([[("k", 1)]], pa.map_(pa.string(), pa.int64())) == ["[('k', 1)]"]  # a map as its text


def test_a_null_fixed_size_binary_is_null_not_a_size():
    assert column_cells(pa.array([b"abcd", None], pa.binary(4))) == ["<4 bytes>", "null"]


def test_clip_counts_characters_or_terminal_cells():
    assert clip("abc", 3) == "abc" and clip("abcdef", 4) == "abc…"
    wide = clip("日本語のテキスト", 9, measure=cell_len)
    assert wide == "日本語の…" and cell_len(wide) <= 9
    assert clip("x" * 50, 10, suffix=" … (50 chars)", min_room=8) == "x" * 8 + " … (50 chars)"


def test_repr_line_is_one_line():
    class Lines:
        def __repr__(self):
            return "first\nsecond"

    assert repr_line(Lines()) == "first second" and repr_line({"k": "v" * 300}).endswith("…")
    assert len(repr_line(list(range(1000)))) == 200

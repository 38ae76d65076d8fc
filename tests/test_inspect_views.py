"""Small views: hex pages, text with unusual code points, JSON, scalars, bytes, JSON conversion."""

import datetime
import decimal
import json
import math

from dsinspect.inspect import (
    ErrorView,
    Finding,
    Severity,
    bytes_view,
    hex_page,
    json_view,
    jsonable,
    safely,
    scalar_view,
    sniff,
    text_view,
)


def test_hex_page_lines_offsets_and_ascii():
    data = bytes(range(256)) * 3
    page = hex_page(data, page=1, page_size=256)
    assert (page.page, page.pages, page.offset, page.total) == (1, 3, 256, 768)
    assert len(page.lines) == 16 and page.lines[0].offset == 256
    assert page.lines[2].hex == "20 21 22 23 24 25 26 27  28 29 2a 2b 2c 2d 2e 2f"
    assert page.lines[2].ascii == " !\"#$%&'()*+,-./"
    assert page.lines[0].ascii == "." * 16
    assert hex_page(data, page=-1).page == 2 and hex_page(data, page=99).page == 2
    assert hex_page(b"").lines == () and hex_page(b"").pages == 1
    short = hex_page(b"abc")
    assert short.lines[0].hex == "61 62 63" and short.lines[0].ascii == "abc"


def test_text_view_lengths_and_notes():
    view = text_view("héllo\n世界")
    assert (view.chars, view.utf8_bytes, view.lines) == (8, 13, 2) and not view.notes and not view.findings


def test_text_view_makes_unusual_code_points_visible():
    text = "pay\u202eusd\u202c to\u200bday \U0001F469\u200d\U0001F4BB \x1b[31m \ue000"
    view = text_view(text)
    cats = [n.category for n in view.notes]
    assert cats == ["bidi", "bidi", "zero-width", "zero-width", "control", "private-use"]
    assert view.notes[0].label == "U+202E RIGHT-TO-LEFT OVERRIDE" and view.notes[0].byte == 3
    severities = {f.code: f.severity for f in view.findings}
    assert severities["text-bidi"] is Severity.WARNING and severities["text-zero-width"] is Severity.INFO
    assert "⟨U+202E⟩" in view.visible and "\u202e" not in view.visible
    assert "".join(t for t, _ in view.segments()) == text


def test_text_view_invalid_utf8_keeps_byte_offsets():
    view = text_view(b"ab\xffcd\xe6\x97")
    assert view.text == "ab\ufffdcd\ufffd\ufffd" and view.utf8_bytes == 7
    assert [(n.index, n.byte, n.label) for n in view.notes] == [(2, 2, "byte 0xFF"), (5, 5, "byte 0xE6"),
                                                                 (6, 6, "byte 0x97")]
    assert view.findings[0].code == "text-invalid-utf8" and view.findings[0].severity is Severity.ERROR
    json.dumps(view.to_json(), allow_nan=False)


def test_text_view_bounds_its_notes():
    view = text_view("\u200b" * 5000)
    assert len(view.notes) == 1000 and view.notes_total == 5000
    assert "listing stopped" in view.findings[0].message


def test_json_view_pretty_raw_and_broken():
    view = json_view(b'{"b": [1, 2], "a": "\xc3\xa9"}')
    assert view.value == {"b": [1, 2], "a": "é"} and '"a": "é"' in view.pretty and view.byte_size == 24
    bad = json_view('{"a": 1,,}')
    assert isinstance(bad, ErrorView) and "line 1 column 9" in bad.reason and bad.raw == b'{"a": 1,,}'
    dup = json_view('{"a": 1, "a": NaN}')
    assert {f.code for f in dup.findings} == {"json-duplicate-key", "json-nonstandard"}
    assert isinstance(json_view(b"\xff{}"), ErrorView)
    assert isinstance(json_view("[" * 100_000), ErrorView)


def test_scalar_view():
    assert scalar_view(0.1, "double").display == "0.1"
    nan = scalar_view(float("nan"), "float")
    assert nan.findings[0].code == "scalar-non-finite" and nan.to_json()["value"] == "nan"
    ts = scalar_view(datetime.datetime(2026, 1, 5, 9, 0), "timestamp[us]")
    assert ts.display == "2026-01-05T09:00:00" and ts.to_json()["value"] == "2026-01-05T09:00:00"
    assert scalar_view(decimal.Decimal("1.50"), "decimal128(5, 2)").display == "1.50"
    assert "text-bidi" in {f.code for f in scalar_view("a\u202eb", "string").findings}


def test_bytes_view_and_sniffing():
    view = bytes_view(b"\x89PNG\r\n\x1a\n" + bytes(100))
    assert view.detected == "PNG image" and view.size == 108 and len(view.sha256) == 64
    assert view.preview.startswith(".PNG....") and view.hex().total == 108
    assert "raw" not in view.to_json()
    assert sniff(b"\x80\x04\x95\x00") == "Python pickle (never loaded)"
    assert sniff(b'  {"a": 1}') == "JSON text (probably)"
    assert sniff("plain words\n".encode()) == "UTF-8 text"
    assert sniff(b"\x00\x01\x02") is None


def test_safely_turns_any_exception_into_an_error_view():
    def boom():
        raise ZeroDivisionError("division by zero")
    view = safely("image", b"raw", boom)
    assert isinstance(view, ErrorView) and view.reason == "ZeroDivisionError: division by zero" and view.raw == b"raw"
    data = view.to_json()
    assert data["kind"] == "error" and data["raw_size"] == 3 and data["raw_hex"]["lines"][0]["ascii"] == "raw"


def test_jsonable():
    assert jsonable(float("inf")) == "inf" and jsonable(-math.inf) == "-inf"
    assert jsonable({1: (b"ab",)}) == {"1": [{"base64": "YWI=", "size": 2}]}
    assert jsonable(Finding(Severity.INFO, "x", "m")) == {"severity": "info", "code": "x", "message": "m", "at": None}

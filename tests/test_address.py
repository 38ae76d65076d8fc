import pytest
from conftest import TOY_FIELDS, toy_rows

from dsinspect.errors import NotFoundError, UserError
from dsinspect.loaders.store.address import Address, parse_address


@pytest.mark.parametrize("text, expected", [
    ("demo-text", Address("demo-text", "latest", None)),
    ("demo-text@v1", Address("demo-text", "v1", None)),
    ("demo-text@v1:17", Address("demo-text", "v1", 17)),
    ("demo-text:17", Address("demo-text", "latest", 17)),
    ("demo-text@0123abcd:0", Address("demo-text", "0123abcd", 0)),
    ("a.b_c-9@latest:007", Address("a.b_c-9", "latest", 7)),
    ("a:" + "9" * 19, Address("a", "latest", 10 ** 19 - 1)),
])
def test_parse(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "@v1", "demo@", "demo:", "demo:x", "demo@v1@v2", "../etc", "a/b", "demo@../x",
                                  "s3://bucket/x", "/abs/path", "demo@v1:1:2", ".hidden", "x" * 200])
def test_malformed_addresses_are_clear_user_errors(text):
    with pytest.raises(UserError) as e:
        parse_address(text)
    assert "\n" not in str(e.value) and (repr(text.strip()) in str(e.value) or "bad" in str(e.value))


@pytest.mark.parametrize("text", ["demo:-1", "demo@v1:-0", "demo:+3", "demo: 3", "demo:3 ", " demo:3", "demo:\t3",
                                  "demo:\uff13", "demo:\u0663", "demo:1_000", "demo:0x1f", "demo:1e3", "demo:3\n",
                                  "demo:" + "9" * 20, " demo", "demo@v1 "])
def test_the_index_is_a_plain_non_negative_decimal(text):
    """`:-1` once showed the last row and `: 3`, `:+3` and full-width digits were taken as 3: a
    grammar that guesses lets a typo name a real, different sample. Refused in one line."""
    with pytest.raises(UserError, match="bad address") as e:
        parse_address(text)
    assert "\n" not in str(e.value)  # one line, even for an address ending in a newline


def test_resolution_by_tag_prefix_and_errors(catalog):
    v1 = catalog.write_version("toy", toy_rows(10), TOY_FIELDS, key="id", tags=["v1"])
    v2 = catalog.write_version("toy", toy_rows(12), TOY_FIELDS, key="id", tags=["v2"])
    assert catalog.resolve("toy").id == v2.id  # no @REF means latest
    assert catalog.resolve("toy@v1").id == v1.id
    assert catalog.resolve(f"toy@{v1.id[:8]}").id == v1.id
    assert catalog.resolve(f"toy@{v1.id}:3").id == v1.id
    with pytest.raises(NotFoundError, match="no tag 'v9'.*tags: latest, v1, v2"):
        catalog.resolve("toy@v9")
    with pytest.raises(NotFoundError, match="no version of 'toy' starts with"):
        catalog.resolve("toy@" + ("0" if v1.id[0] != "0" and v2.id[0] != "0" else "f") * 8)
    with pytest.raises(NotFoundError, match="no dataset 'nope'"):
        catalog.resolve("nope")
    with pytest.raises(NotFoundError, match="out of range"):
        v1.row(10)
    assert v1.row(-1)["id"] == 9


def test_ambiguous_prefix_is_an_error(catalog):
    catalog.write_version("toy", toy_rows(3), TOY_FIELDS)
    versions = catalog.layout.manifest("toy", "0" * 64).rsplit("/", 1)[0]
    for tail in ("0" * 56, "1" * 56):  # two ids sharing the prefix deadbeef (resolution reads names only)
        catalog.fs.pipe_file(f"{versions}/deadbeef{tail}.json", b"{}")
    with pytest.raises(UserError, match="prefix 'deadbeef' of 'toy' is ambiguous"):
        catalog.resolve("toy@deadbeef")
    assert catalog.resolve_ref("toy", "deadbeef1") == "deadbeef" + "1" * 56
    with pytest.raises(UserError, match="no tag 'dead'"):
        catalog.resolve("toy@dead")  # under 8 hex digits is a tag name, never a prefix

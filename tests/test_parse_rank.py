"""The engine's rank parser, which every face uses: with a run spec it names ranks of its world; without
one it reads one rank as a filter (a fingerprint log may hold any rank, and the check reports it)."""

from types import SimpleNamespace

import pytest

from dsinspect.errors import UserError
from dsinspect.loaders.audit.replay import parse_rank

SPEC = SimpleNamespace(world_size=2)  # parse_rank reads only the world size


def test_with_a_spec_ranks_are_those_of_its_world():
    assert parse_rank(" ALL ", SPEC) == [0, 1] and parse_rank("1", SPEC) == [1] and parse_rank(0, SPEC) == [0]
    with pytest.raises(UserError, match="rank 2 is outside the world size 2"):
        parse_rank("2", SPEC)


def test_without_a_spec_one_rank_of_any_number():
    assert parse_rank("7") == [7] and parse_rank(" 3 ") == [3]
    for bad in ("two", "all", ""):
        with pytest.raises(UserError, match=f"rank must be an integer or 'all', not {bad!r}"):
            parse_rank(bad)

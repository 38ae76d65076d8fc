"""The order backwards (order/inverse.py): for every sample, the (step, rank, slot) readings that
`readings` names are exactly those found by planning every batch forward — one source and mixtures,
shuffled or not, fresh and resumed specs, dropped and padded last batches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsinspect.errors import UserError
from dsinspect.loaders.order.inverse import readings
from dsinspect.loaders.order.plan import locate_step, plan_batch
from dsinspect.loaders.order.spec import RunSpec, Source, Start

shards = st.lists(st.integers(0, 9), min_size=1, max_size=4).filter(lambda r: sum(r) > 0)


@st.composite
def run_specs(draw):
    n = draw(st.integers(1, 3))
    sources = tuple(Source(f"s{k}", f"{k}" * 64, tuple(draw(shards)), float(draw(st.integers(1, 4)))) for k in range(n))
    spec = RunSpec(sources, seed=draw(st.integers(0, 99)), batch_size=draw(st.integers(1, 3)),
                   world_size=draw(st.integers(1, 3)), shuffle=draw(st.sampled_from(["none", "global"])),
                   last_batch="pad", mixture_block=draw(st.integers(n, 8)),
                   epoch_size=draw(st.none() | st.integers(1, 20)) if n > 1 else None)
    spec = spec.replace(last_batch=draw(st.sampled_from(["pad", "drop"]))) \
        if spec.global_batch <= spec.epoch_length else spec
    step = draw(st.integers(0, 6))
    epoch, position = locate_step(spec, step)
    return spec.replace(start=Start(step, epoch, position)) if draw(st.booleans()) else spec


@settings(max_examples=80, deadline=None)
@given(spec=run_specs(), steps=st.integers(1, 16))
def test_readings_are_the_forward_plan_inverted(spec, steps):
    until = spec.start.step + steps
    forward: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for step in range(spec.start.step, until):
        for rank in range(spec.world_size):
            plan = plan_batch(spec, step, rank)
            for slot in range(spec.batch_size):
                if not plan.padding[slot]:
                    key = (int(plan.sources[slot]), int(plan.indices[slot]))
                    forward.setdefault(key, []).append((step, rank, slot))
    for k in range(len(spec.sources)):
        for index in range(spec.source_length(k)):
            got = readings(spec, k, index, until)
            assert [(r.step, r.rank, r.slot) for r in got] == sorted(forward.get((k, index), []))
            for r in got:
                assert plan_batch(spec, r.step, r.rank).positions[r.slot] == r.position


def test_a_sample_outside_its_source_or_a_window_shuffle_is_refused():
    spec = RunSpec((Source("a", "a" * 64, (5, 5)),), shuffle="global")
    with pytest.raises(UserError, match="sample 10 is outside 0..9 of source a"):
        readings(spec, 0, 10, 5)
    with pytest.raises(UserError, match="source 1 is outside 0..0"):
        readings(spec, 1, 0, 5)
    with pytest.raises(UserError, match="not implemented for shuffle=window"):
        readings(spec.replace(shuffle="window"), 0, 3, 5)

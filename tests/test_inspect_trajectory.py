"""RL trajectories: the per-step table, return and length, series for plotting, consistency findings."""

import json
import math

import pytest

from dsinspect.defaults import BUNDLED
from dsinspect.inspect import TrajectoryView, trajectory_view
from dsinspect.loaders.store.catalog import Catalog


@pytest.fixture(scope="module")
def episodes():
    return Catalog(str(BUNDLED)).resolve("demo-rl@v1")


def codes(view):
    return [f.code for f in view.findings]


def episode(n=5, **changes):
    traj = {"observation": [[float(t), 0.5] for t in range(n)], "action": list(range(n)),
            "reward": [1.0] * n, "terminated": [False] * (n - 1) + [True], "truncated": [False] * n}
    traj.update(changes)
    return traj


def test_sample_episodes_are_consistent_with_their_return_and_length(episodes):
    for i in range(episodes.num_rows):
        row = episodes.row(i)
        view = trajectory_view(row["trajectory"])
        assert view.length == row["length"] and view.episode_return == pytest.approx(row["episode_return"], abs=1e-5)
        assert not view.findings, (i, view.findings)
        assert (view.terminated_at is None) != (view.truncated_at is None)
        assert view.observation_shape == [row["length"], 6]
        assert view.returns[-1] == pytest.approx(view.episode_return)


def test_step_table_pages(episodes):
    row = max((episodes.row(i) for i in range(episodes.num_rows)), key=lambda r: r["length"])
    view = trajectory_view(row["trajectory"], page_size=10)
    assert view.pages == -(-view.length // 10)
    first = view.page(0).rows
    assert [r.step for r in first] == list(range(10))
    assert first[0].action == row["trajectory"]["action"][0]
    assert first[0].observation.startswith("[") and "(6)" in first[0].observation
    last = view.page(-1).rows[-1]
    assert last.step == view.length - 1 and (last.terminated or last.truncated)
    assert last.cumulative == pytest.approx(view.episode_return)


def test_nan_rewards_and_a_step_after_termination():
    view = trajectory_view(episode(6, reward=[1.0, math.nan, 1.0, math.inf, 1.0, 1.0],
                                   terminated=[False, False, True, False, False, True]))
    assert isinstance(view, TrajectoryView)
    assert set(codes(view)) == {"trajectory-nan-reward", "trajectory-infinite-reward",
                                "trajectory-step-after-terminated"}
    after = next(f for f in view.findings if f.code == "trajectory-step-after-terminated")
    assert after.at == {"step": 2} and "3 more step(s)" in after.message
    assert math.isnan(view.episode_return) and view.terminated_at == 2
    data = json.loads(json.dumps(view.to_json(), allow_nan=False))
    assert data["rewards"][1] == "nan" and data["rewards"][3] == "inf"


def test_missing_terminal_flag_and_both_flags():
    assert codes(trajectory_view(episode(terminated=[False] * 5))) == ["trajectory-no-terminal-flag"]
    assert codes(trajectory_view(episode(truncated=[False] * 4 + [True]))) == ["trajectory-both-flags"]
    assert codes(trajectory_view(episode(terminated=[False] * 5, truncated=[False] * 4 + [True]))) == []


def test_mismatched_lengths_and_the_final_observation():
    view = trajectory_view(episode(reward=[1.0] * 4))
    assert "trajectory-length-mismatch" in codes(view)
    final = trajectory_view(episode(observation=[[0.0]] * 6))
    assert codes(final) == ["trajectory-final-observation"]


def test_aliases_nulls_and_extra_columns():
    view = trajectory_view({"obs": [[1.0, 2.0]] * 3, "actions": [[0.1, 0.2]] * 3, "rewards": [1.0, None, 2.0],
                            "dones": [False, False, True], "timeouts": [False] * 3, "value": [0.5, 0.4, 0.3]})
    assert view.columns == {"observation": "obs", "action": "actions", "reward": "rewards", "terminated": "dones",
                            "truncated": "timeouts"}
    assert codes(view) == ["trajectory-null-reward"]
    rows = view.page().rows
    assert rows[1].reward is None and rows[0].extra == {"value": 0.5}
    assert rows[0].observation == "[1, 2]"


def test_empty_and_odd_values_never_raise():
    assert trajectory_view({}).length == 0
    weird = trajectory_view({"observation": [[[1.0, 2.0], [3.0, 4.0]]], "action": [None], "reward": [0.0],
                             "terminated": [None], "truncated": [None], "note": "not a list"})
    assert weird.observation_shape == [1, 2, 2] and weird.page().rows[0].observation == "2x2 mean 2.5"
    assert "trajectory-no-terminal-flag" in codes(weird)

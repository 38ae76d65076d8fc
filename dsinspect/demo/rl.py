"""Deterministic RL episodes from a tiny 2-D point-mass "reach the goal" task simulated in numpy.

Environment ``PointReach2D-v0``: a point mass in the square [-1, 1]^2 (walls stop it) must reach a goal
disc of radius 0.1. Each step (dt = 0.1) the action (0 none, 1 +x, 2 -x, 3 +y, 4 -y) applies a unit
acceleration; velocity decays by 10% per step. Observation (6 floats): x, y, vx, vy, goal_x - x,
goal_y - y, recorded *before* the action. Reward: 10 x (distance gained) - 0.05 per step, +5 on reaching
the goal (terminated). Episodes are cut at 120 steps (truncated). The policy is an epsilon-greedy PD
controller whose epsilon is drawn per episode, so lengths range from a handful of steps to the limit.
All stored floats are float32 values (the simulation runs in float32).
"""

from __future__ import annotations

import numpy as np

ENV_NAME = "PointReach2D-v0"
OBS_DIM = 6
NUM_ACTIONS = 5
MAX_STEPS = 120
_SALT = 0x2B1E
_MASK = (1 << 64) - 1
_F = np.float32
_DT, _DECAY, _GOAL_R = _F(0.1), _F(0.9), _F(0.1)
_ACCEL = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float32)


def _rng(seed: int, episode_id: int, salt: int = _SALT) -> np.random.Generator:
    """Per-row generator so an episode depends only on (seed, episode_id)."""
    return np.random.default_rng([seed & _MASK, episode_id & _MASK, salt])


def _policy(pos: np.ndarray, vel: np.ndarray, goal: np.ndarray, eps: float, rng: np.random.Generator) -> int:
    """Epsilon-greedy PD controller: push along the axis needing the most acceleration."""
    if rng.random() < eps:
        return int(rng.integers(NUM_ACTIONS))
    want = 2.0 * (goal - pos) - 3.0 * vel
    axis = int(np.argmax(np.abs(want)))
    if abs(float(want[axis])) < 0.05:
        return 0
    return 1 + 2 * axis + (0 if want[axis] > 0 else 1)


def _step(pos: np.ndarray, vel: np.ndarray, action: int) -> tuple[np.ndarray, np.ndarray]:
    """Advance the point mass one step; walls zero the velocity component that hits them."""
    vel = (vel * _DECAY + _ACCEL[action] * _DT).astype(np.float32)
    new = (pos + vel * _DT).astype(np.float32)
    hit = np.abs(new) > 1
    vel = np.where(hit, _F(0), vel).astype(np.float32)
    return np.clip(new, _F(-1), _F(1)).astype(np.float32), vel


def simulate(rng: np.random.Generator) -> dict:
    """Run one episode and return the trajectory dict (lists of plain Python values)."""
    goal = rng.uniform(-0.9, 0.9, 2).astype(np.float32)
    angle, dist0 = rng.uniform(0, 2 * np.pi), np.exp(rng.uniform(np.log(0.15), np.log(2.5)))
    pos = np.clip(goal + dist0 * np.array([np.cos(angle), np.sin(angle)]), -1, 1).astype(np.float32)
    vel = np.zeros(2, np.float32)
    eps = float(rng.uniform(0.7, 1.0) if rng.random() < 0.3 else rng.uniform(0.0, 0.4))
    traj: dict[str, list] = {"observation": [], "action": [], "reward": [], "terminated": [], "truncated": []}
    dist = _F(np.linalg.norm(goal - pos))
    for t in range(MAX_STEPS):
        obs = np.concatenate([pos, vel, goal - pos]).astype(np.float32)
        action = _policy(pos, vel, goal, eps, rng)
        pos, vel = _step(pos, vel, action)
        new_dist = _F(np.linalg.norm(goal - pos))
        done = bool(new_dist <= _GOAL_R)
        reward = _F(_F(10) * (dist - new_dist) - _F(0.05) + (_F(5) if done else _F(0)))
        dist = new_dist
        traj["observation"].append([float(v) for v in obs])
        traj["action"].append(action)
        traj["reward"].append(float(reward))
        traj["terminated"].append(done)
        traj["truncated"].append(not done and t == MAX_STEPS - 1)
        if done:
            break
    return traj


def _row(episode_id: int, traj: dict) -> dict:
    """Wrap a trajectory with its id, env name, return and length."""
    ret = 0.0
    for r in traj["reward"]:  # float64, in step order
        ret += r
    return {"episode_id": episode_id, "env": ENV_NAME, "trajectory": traj,
            "episode_return": round(ret, 6), "length": len(traj["action"])}


def episode_rows(start_id: int, count: int, seed: int) -> list[dict]:
    """Rows ``episode_id = start_id .. start_id+count-1``, one simulated episode each."""
    return [_row(i, simulate(_rng(seed, i))) for i in range(start_id, start_id + count)]


def mutate_episode_row(row: dict, seed: int) -> dict:
    """Re-simulate the episode with another seed; same episode_id, consistent return/length."""
    rng = _rng(seed, row["episode_id"], salt=_SALT + 1)
    while True:
        new = _row(row["episode_id"], simulate(rng))
        if new["trajectory"] != row["trajectory"]:
            return new

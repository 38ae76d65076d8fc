"""What the columns of an LLM RL rollout table mean: `Meaning`, `ALIASES`, `RolloutColumns`,
`infer_meanings` (which finds each meaning's column from the names and types verl, TRL and OpenRLHF
give them). They live in `dsinspect.loaders.format.rollout_meanings`, beside the roles, since ingest and
streams record meanings in the manifest; this module is their name for the inspection core."""

from __future__ import annotations

from dsinspect.loaders.format.rollout_meanings import (
    ALIASES,
    Meaning,
    RolloutColumns,
    infer_meanings,
    reward_function_like,
)

__all__ = ["Meaning", "ALIASES", "RolloutColumns", "infer_meanings", "reward_function_like"]

"""`--meaning FIELD=MEANING` and `--check NAME=VALUE`: what a column of LLM rollouts means and what the
rollout checks need beyond the rows, given on the command line (ingest, stats, query; docs/RL.md)."""

from __future__ import annotations

import json
from typing import Any

import click

from dsinspect.errors import UserError

__all__ = ["meaning_option", "check_option", "parse_meanings", "parse_checks"]

meaning_option = click.option(
    "--meaning", "meanings", multiple=True, metavar="FIELD=MEANING",
    help="What a column of LLM rollouts means (reward, group, sampler_logprobs, loss_mask... or none), over what "
         "its field declares or its name suggests (repeatable; docs/RL.md).")
check_option = click.option(
    "--check", "checks", multiple=True, metavar="NAME=VALUE",
    help="A rollout check option over what the data declares, the value as JSON (none drops it): pad_id=151643, "
         "eos_ids=[151645], special_ids=[...], max_response_tokens=4096, logprob_gap=0.69, learner_version=120, "
         "staleness_bound=2, unscored_nan_rewards=true, rows_shown=20, positions_shown=64 (repeatable).")


def parse_meanings(values: tuple[str, ...]) -> dict[str, str | None]:
    """`field=meaning` pairs (`field=none`: no meaning) as a dict; a malformed one is a UserError naming it.
    The fields and meanings are checked where the fields are known."""
    meanings: dict[str, str | None] = {}
    for value in values:
        name, sep, meaning = value.partition("=")
        if not sep or not name or not meaning:
            raise UserError(f"--meaning {value!r}: expected FIELD=MEANING (or FIELD=none), e.g. --meaning score=reward")
        meanings[name] = None if meaning == "none" else meaning
    return meanings


def parse_checks(values: tuple[str, ...]) -> dict[str, Any]:
    """`name=value` pairs, each value read as JSON (`none`: drop what the data declares), checked as the
    rollout checks take them; the first that does not fit is a UserError naming it."""
    from dsinspect.inspect.rollout_summary import check_values

    checks: dict[str, Any] = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name or not text:
            raise UserError(f"--check {value!r}: expected NAME=VALUE, e.g. --check pad_id=151643")
        try:
            parsed = None if text == "none" else json.loads(text)
        except ValueError:
            raise UserError(f"--check {value!r}: the value is not JSON (a number, true/false, a list like [0, 2], "
                            "or none)") from None
        checks.update(check_values({name: parsed}, f"--check {value}"))
    return checks

"""Append streams: data that comes in while a job runs (LLM RL rollouts from many samplers), added to a
dataset in commits and read back in commit order; any prefix of the stream becomes an ordinary,
immutable version (`snapshot`), which diff, query and verify work on (docs/RL.md).

Owns the commit log under `<dataset>/stream/` (store/layout.py), appending to it (log.py), the learner
that reads it step by step (selection.py: which rows a step takes; learner.py) and the learner's run
record read back (learner_record.py: replay of a step, the check). May import `records`, `store`,
`format`, `dsinspect.errors`, `dsinspect.lru`.
"""

from dsinspect.loaders.stream.commits import Commit, StreamSpec
from dsinspect.loaders.stream.learner import LearnerBatch, StreamLearner, StreamTimeout
from dsinspect.loaders.stream.learner_record import (
    check_learner_run,
    commits_version,
    consumed_step,
    is_learner_run,
    read_learner_run,
)
from dsinspect.loaders.stream.log import Stream, open_stream, snapshot

__all__ = ["Stream", "open_stream", "snapshot", "Commit", "StreamSpec", "StreamLearner", "LearnerBatch",
           "StreamTimeout", "read_learner_run", "consumed_step", "check_learner_run", "is_learner_run",
           "commits_version"]

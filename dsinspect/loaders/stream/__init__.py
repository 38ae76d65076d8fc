"""Append streams: data that comes in while a job runs (LLM RL rollouts from many samplers), added to a
dataset in commits and read back in commit order; any prefix of the stream becomes an ordinary,
immutable version (`snapshot`), which diff, query and verify work on (docs/RL.md).

Owns the commit log under `<dataset>/stream/` (store/layout.py) and appending to it. May import
`store`, `format`, `dsinspect.errors`.
"""

from dsinspect.loaders.stream.commits import Commit, StreamSpec
from dsinspect.loaders.stream.log import Stream, open_stream, snapshot

__all__ = ["Stream", "open_stream", "snapshot", "Commit", "StreamSpec"]

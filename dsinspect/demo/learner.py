"""A demo learner's run record over the sample catalog's rollout stream: what `dsinspect replay --spec
demo-learner --step N`, `dsinspect runs demo-learner` and the viewers' learner-step views show out of the
box.

Two ranks take 4 rollouts each a step with a staleness bound of 1, at the policy version the demo's
samplers had (6 for the first three steps, then 7, so step 7 drops group 14, sampled by policy 4); the
job dies after step 5, having checkpointed after step 3, and comes back with one rank of 8: steps 4
and 5 of the first segment are superseded, and the record checks (`dsinspect replay --check-log
demo-learner`). Rows are the same on every run; the record's header times are the clock's.
"""

from __future__ import annotations

from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.storage import join
from dsinspect.loaders.stream import StreamLearner

__all__ = ["DEMO_LEARNER", "write_demo_learner", "learner_versions"]

DEMO_LEARNER = "demo-learner"
STREAM = "demo-rollouts"
STEPS, CHECKPOINT, CRASH = 10, 4, 6   # steps in all; the state saved before step 4; the job dies before step 6


def learner_versions(step: int) -> int:
    """The policy version the demo learner trains at, step by step."""
    return 6 if step < 3 else 7


def write_demo_learner(catalog: Catalog, name: str = DEMO_LEARNER) -> str:
    """Write `<catalog>/runs/<name>` unless it exists; its path."""
    directory = join(catalog.url.rstrip("/"), "runs", name)
    if catalog.fs.exists(join(catalog.root, "runs", name)):
        return directory
    first = [StreamLearner(catalog, STREAM, 4, rank=r, world_size=2, staleness_bound=1, record_dir=directory)
             for r in range(2)]
    state = None
    for step in range(CRASH):
        if step == CHECKPOINT:
            state = [learner.state_dict() for learner in first][0]
        for learner in first:
            learner.next_batch(learner_versions(step))
    for learner in first:
        learner.close()
    resumed = StreamLearner(catalog, STREAM, 8, staleness_bound=1, record_dir=directory)
    resumed.load_state_dict(state)
    while resumed.step < STEPS:
        resumed.next_batch(learner_versions(resumed.step))
    resumed.close()
    return directory

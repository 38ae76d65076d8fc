"""`dsinspect where` / `audit.where`: every reading of a sample (rows) or of a document (packed
sequences), equal to what reading the run forward finds, over a run's spec segments (a resume at
another world size), with one-line errors for what cannot be answered."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from dsinspect.loaders import Catalog, Field, SequenceSpec, WriteOptions, packed_run
from dsinspect.loaders.audit.where import where
from dsinspect.loaders.order.plan import locate_step, plan_batch
from dsinspect.loaders.order.spec import RunSpec, Start


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(11)
    docs = [rng.integers(1, 30_000, int(n)).tolist() for n in rng.integers(0, 200, 90)]
    fields = [Field("id", pa.int64(), "scalar", False), Field("tokens", pa.list_(pa.uint16()), "tokens", False)]
    catalog = Catalog(str(tmp_path_factory.mktemp("where") / "cat"))
    catalog.write_version("corpus", [{"id": i, "tokens": d} for i, d in enumerate(docs)], fields,
                          options=WriteOptions(shard_rows=20), tags=["v1"])
    return catalog


def forward_rows(segments: list[RunSpec], until: int) -> dict[int, list[tuple[int, int, int]]]:
    seen: dict[int, list[tuple[int, int, int]]] = {}
    for i, spec in enumerate(segments):
        end = min(until, segments[i + 1].start.step) if i + 1 < len(segments) else until
        for step in range(spec.start.step, end):
            for rank in range(spec.world_size):
                plan = plan_batch(spec, step, rank)
                for slot, index in enumerate(plan.indices.tolist()):
                    if not plan.padding[slot]:
                        seen.setdefault(index, []).append((step, rank, slot))
    return seen


def test_rows_over_two_segments_are_found_where_the_run_read_them(corpus):
    first = RunSpec.create(corpus, "corpus@v1", batch_size=4, world_size=2, seed=5, shuffle="global")
    resumed = first.replace(world_size=3, batch_size=2, start=Start(7, *locate_step(first, 7)))
    segments = [first, resumed]
    forward = forward_rows(segments, 30)
    for index in range(90):
        found, until = where(segments, f"corpus@v1:{index}", corpus, 30)
        assert until == 30
        assert [(f.step, f.rank, f.slot) for f in found] == sorted(forward.get(index, []))
    assert sum(len(v) for v in forward.values()) > 90  # more than one epoch looked at


def test_documents_of_packed_sequences_are_found_with_their_tokens(corpus, tmp_path, cli):
    spec = RunSpec.create(corpus, "corpus@v1", batch_size=3, world_size=2, seed=2, shuffle="global",
                          sequences=SequenceSpec(length=64, labels=True, eos=0, shuffle_documents=True))
    run = packed_run(corpus, spec)
    forward: dict[int, list[tuple]] = {}
    for step in range(12):
        for rank in range(2):
            for s in run.batch(step, rank):
                offset = 0
                for doc, a, b in zip(s.segments.docs.tolist(), s.segments.starts.tolist(), s.segments.stops.tolist()):
                    forward.setdefault(doc, []).append((step, rank, s.slot, s.sequence, a, b, offset))
                    offset += b - a
    for doc in range(90):
        found, _ = where(spec, f"corpus@v1:{doc}", corpus, 12)
        assert [(f.step, f.rank, f.slot, f.sequence, f.start, f.stop, f.offset) for f in found] == \
            sorted(forward.get(doc, []))
    path = tmp_path / "run.json"
    path.write_text(spec.dumps())
    doc = next(d for d, hits in forward.items() if len(hits) > 1)
    code, out, err = cli("where", f"corpus@v1:{doc}", "--spec", path, "--until-step", 12, "--catalog", corpus.url,
                         "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["until_step"] == 12
    assert [(r["step"], r["rank"], r["slot"], r["sequence"], r["start"], r["stop"], r["offset"])
            for r in data["readings"]] == sorted(forward[doc])
    code, out, _ = cli("where", f"corpus@v1:{doc}", "--spec", path, "--until-step", 12, "--catalog", corpus.url)
    assert code == 0 and f"read {len(forward[doc])} time(s) before step 12" in out and "sequence" in out


def test_what_cannot_be_answered_is_one_line_exit_2(corpus, tmp_path, cli):
    other = corpus.write_version("other", [{"id": 1, "tokens": [1, 2]}],
                                 [Field("id", pa.int64(), "scalar", False),
                                  Field("tokens", pa.list_(pa.uint16()), "tokens", False)])
    path = tmp_path / "run.json"
    path.write_text(RunSpec.create(corpus, "corpus@v1", batch_size=2, seed=1).dumps())
    cases = [
        (["other:0"], f"other@{other.id[:12]} is not read by this run (it reads corpus@"),
        (["corpus@v1"], "corpus@v1: name a sample, NAME[@REF]:INDEX"),
        (["corpus@v1:90"], "corpus@v1:90: index 90 is outside 0..89"),
        (["corpus@v1:3", "--until-step", "-1"], "--until-step -1 is negative"),
    ]
    for args, says in cases:
        code, out, err = cli("where", *args, "--spec", path, "--catalog", corpus.url)
        assert code == 2 and out == "" and says in err and err.count("\n") == 1, (args, err)
    window = tmp_path / "window.json"
    window.write_text(RunSpec.create(corpus, "corpus@v1", batch_size=2, shuffle="window").dumps())
    code, _, err = cli("where", "corpus@v1:3", "--spec", window, "--catalog", corpus.url)
    assert code == 2 and "not implemented for shuffle=window" in err
    code, out, _ = cli("where", "corpus@v1:3", "--spec", path, "--catalog", corpus.url, "--until-step", 0)
    assert code == 0 and out.strip() == "corpus@v1:3: not read before step 0"

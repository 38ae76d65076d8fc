"""Kill-and-resume: training-like runs (TorchLoader with DataLoader workers, a model step, atomic
checkpoints every k steps) are SIGKILLed at seeded points and resumed from their last checkpoint with
another world size and/or worker count (tests/kill_resume_worker.py). The whole sample stream that
training kept is checked: every batch equals batch_indices/replay for its (step, rank) with the
stored row hashes, no sample is lost or read twice in an epoch, and each run ends where it should.

Each trial's run record (one per trial, written by every segment's loaders) is checked as a user
would, with check_log: ok, no gap, no divergence. And it is tied to what training kept: its kept
lines are exactly the (step, rank) pairs of the kept stream, with those batches' fingerprints and
the segment of the loader that read them; every line that reached the disk is one the consumer
received; the superseded lines are exactly the durable lines of steps training rolled back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from kill_resume_worker import model_step, new_model  # noqa: E402

from dsinspect.loaders import (  # noqa: E402
    Catalog,
    Field,
    LoaderState,
    RunSpec,
    WriteOptions,
    batch_indices,
    epoch_order,
    read_run,
)
from dsinspect.loaders.audit.logcheck import check_log  # noqa: E402
from dsinspect.loaders.audit.replay import replay  # noqa: E402
from dsinspect.loaders.order.plan import epoch_start_step  # noqa: E402
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader  # noqa: E402
from dsinspect.loaders.records.runlog import (  # noqa: E402
    batch_fingerprint,
    decode_digests,
    digests_of,
    read_fingerprints,
    read_log,
    segment_id,
)

WORKER = Path(__file__).with_name("kill_resume_worker.py")
ROWS = 101  # not a multiple of any global batch used: every epoch has a dropped tail
DATASET = "kr"


def make_catalog(root: Path) -> Catalog:
    catalog = Catalog(str(root))
    fields = [Field("id", pa.int64(), "scalar", nullable=False), Field("tokens", pa.list_(pa.int32()), "tokens")]
    rows = [{"id": i, "tokens": list(range(i % 7))} for i in range(ROWS)]
    catalog.write_version(DATASET, rows, fields, options=WriteOptions(row_group_rows=10, shard_rows=40))
    return catalog


def run_harness(catalog: Catalog, out: Path, *, trials: int, seed: int, first: int = 0, timeout: float = 600) -> dict:
    """Run the harness in a fresh interpreter (torch imported once there); its summary line."""
    spec = RunSpec.create(catalog, DATASET, seed=0, batch_size=4, world_size=1, shuffle="global")
    config = {"catalog": catalog.url, "out": str(out), "trials": trials, "first": first, "seed": seed, "epochs": 2,
              "spec": spec.to_json(), "worlds": [1, 2, 3], "workers": [0, 1, 2], "batch_sizes": [3, 4],
              "kills": [1, 2]}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"config-{first}.json"
    path.write_text(json.dumps(config))
    root = str(Path(__file__).resolve().parents[1])  # the package under test, installed or not
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(WORKER), str(path)], capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert done.returncode == 0, f"harness failed ({done.returncode})\n{done.stdout}\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass
class Figures:
    """What a set of trials proved; the counts RELIABILITY.md reports."""

    trials: int = 0
    kill_points: int = 0          # segments ended by SIGKILL and resumed from a checkpoint
    world_changes: int = 0        # resumes with another world size
    worker_changes: int = 0       # resumes with another DataLoader worker count
    batches_checked: int = 0      # kept batches, each equal to batch_indices + stored row hashes
    samples_checked: int = 0
    replays_checked: int = 0      # batches also compared with dsinspect.replay (first batch after each resume)
    lost: int = 0
    duplicated: int = 0
    kills_mid_checkpoint: int = 0  # kills that landed while a checkpoint was being written
    record_lines: int = 0          # step lines in the trials' run records
    record_lines_checked: int = 0  # kept lines check_log compared with replay (each = a kept batch)
    superseded: int = 0            # durable lines of steps training rolled back (check_log's count, = ours)
    trials_with_superseded: int = 0
    lines_lost_to_kills: int = 0   # batches received after the last state_dict whose lines a kill lost: no gap
    digests_checked: int = 0       # kept lines whose per-sample digests equal the batch's row hashes
    kill_after_batches: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "kill_after_batches"}


def read_batches(path: Path) -> list[dict]:
    """A rank's batch log; a line cut by SIGKILL (no newline yet) is the only one allowed to be partial."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    return [json.loads(line) for line in lines[:-1]]  # the last piece is "" or a cut line


def check_trial(trial_dir: Path, catalog: Catalog, hashes: list[str], figures: Figures) -> None:
    trial = json.loads((trial_dir / "trial.json").read_text())
    base = RunSpec.from_json(trial["spec"])
    segments = trial["segments"]
    resumes = [s["resume"] for s in segments[1:]]
    kept = []  # (epoch, position, index) of every sample training kept
    received = {}  # (segment number, rank) -> what that rank's loop received, for the record's check
    rank0 = []  # the index lists of rank 0's kept batches, in training order: the model saw these
    starts = []  # (epoch, global batch) where each segment started, in order
    for j, segment in enumerate(segments):
        seg_dir = Path(segment["dir"])
        # what training kept of this segment: the steps before the checkpoint the next segment resumed from
        until = (_checkpoint_step(resumes[j]) if resumes[j] else 0) if j + 1 < len(segments) else None
        for name in os.listdir(seg_dir):  # every checkpoint on disk is whole (atomic writes under SIGKILL)
            if name.startswith("ckpt-"):
                json.loads((seg_dir / name).read_text())
            elif name.startswith(".tmp-") and "ckpt-" in name:
                figures.kills_mid_checkpoint += 1  # a temp file the kill cut off: never read by a resume
        if j:
            prev = segments[j - 1]
            assert prev["killed"] or prev["kill"] is None or "delay" in prev["kill"], "a step kill did not happen"
            figures.kill_points += prev["killed"]
            figures.world_changes += prev["world"] != segment["world"]
            figures.worker_changes += prev["workers"] != segment["workers"]
        started = _checkpoint_step(segment["resume"]) if segment["resume"] else 0
        for rank in range(segment["world"]):
            spec_file = seg_dir / f"spec-rank{rank}.json"
            records = read_batches(seg_dir / f"log-rank{rank}.jsonl")
            if not spec_file.exists():  # killed before the rank had set up: it read nothing
                assert segment["killed"] and not records
                continue
            spec = RunSpec.from_json(json.loads(spec_file.read_text()))
            if rank == 0:
                starts.append((spec.start.epoch, spec.global_batch))
            assert spec.order_hash == base.order_hash and spec.world_size == segment["world"]
            assert spec.start.step == started, f"{seg_dir} rank {rank} resumed at {spec.start.step}, not {started}"
            steps = [r["step"] for r in records]
            assert steps == list(range(started, started + len(steps))), f"{seg_dir} rank {rank}: steps {steps[:5]}..."
            received[(j, rank)] = Received(spec, _parent(segment["resume"]), started, until, records)
            if until is not None:
                assert len(steps) >= until - started, f"{seg_dir} rank {rank} checkpointed a step it did not read"
            else:
                assert (seg_dir / f"done-rank{rank}").exists()
                assert started + len(steps) == epoch_start_step(spec, trial["epochs"]), "the run did not finish"
            for r in records:
                if until is not None and r["step"] >= until:
                    continue  # read after the last checkpoint: rolled back with the model, read again later
                want = batch_indices(spec, r["step"], rank).tolist()
                assert r["indices"] == want, f"{seg_dir} rank {rank} step {r['step']}: {r['indices']} != {want}"
                assert r["row_hashes"] == [hashes[i] for i in want], f"{seg_dir} rank {rank} step {r['step']}"
                kept += [(r["epoch"], p, i) for p, i in zip(r["positions"], r["indices"])]
                if rank == 0:
                    rank0.append(want)
                figures.batches_checked += 1
                figures.samples_checked += len(want)
            if j and records:  # the first batch after a resume, against an independent read path
                first = replay(spec, records[0]["step"], rank, catalog=catalog)
                assert first.batches[0].indices.tolist() == records[0]["indices"]
                assert [h.hex() for h in first.batches[0].row_hashes] == records[0]["row_hashes"]
                figures.replays_checked += 1
        if segment["killed"]:
            figures.kill_after_batches.append(segment["progress_at_kill"][0])
    _check_epochs(base, kept, starts, trial["epochs"], figures)
    _check_model(rank0, Path(segments[-1]["dir"]) / "done-rank0")
    check_record(trial_dir / "record", segments, catalog, hashes, received, figures)
    figures.trials += 1


@dataclass
class Received:
    """One rank of one segment: its spec, the record segment it resumed from, the steps training
    kept of it ([started, until); until None: to the end) and the batches its loop logged."""

    spec: RunSpec
    parent: str | None
    started: int
    until: int | None
    records: list[dict]

    def kept(self, step: int) -> bool:
        return self.started <= step and (self.until is None or step < self.until)


def check_record(record: Path, segments: list[dict], catalog: Catalog, hashes: list[str],
                 received: dict[tuple[int, int], Received], figures: Figures) -> None:
    """The trial's run record, checked as a user would (check_log: ok, no gap, no divergence), then
    tied to what training kept and to what each rank's loop received."""
    result = check_log(str(record), str(record), catalog=catalog)
    assert result.ok and not result.gaps and result.divergence is None, f"{record}: {result.to_json()}"
    run = read_run(str(record))
    kept = run.kept()
    every = list(read_fingerprints(str(record)))
    assert result.checked == len(kept) and result.superseded == run.superseded
    assert len(kept) + run.superseded == len(every), f"{record}: kept + superseded != step lines"
    # the kept lines are the kept stream: same (step, rank) pairs, batches and segments
    want = {(r["step"], rank): (got, r) for (_, rank), got in received.items() for r in got.records
            if got.kept(r["step"])}
    have = {(line["step"], line["rank"]): line for line in kept}
    assert have.keys() == want.keys(), f"{record}: kept lines {sorted(have.keys() ^ want.keys())[:5]}... differ"
    for key, line in have.items():
        got, r = want[key]
        row_hashes = [bytes.fromhex(h) for h in r["row_hashes"]]
        assert line["fingerprint"] == batch_fingerprint(row_hashes), f"{record}: step, rank {key}"
        assert line["seg"] == segment_id(got.spec, got.parent), f"{record}: step, rank {key} in another segment"
        if "samples" in line:
            assert decode_digests(line["samples"], line["n"]) == digests_of(row_hashes), f"{record}: {key}"
            figures.digests_checked += 1
    # every durable line, by the segment that wrote it: what its loop received, from its start on
    superseded = 0
    for (j, rank), lines in _record_blocks(record, segments).items():
        if not lines:
            continue
        got = received[(j, rank)]
        steps = [line["step"] for line in lines]
        assert steps == list(range(got.started, got.started + len(lines))), f"{record} segment {j} rank {rank}"
        assert len(lines) <= len(got.records) + 1  # the consumer records a batch just before the loop logs it
        for line, r in zip(lines, got.records):
            assert line["fingerprint"] == batch_fingerprint([bytes.fromhex(h) for h in r["row_hashes"]])
        for line in lines[len(got.records):]:
            want_hashes = [bytes.fromhex(hashes[i]) for i in batch_indices(got.spec, line["step"], rank).tolist()]
            assert line["fingerprint"] == batch_fingerprint(want_hashes)
        if got.until is None:
            assert len(lines) == len(got.records), f"{record}: the last segment's lines did not all reach the disk"
        else:  # state_dict() made every line before the checkpoint durable
            assert got.started + len(lines) >= got.until, f"{record} segment {j} rank {rank}: lines lost before a state"
            figures.lines_lost_to_kills += max(0, len(got.records) - len(lines))
        superseded += sum(not got.kept(step) for step in steps)
    assert run.superseded == superseded, f"{record}: {run.superseded} lines superseded, {superseded} rolled back"
    figures.record_lines += len(every)
    figures.record_lines_checked += result.checked
    figures.superseded += superseded
    figures.trials_with_superseded += superseded > 0


def _record_blocks(record: Path, segments: list[dict]) -> dict[tuple[int, int], list[dict]]:
    """Each rank file's step lines, by the harness segment whose process wrote them: each process
    writes a header first (segments run one after another, so its time says which)."""
    starts = [s["wall_start"] for s in segments]
    blocks: dict[tuple[int, int], list[dict]] = {}
    for path in sorted((record / "fingerprints").glob("rank-*.jsonl")):
        rank, header = int(path.stem.split("-")[1]), None
        for line in read_log(str(path)):
            if "segment" in line:
                header = line
                j = max(k for k, start in enumerate(starts) if start <= line["time"])
                blocks.setdefault((j, rank), [])
                continue
            assert header is not None and line["seg"] == header["segment"], f"{path}: a line outside its segment"
            blocks[(j, rank)].append(line)
    return blocks


def _parent(checkpoint: str | None) -> str | None:
    """The record segment named by the loader state a segment resumed from."""
    if checkpoint is None:
        return None
    return LoaderState.from_json(json.loads(Path(checkpoint).read_text())["state"]).segment


def _check_epochs(base: RunSpec, kept: list, starts: list, epochs: int, figures: Figures) -> None:
    """Per epoch, count what was lost and what was read twice; every position read holds the sample
    the epoch's order puts there. Lost: a gap in positions 0..P-1, or an unread tail as long as the
    global batch of the spec in force when the epoch ended (GUARANTEES.md 5: the last segment that
    started inside it, or before it). That batch can be larger than the one that read the last
    step: a run resumed near an epoch's end with a larger world skips the rest of that epoch."""
    for epoch in range(epochs):
        entries = [(p, i) for e, p, i in kept if e == epoch]
        positions = [p for p, _ in entries]
        distinct = set(positions)
        figures.duplicated += len(positions) - len(distinct)
        end = max(distinct, default=-1) + 1
        in_force = [g for e, g in starts if e <= epoch][-1]
        figures.lost += end - len(distinct)  # gaps before the last position read
        figures.lost += max(0, ROWS - end - (in_force - 1))  # a tail the drop policy does not explain
        order = epoch_order(base, epoch)
        assert all(order[p] == i for p, i in entries), f"epoch {epoch}: a sample not at its place in the order"


def _check_model(batches: list[list[int]], final: Path) -> None:
    """The model and the loader state were checkpointed together: replaying the model step over
    exactly the batches training kept gives, bit for bit, the model the run ended with."""
    model = new_model()
    for indices in batches:  # the dataset's row i has id i and i % 7 tokens
        model_step(model, {"id": torch.tensor(indices), "tokens": {"offsets": torch.tensor(
            np.concatenate([[0], np.cumsum([i % 7 for i in indices])]))}})
    ended = json.loads(final.read_text())
    assert {"weight": model.weight.tolist(), "bias": model.bias.tolist()} == ended, "model and loader state diverged"


def _checkpoint_step(path: str) -> int:
    return json.loads(Path(path).read_text())["step"]


def check_trials(out: Path, catalog: Catalog, count: int) -> Figures:
    version = catalog.resolve(DATASET)
    hashes = [h.hex() for h in _hash_column(version)]
    figures = Figures()
    for trial_dir in sorted(out.glob("trial-*")):
        check_trial(trial_dir, catalog, hashes, figures)
    assert figures.trials == count
    return figures


def _hash_column(version) -> list[bytes]:
    return [version.row_hash(i) for i in range(version.num_rows)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fifty_kill_and_resume_trials_lose_and_repeat_nothing(tmp_path):
    catalog = make_catalog(tmp_path / "catalog")
    summary = run_harness(catalog, tmp_path / "runs", trials=50, seed=1)
    figures = check_trials(tmp_path / "runs", catalog, 50)
    print("kill-and-resume figures:", json.dumps({**figures.to_json(), "harness_seconds": summary["seconds"]}))
    assert figures.trials >= 50
    assert figures.kill_points >= 50 and figures.kill_points == summary["killed"]
    assert figures.world_changes >= 20 and figures.worker_changes >= 20
    assert figures.lost == 0 and figures.duplicated == 0
    assert figures.replays_checked >= 50
    assert len(set(figures.kill_after_batches)) >= 10, "kill points should spread over the run"
    # the run records: every kept batch is a kept line, checked by check_log; the rolled-back steps'
    # durable lines are the superseded ones (each trial's own count is checked exactly in check_record)
    assert figures.record_lines_checked == figures.batches_checked
    assert figures.record_lines == figures.record_lines_checked + figures.superseded
    assert figures.superseded > 0 and figures.trials_with_superseded >= 10
    assert figures.digests_checked > 0


def test_a_line_cut_by_a_kill_leaves_the_resumed_record_readable(tmp_path):
    """A SIGKILL in the middle of a flush (a write of several pages can stop short at a page, and
    a machine crash keeps what reached the disk) leaves the rank file ending in part of a line.
    RUN_RECORDS.md: such a line is ignored. The job resumes from its last state, and the resumed
    loader appends to the same file: the record must still read, and check."""
    catalog = make_catalog(tmp_path / "catalog")
    spec = RunSpec.create(catalog, DATASET, seed=0, batch_size=4, world_size=1, shuffle="global")
    record = tmp_path / "record"
    loader = TorchLoader(TorchBatches(spec, catalog, columns=["id"], rank=0, record_dir=str(record)))
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    state = loader.state_dict()  # steps 0..2 durable
    next(batches)
    loader.close()  # the line of step 3 written out...
    path = record / "fingerprints" / "rank-00000.jsonl"
    written = path.read_bytes()
    assert written.endswith(b"}\n")
    path.write_bytes(written[:-20])  # ...and cut short, as the kill in the middle of that write leaves it
    resumed = TorchLoader(TorchBatches(spec, catalog, columns=["id"], rank=0, record_dir=str(record)))
    resumed.load_state_dict(state)
    assert [int(b["step"]) for _, b in zip(range(3), resumed)] == [3, 4, 5]
    resumed.close()
    result = check_log(str(record), str(record), catalog=catalog)
    assert result.ok and result.checked == 6 and not result.gaps, result.to_json()

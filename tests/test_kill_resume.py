"""Kill-and-resume: training-like runs (TorchLoader with DataLoader workers, a model step, atomic
checkpoints every k steps) are SIGKILLed at seeded points and resumed from their last checkpoint with
another world size and/or worker count (tests/kill_resume_worker.py). The whole sample stream that
training kept is checked: every batch equals batch_indices/replay for its (step, rank) with the
stored row hashes, no sample is lost or read twice in an epoch, and each run ends where it should."""

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

from dsinspect.loaders import Catalog, Field, RunSpec, WriteOptions, batch_indices, epoch_order  # noqa: E402
from dsinspect.loaders.audit.replay import replay  # noqa: E402
from dsinspect.loaders.order.plan import epoch_start_step  # noqa: E402

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
    kill_after_batches: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "kill_after_batches"}


def read_log(path: Path) -> list[dict]:
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
            records = read_log(seg_dir / f"log-rank{rank}.jsonl")
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
    figures.trials += 1


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

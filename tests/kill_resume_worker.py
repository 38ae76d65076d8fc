"""Kill-and-resume harness: training-like runs over TorchLoader, SIGKILLed at seeded points, resumed
from their last checkpoint with possibly another world size or DataLoader worker count.

    python tests/kill_resume_worker.py CONFIG.json

CONFIG = {"catalog": URL, "dataset": NAME, "out": DIR, "trials": N, "seed": S, "epochs": E,
          "worlds": [..], "workers": [..], "batch_sizes": [..], "kills": [min, max]}

This process imports torch and dsinspect once, then os.fork()s every rank of every run segment (a
fresh interpreter per segment would cost ~2 s of imports). A rank is its own process group, so one
killpg takes it and its DataLoader workers down at once, like a node dying. Each rank logs every
batch it consumes (one JSON line, flushed) and checkpoints {loader state, model, step} atomically
every k steps; the checkpoint of a step counts once every rank of the segment wrote it. A
finished rank writes its final model to done-rank<r>; every rank resumes rank 0's model.

The loaders also keep a run record, as a real job would: one per trial (<trial>/record), written by
every segment (TorchBatches(record_dir=...), per-sample digests on in odd trials). Each checkpoint
holds `loader.state_dict()`, which makes the record durable up to its step and names the segment.

Per trial, <out>/trial-NNN/trial.json records the segments (world, workers, where each resumed,
whether it was killed and after how many batches); tests/test_kill_resume.py checks the streams.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import signal
import sys
import time

import numpy as np
import torch
from fsspec.implementations.local import LocalFileSystem

from dsinspect.loaders import LoaderState, RunSpec
from dsinspect.loaders.order.plan import epoch_start_step
from dsinspect.loaders.pytorch import TorchBatches, TorchLoader
from dsinspect.loaders.store.storage import write_atomic

MAX_RANKS = 8
_FS = LocalFileSystem()


# -- one rank of one segment (a forked child) ------------------------------------------------------

def run_rank(segment: dict, spec: RunSpec, catalog: str, epochs: int, rank: int, progress: np.ndarray) -> None:
    """Train until `epochs` epochs are done: log each batch, checkpoint every `every` steps."""
    torch.set_num_threads(1)
    seg_dir = segment["dir"]
    dataset = TorchBatches(spec.replace(world_size=segment["world"]), catalog, columns=["id", "tokens"], rank=rank,
                           record_dir=segment["record"], record_samples=segment["samples"])
    loader = TorchLoader(dataset, num_workers=segment["workers"])
    model = new_model()
    if segment["resume"]:
        with open(segment["resume"]) as f:
            checkpoint = json.load(f)
        loader.load_state_dict(checkpoint["state"])
        with torch.no_grad():
            model.weight.copy_(torch.tensor(checkpoint["model"]["weight"], dtype=torch.float64))
            model.bias.copy_(torch.tensor(checkpoint["model"]["bias"], dtype=torch.float64))
    write_atomic(_FS, f"{seg_dir}/spec-rank{rank}.json", json.dumps(dataset.spec.to_json()).encode())
    with open(f"{seg_dir}/log-rank{rank}.jsonl", "a") as log:
        while loader.epoch < epochs:
            for batch in loader:
                model_step(model, batch)
                step = int(batch["step"])
                log.write(json.dumps({"step": step, "epoch": int(batch["epoch"]), "indices": batch["indices"].tolist(),
                                      "positions": batch["positions"].tolist(),
                                      "row_hashes": [bytes(h).hex() for h in batch["row_hashes"].numpy()]}) + "\n")
                log.flush()
                progress[rank] += 1
                if loader.step % segment["every"] == 0:
                    checkpoint = {"step": loader.step, "state": loader.state_dict(),
                                  "model": {"weight": model.weight.tolist(), "bias": model.bias.tolist()}}
                    path = f"{seg_dir}/ckpt-{loader.step:06d}-rank{rank}.json"
                    write_atomic(_FS, path, json.dumps(checkpoint).encode())
    loader.close()  # the record's last lines out: os._exit below skips the finalizers an interpreter exit runs
    final = {"weight": model.weight.tolist(), "bias": model.bias.tolist()}
    write_atomic(_FS, f"{seg_dir}/done-rank{rank}", json.dumps(final).encode())


def new_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(2, 1, dtype=torch.float64)


def model_step(model: torch.nn.Module, batch: dict) -> None:
    """A tiny SGD step on the batch (by hand: torch.optim imports torch._dynamo, ~10 s per fork)."""
    ids = batch["id"].to(torch.float64)
    lengths = torch.diff(batch["tokens"]["offsets"]).to(torch.float64)
    loss = (model(torch.stack([ids / 1000, lengths], 1)).squeeze(1) - 1).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 1e-3 * p.grad


def fork_rank(*args) -> int:
    pid = os.fork()
    if pid == 0:  # the child: its own process group, so killpg reaches its DataLoader workers too
        code = 1
        try:
            os.setpgid(0, 0)
            run_rank(*args)
            code = 0
        except BaseException:  # noqa: BLE001 (the forked child prints any failure, then exits 1)
            import traceback
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    try:
        os.setpgid(pid, pid)  # also from the parent: no window where a kill misses the workers
    except OSError:
        pass
    return pid


# -- the parent: segments, kills, resumes ------------------------------------------------------------

def run_segment(segment: dict, spec: RunSpec, cfg: dict, kill: dict | None, progress: np.ndarray) -> dict:
    """Fork the ranks; SIGKILL them all when rank 0 has consumed kill["after"] batches (or after
    kill["delay"] seconds); wait for them. The segment's outcome."""
    progress[:] = 0
    os.makedirs(segment["dir"], exist_ok=True)
    wall = time.time()  # the record's segment headers written by these ranks carry times from here on
    pids = [fork_rank(segment, spec, cfg["catalog"], cfg["epochs"], r, progress) for r in range(segment["world"])]
    started, killed, at = time.monotonic(), False, None
    while kill is not None:
        if all(_exited(pid) is not None for pid in pids):
            break
        due = (progress[0] >= kill["after"]) if "after" in kill else (time.monotonic() - started >= kill["delay"])
        if due:
            at = [int(p) for p in progress[:segment["world"]]]
            for pid in pids:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed = True
            break
        time.sleep(0.0005)
    codes = [_wait(pid) for pid in pids]
    if not killed:
        assert all(c == 0 for c in codes), f"segment {segment['dir']}: ranks exited with {codes}"
    return {**segment, "killed": killed, "progress_at_kill": at, "exit_codes": codes, "wall_start": wall,
            "seconds": round(time.monotonic() - started, 3)}


_REAPED: dict[int, int] = {}


def _exited(pid: int) -> int | None:
    if pid in _REAPED:
        return _REAPED[pid]
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        _REAPED[pid] = os.waitstatus_to_exitcode(status)
        return _REAPED[pid]
    return None


def _wait(pid: int) -> int:
    if pid not in _REAPED:
        _REAPED[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return _REAPED[pid]


def latest_checkpoint(segment: dict) -> str | None:
    """The checkpoint of the latest step that every rank of the segment wrote (rank 0's file)."""
    names = os.listdir(segment["dir"])
    steps = {}
    for name in names:
        if name.startswith("ckpt-") and name.endswith(".json"):
            step, rank = name[5:-5].split("-rank")
            steps.setdefault(int(step), set()).add(int(rank))
    complete = [s for s, ranks in steps.items() if len(ranks) == segment["world"]]
    return os.path.join(segment["dir"], f"ckpt-{max(complete):06d}-rank0.json") if complete else None


def run_trial(number: int, cfg: dict, progress: np.ndarray) -> dict:
    rng = random.Random(cfg["seed"] * 100_003 + number)
    base = RunSpec.from_json(cfg["spec"])
    spec = base.replace(seed=rng.randrange(1 << 30), batch_size=rng.choice(cfg["batch_sizes"]))
    trial_dir = os.path.join(cfg["out"], f"trial-{number:04d}")
    kills = rng.randint(*cfg["kills"])
    placement = (rng.choice(cfg["worlds"]), rng.choice(cfg["workers"]))
    segments, resume = [], None
    record = {"record": os.path.join(trial_dir, "record"), "samples": True if number % 2 else "auto"}
    for j in range(kills + 1):
        if j:  # every resume changes the world size, the worker count or both
            options = [(w, n) for w in cfg["worlds"] for n in cfg["workers"] if (w, n) != placement]
            placement = rng.choice(options)
        segment = {"dir": os.path.join(trial_dir, f"seg{j}"), "world": placement[0], "workers": placement[1],
                   "every": rng.randint(2, 4), "resume": resume, **record}
        kill = None
        if j < kills:
            remaining = _remaining_steps(spec.replace(world_size=placement[0]), resume, cfg["epochs"])
            kill = ({"delay": rng.uniform(0.0, 0.4)} if rng.random() < 0.2
                    else {"after": rng.randint(0, max(0, remaining - 2))})
        outcome = run_segment(segment, spec, cfg, kill, progress)
        outcome["kill"] = kill
        segments.append(outcome)
        resume = latest_checkpoint(segment) or resume
    trial = {"trial": number, "spec": spec.to_json(), "epochs": cfg["epochs"], "segments": segments}
    write_atomic(_FS, os.path.join(trial_dir, "trial.json"), json.dumps(trial, indent=1).encode())
    return trial


def _remaining_steps(spec: RunSpec, resume: str | None, epochs: int) -> int:
    if resume:
        with open(resume) as f:
            spec = LoaderState.from_json(json.load(f)["state"]).resume_spec(spec)
    return epoch_start_step(spec, epochs) - spec.start.step


def _preload() -> None:
    """Import now what the ranks would import lazily after each fork (pyarrow's to_numpy loads pandas)."""
    import pyarrow as pa
    pa.array([1, None]).to_numpy(zero_copy_only=False)
    import torch.utils.data._utils.worker  # noqa: F401


def main(config_path: str) -> None:
    with open(config_path) as f:
        cfg = json.load(f)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    _preload()
    model_step(new_model(),  # warm up autograd before forking
               {"id": torch.arange(3), "tokens": {"offsets": torch.tensor([0, 1, 3, 3])}})
    progress = np.frombuffer(mmap.mmap(-1, 8 * MAX_RANKS), dtype=np.int64)  # shared with the forked ranks
    started = time.monotonic()
    trials = [run_trial(cfg.get("first", 0) + t, cfg, progress) for t in range(cfg["trials"])]
    print(json.dumps({"trials": len(trials), "seconds": round(time.monotonic() - started, 2),
                      "segments": sum(len(t["segments"]) for t in trials),
                      "killed": sum(s["killed"] for t in trials for s in t["segments"])}))


if __name__ == "__main__":
    main(sys.argv[1])

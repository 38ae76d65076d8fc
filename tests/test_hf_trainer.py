"""Hugging Face's `Trainer` over `as_iterable`: the real Trainer (transformers + accelerate, CPU) takes
a rank's rows in dsinspect's order, step for step, resumes from a LoaderState in O(1) (Trainer's own
data skip, which re-reads every skipped batch, turned off), and the record it leaves passes the log
check; and under torchrun, two processes each get their own rank's rows."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from hf_trainer_worker import Seen  # noqa: E402
from token_catalog import token_catalog  # noqa: E402

from dsinspect.loaders import Catalog, RunSpec, batch_indices  # noqa: E402
from dsinspect.loaders.audit.logcheck import check_log  # noqa: E402
from dsinspect.loaders.hf import as_iterable, resume_state  # noqa: E402

ROWS, WIDTH, BATCH = 96, 8, 4


def train(tmp_path, dataset, steps: int) -> list[list[int]]:
    model = Seen()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=BATCH, use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", dataloader_num_workers=0,
        remove_unused_columns=False, ignore_data_skip=True)
    transformers.Trainer(model=model, args=args, train_dataset=dataset,
                         data_collator=transformers.default_data_collator).train()
    return model.seen


def test_trainer_takes_a_ranks_rows_in_order_resumes_from_a_state_and_leaves_a_checked_record(tmp_path):
    catalog = token_catalog(tmp_path / "catalog", "t", ROWS, WIDTH, 5, shard_rows=32, row_group_rows=8)
    spec = RunSpec.create(catalog, "t", seed=9, batch_size=BATCH, world_size=2, shuffle="global")
    record = str(tmp_path / "run")
    seen = train(tmp_path, as_iterable(spec, catalog, rank=1, columns=["tokens"], record_dir=record), 5)
    assert seen == [batch_indices(spec, s, 1).tolist() for s in range(5)]
    # a job restarted from the LoaderState saved after 3 steps: Trainer starts there, nothing re-read
    saved = resume_state(spec, 3, rank=1, recorded=True)
    resumed = train(tmp_path, as_iterable(spec, catalog, rank=1, columns=["tokens"], start_state=saved,
                                          record_dir=record), 3)
    assert resumed == [batch_indices(spec, s, 1).tolist() for s in range(3, 6)]
    result = check_log(record, record, catalog=Catalog(catalog.url), ranks=[1])
    assert result.ok and result.segments == 2 and result.steps[0] == 0 and result.steps[1] >= 5, result.to_json()
    assert np.unique([i for batch in seen + resumed for i in batch]).size == 6 * BATCH


@pytest.mark.slow
def test_trainer_under_torchrun_gives_each_process_its_own_ranks_rows(tmp_path):
    catalog = token_catalog(tmp_path / "catalog", "t", ROWS, WIDTH, 5, shard_rows=32, row_group_rows=8)
    spec = RunSpec.create(catalog, "t", seed=9, batch_size=BATCH, world_size=2, shuffle="global")
    record, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"catalog": catalog.url, "spec": spec.to_json(), "steps": 4, "record": str(record),
                               "out": str(out)}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(Path(__file__).with_name("hf_trainer_worker.py")), str(job)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, f"torchrun failed\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    for rank in range(2):
        seen = json.loads((out / f"seen-rank{rank}.json").read_text())
        assert seen == [batch_indices(spec, s, rank).tolist() for s in range(4)], f"rank {rank}"
    result = check_log(str(record), str(record), catalog=Catalog(catalog.url))
    assert result.ok and result.steps[0] == 0 and result.steps[1] >= 3, result.to_json()

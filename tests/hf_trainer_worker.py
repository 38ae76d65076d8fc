"""One torchrun process for tests/test_hf_trainer.py: the real Trainer over `as_iterable(rank=None)`
(every rank's rows, one `datasets` shard each), which accelerate splits so that each process takes
its own rank's shard. Writes <out>/seen-rank<r>.json: the sample indices of every batch the model got.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/hf_trainer_worker.py JOB.json

JOB = {"catalog": URL, "spec": RUN SPEC JSON, "steps": N, "record": DIR, "out": DIR}
"""

import json
import os
import sys

import torch
import transformers

from dsinspect.loaders import RunSpec
from dsinspect.loaders.hf import as_iterable


class Seen(torch.nn.Module):
    """A model that keeps the sample indices of every batch it is fed (one parameter to optimize)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[list[int]] = []

    def forward(self, tokens, _index, _step):
        self.seen.append(_index.tolist())
        return {"loss": (self.weight - tokens.float().mean() / 1000) ** 2}


def main(job_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    spec = RunSpec.from_json(job["spec"])
    model = Seen()
    args = transformers.TrainingArguments(
        output_dir=os.path.join(job["out"], "trainer"), max_steps=job["steps"],
        per_device_train_batch_size=spec.batch_size, use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", remove_unused_columns=False, ignore_data_skip=True,
        accelerator_config={"dispatch_batches": False}, ddp_backend="gloo")
    dataset = as_iterable(spec, job["catalog"], rank=None, columns=["tokens"], record_dir=job["record"])
    transformers.Trainer(model=model, args=args, train_dataset=dataset,
                         data_collator=transformers.default_data_collator).train()
    rank = int(os.environ["RANK"])
    with open(os.path.join(job["out"], f"seen-rank{rank}.json"), "w") as f:
        json.dump(model.seen, f)
    # The process group the Trainer started, stopped before exit as a training script should: left to the
    # interpreter's exit, gloo's threads were once destroyed still running and rank 0 aborted after the
    # run had finished ("terminate called without an active exception", SIGABRT; CI run 19).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
